"""`planner suggest --write-plan`: the written plan round trips through check / explain / launch,
names the launch targets that refuse it, never overwrites, and repeats the warnings check gives.

Oracles: `planner check` and `planner explain` on the written file (the same layout and figures
as the suggestion), and the launch targets' own refusals.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from paths import REPO
from suggest_runs import LAYOUT_KEYS

PLANS = REPO / "tests" / "data" / "plans"


# ----------------------------------------------------------------------------- --write-plan


def _round_trip(
    argv: list[str], plan: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """suggest --write-plan, then check and explain the written file: (suggested, checked)."""
    code, out, err = run(["suggest", *argv, "--json", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    top = json.loads(out)["candidates"][0]
    assert plan.is_file()
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    code, out, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    explained = json.loads(out)
    assert explained["parallel"] == checked["parallel"]
    return top, checked


def _same_layout(top: dict[str, Any], checked: dict[str, Any]) -> None:
    extra = ("pipeline_layers", "sequence_parallel", "tp_comm_overlap", "ep_comm_overlap")
    extra += ("overlap_grad_reduce",)
    for key in (*LAYOUT_KEYS, *extra, "overlap_param_gather"):
        assert checked["parallel"][key] == top["parallel"][key], key
    assert checked["fits"] is True
    assert checked["memory"]["peak_gib"] == top["memory"]["peak_gib"]
    assert checked["performance"]["step_time_s"] == top["performance"]["step_time_s"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--model", "mixtral-8x7b", "--num-gpus", "16", "--seq-length", "4096"],
        # the EP all-to-all overlap on top: the plan keeps it and launch passes Megatron's flags
        [
            *("--model", "mixtral-8x7b", "--num-gpus", "64", "--seq-length", "4096"),
            *("--global-batch-size", "256"),
        ],
        # an uneven split on top (micro-batches of 1: Llama 3.1 8B's output layer, 4096 x
        # 128,256 = 525M weights, is 2.4 of its 218M-weight layers, so the last rank gives up
        # layers: 17 / 15): pipeline_layers must survive the round trip
        [
            *("--model", "llama3.1-8b", "--num-gpus", "16", "--seq-length", "4096"),
            *("--global-batch-size", "64", "--tp", "2", "--pp", "2", "--vpp", "1", "--no-cp"),
            *("--mbs", "1"),
        ],
        [str(PLANS / "hf-llama2-7b.toml")],  # hf_config relative to the job file
        [str(PLANS / "inline-overrides.toml"), "--max-pp", "2"],  # inline model, tier overrides
        # every non-Megatron switch and GPU-variant override must survive the round trip
        [str(PLANS / "torchtitan-style.toml"), "--max-pp", "2", "--recompute", "selective"],
        # forced-balance routing and partial CUDA graphs too
        [str(PLANS / "moe-forced-graphs.toml"), "--max-pp", "2"],
    ],
    ids=[
        *("default", "moe", "moe-ep-overlap", "uneven"),
        *("hf-config", "inline-overrides", "torchtitan-style", "moe-forced-graphs"),
    ],
)
def test_write_plan_round_trips(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "sub" / "plan.toml"
    plan.parent.mkdir()
    top, checked = _round_trip(argv, plan, capsys)
    _same_layout(top, checked)
    if "--pp" in argv:
        assert top["parallel"]["pipeline_layers"] == [17, 15]
    if "--recompute" in argv:
        text = plan.read_text()
        for line in (
            "power_limit_w = 500",
            "hbm_bandwidth_tb_per_s = 2.4",
            'optimizer_state_dtype = "bf16"',
            "fused_norm = false",
            "fused_swiglu = false",
            'cross_entropy = "pytorch"',
            "sp_keeps_gathered_input = true",
            "tp_backward_overlap = false",
        ):
            assert line in text, line
        assert top["parallel"]["recompute"] == "selective"
    code, out, err = run(["launch", str(plan), "--target", "megatron-args"], capsys)
    assert code == 0, err
    assert f"--tensor-model-parallel-size {top['parallel']['tp']}" in out
    if argv and argv[0].endswith("moe-forced-graphs.toml"):
        text = plan.read_text()
        assert "moe_router_force_load_balancing = true" in text
        assert 'cuda_graph_modules = ["attn", "moe_router", "moe_preprocess"]' in text
        assert "--moe-router-force-load-balancing" in out
        assert "--cuda-graph-modules attn moe_router moe_preprocess" in out
    overlapped = "--overlap-moe-expert-parallel-comm" in out
    assert overlapped == top["parallel"]["ep_comm_overlap"]
    if "256" in argv:
        assert overlapped
    assert f"--pipeline-model-parallel-size {top['parallel']['pp']}" in out


def test_write_plan_names_the_launch_targets_that_refuse_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gemma 2's gated GELU MLP has no flag in Megatron-LM's pretrain_gpt.py, while a
    Megatron-Bridge recipe runs it: suggest writes the plan and says, on stderr, which launch
    targets refuse it. Oracle: `planner launch` itself, target by target."""
    plan = tmp_path / "gemma.toml"
    argv = ["suggest", "--model", "gemma2-2b", "--seq-length", "4096", "--write-plan", str(plan)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    err = err.replace("\n", " ")
    assert "note: launch --target megatron-args, torchrun, slurm, k8s refuses this plan" in err
    assert "geglu" in err and "megatron-bridge" not in err
    for target, refused in (("megatron-args", True), ("k8s", True), ("megatron-bridge", False)):
        code, _, launch_err = run(["launch", str(plan), "--target", target], capsys)
        assert code == (2 if refused else 0), (target, launch_err)
    assert "run Megatron-LM, which refuses" not in err  # no loss note where they refuse it
    # a plan every target writes gets no refusal note
    code, _, err = run(["suggest", "--write-plan", str(tmp_path / "llama.toml")], capsys)
    assert code == 0 and "refuses this plan" not in err


def test_write_plan_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text("# mine\n")
    code, out, err = run(["suggest", "--write-plan", str(plan)], capsys)
    assert code == 2
    assert "--force" in err and str(plan) in err
    assert plan.read_text() == "# mine\n"
    code, out, err = run(["suggest", "--write-plan", str(plan), "--force"], capsys)
    assert code == 0, err
    assert "[parallel]" in plan.read_text()
    assert f"wrote {plan}" in out.replace("\n", "")


def test_write_plan_repeats_the_warnings_check_gives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama 3.1 70B on 64 H100 at 8,192 tokens: the pick runs Megatron-FSDP with tp 8, which
    Megatron warns about (CUDA_DEVICE_MAX_CONNECTIONS); suggest said nothing of it. Oracle:
    `planner check` on the written plan, whose warning lines suggest now prints as they are."""
    plan = tmp_path / "w.toml"
    argv = ["suggest", "--model", "llama3.1-70b", "--num-gpus", "64", "--seq-length", "8192"]
    # --zero 2,3: the pick ran Megatron-FSDP unasked until its ZeRO 2 reduce-scattered every
    # micro-batch (megatron_fsdp.py:761-787 at d98e8a64)
    argv += ["--zero", "2,3"]
    code, _, err = run([*argv, "--global-batch-size", "512", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    code, _, checked = run(["check", str(plan)], capsys)
    assert code == 0
    warnings = [line for line in checked.splitlines() if line.startswith("planner: warning:")]
    assert warnings
    for line in warnings:
        assert line in err
