"""planner.cli: `planner explain` (memory and time side by side, each stage's time, the bottleneck,
host transfers and a shared PCIe link's wait) and Megatron's warnings reported, not refused.

The checks run the CLI in-process through `planner.cli.main(argv)`; the step-time parts are
checked to add up to the step.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from cli_subprocess import EXAMPLE, run_subprocess
from plan_text import plan_text, write

from planner.model import one_f_one_b


def test_explain_json_has_memory_and_time_side_by_side() -> None:
    proc = run_subprocess("explain", "examples/llama3.1-8b-h100.toml", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    perf = data["performance"]
    # the breakdown's exposed parts add up to the step time (hidden ones overlap compute)
    parts = {k: v for k, v in perf["breakdown_s"].items() if not k.endswith("_hidden")}
    assert sum(parts.values()) == pytest.approx(perf["step_time_s"], abs=1e-3)
    # tokens/s/GPU = seq x global batch / (step time x GPUs) = 8192 x 128 / (t x 8)
    assert perf["tokens_per_s_per_gpu"] == pytest.approx(
        8192 * 128 / (perf["step_time_s"] * 8), rel=1e-3
    )
    assert data["memory"]["stages"] and data["model"]["params_total"] > 8e9


def test_explain_gives_each_stage_its_time() -> None:
    # Llama 3.1 405B, pp 16 with Meta's split: 7 layers on the first and last ranks, 8 between
    proc = run_subprocess("explain", "tests/data/plans/launch-llama3.1-405b.toml", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    perf, mem = data["performance"], data["memory"]["stages"]
    stages = perf["stages"]
    assert [s["stage"] for s in stages] == list(range(16)) == [s["stage"] for s in mem]
    per_mb = [s["forward_s"] + s["backward_s"] for s in stages]
    # the step is Megatron's 1F1B over these stages (m = 2048 sequences / (dp 64 x mbs 1) = 32)
    # + the tail; the slowest ranks are inner ones, so it is below the closed form m x the
    # slowest + the fill and drain (sum - max), exact where the last stage is the slowest
    b = perf["breakdown_s"]
    tail = b["dp_comm_exposed"] + b["optimizer"] + b["other"]
    fwds, bwds = [s["forward_s"] for s in stages], [s["backward_s"] for s in stages]
    rebuilt = one_f_one_b.simulate_1f1b(fwds, bwds, 32) + tail
    assert rebuilt == pytest.approx(perf["step_time_s"], rel=1e-4)
    assert rebuilt < 32 * max(per_mb) + (sum(per_mb) - max(per_mb)) + tail
    # a 7-layer rank is faster than an 8-layer one; the last also runs the output layer
    assert per_mb[0] < per_mb[1] == pytest.approx(per_mb[14]) and per_mb[15] > per_mb[0]
    text = run_subprocess("explain", "tests/data/plans/launch-llama3.1-405b.toml").stdout
    assert "fwd ms" in text and "bwd ms" in text


def test_explain_human_output_names_the_bottleneck() -> None:
    proc = run_subprocess("explain", "examples/llama3.1-8b-h100.toml")
    assert proc.returncode == 0, proc.stderr
    assert "Step time" in proc.stdout and "MFU" in proc.stdout
    assert "Memory per GPU" in proc.stdout


def test_megatron_warnings_are_reported_not_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Megatron-FSDP (ZeRO 3) with pp 2: Megatron asserts nothing of the pair, and its own
    # tests never run it (`rules.feature_warnings.fsdp_untested`), so check exits 0 or 1 (never
    # 2), names the field on stderr and lists the warning in --json
    plan = tmp_path / "fsdp.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n'
        '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        '[parallel]\ntp = 1\npp = 2\nzero_stage = 3\nrecompute = "full"\n'
    )
    for command in ("check", "explain"):
        code, out, err = run([command, str(plan), "--json"], capsys)
        assert code in (0, 1), err
        (line,) = json.loads(out)["warnings"]
        assert line.startswith(f"{plan}: parallel.zero_stage: Megatron-FSDP (zero_stage 3)")
        assert f"planner: warning: {line}" in err
    # at ZeRO 1 there is nothing to warn about
    plan.write_text(plan.read_text().replace("zero_stage = 3", "zero_stage = 1"))
    _, out, err = run(["check", str(plan), "--json"], capsys)
    assert json.loads(out)["warnings"] == [] and "warning" not in err


def test_moe_with_tp_without_sequence_parallel_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Mixtral with tp 2 and ep 2 without sequence parallelism: Megatron's MoE layer raises
    ValueError at its first training forward (transformer MoE moe_layer.py:636-640 d98e8a64),
    so check exits 2 naming the field, no traceback."""
    plan = tmp_path / "moe.toml"
    plan.write_text(
        '[model]\nname = "mixtral-8x7b"\n'
        '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        '[parallel]\ntp = 2\npp = 2\nep = 2\nsequence_parallel = false\nrecompute = "full"\n'
    )
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{plan}: parallel.sequence_parallel: experts at tensor_model_parallel_size 2" in err


def explained_parts(plan: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, float], str]:
    """`explain --json`'s exposed step-time parts, checked to add up to the step, and the human
    output of the same plan."""
    code, out, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    perf = json.loads(out)["performance"]
    parts = {k: v for k, v in perf["breakdown_s"].items() if not k.endswith("_hidden")}
    assert sum(parts.values()) == pytest.approx(perf["step_time_s"], abs=1e-3)
    _, text, _ = run(["explain", str(plan)], capsys)
    return parts, text


def test_explain_shows_the_host_transfers_of_cpu_offloading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Llama 3.1 8B on 8 H100 (PCIe 5 host link), tp 1 x dp 8, 8k sequences of micro-batch 2,
    # the first 16 layers' activations offloaded: the exposed parts still add up to the step and
    # the human table has a row for the host transfers whenever they are exposed
    plan = tmp_path / "offload.toml"
    plan.write_text(
        EXAMPLE.read_text().split("[parallel]")[0]
        + "[parallel]\ntp = 1\npp = 1\nmicro_batch_size = 2\ncpu_offloading_num_layers = 16\n"
    )
    parts, text = explained_parts(plan, capsys)
    assert ("CPU offloading host transfers" in text) == (parts["offload_exposed"] > 0)


def test_explain_shows_the_wait_on_a_shared_pcie_link(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Llama 3.1 70B on 64 L40S (no NVLink), tp 2 x ZeRO-3 dp 32 with 77 layers offloaded: TP,
    # DP and host copies all cross each GPU's one PCIe link, busier than the rest of the step
    # (tests/model/test_shared_link.py has its arithmetic); explain names the wait, and the
    # exposed parts still add up to the step
    plan = write(
        tmp_path,
        plan_text(
            model='[model]\nname = "llama3.1-70b"\n',
            cluster='[cluster]\ngpu = "l40s-48gb"\nnum_gpus = 64\n',
            training="[training]\nseq_length = 4096\nglobal_batch_size = 512\n",
            parallel="[parallel]\ntp = 2\ndp = 32\nsequence_parallel = true\n"
            "tp_comm_overlap = true\nmicro_batch_size = 4\nzero_stage = 3\n"
            "cpu_offloading_num_layers = 77\n",
        ),
        "l40s.toml",
    )
    parts, text = explained_parts(plan, capsys)
    assert parts["link_shared"] > 0
    assert "waiting on the one PCIe link all traffic shares" in text
