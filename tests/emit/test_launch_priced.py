"""A launch writes what the plan priced, refuses (exit 2 naming the field), or re-prices its header
as the job it launches (QA /tmp/q5s37 repros, each failing on the code before):

- the Megatron-LM targets have no flag for cross_entropy "pytorch" / "gathered", fused_norm =
  false, sp_keeps_gathered_input = true, tp_backward_overlap = false: the header predicts what
  `check --megatron-args` reads back from the file (the oracle: planner's own read-back; before,
  fused_norm = false said a 16.081 s step and 48.9 GiB where the file read back 15.040 s and
  42.7 GiB);
- tp_userbuffers = true is written as --tp-comm-overlap with its four overlaps disabled, which
  reads back to it (planner/inputs/megatron_tp_overlap.py userbuffers_only; argument_utils.py:194
  @d98e8a64 adds each --disable-* flag);
- rl_kv_cache_gib, rl_inference_parallel, vision_encoder: refused by the Megatron targets;
- Megatron-Bridge writes the model's shape fields (gpt_oss_bridge.py:83-88 @067f987d sets the
  clamp the plan may not have) and the GEMMs' SM margin in env_vars.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_run import run
from paths import REPO

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 8192
global_batch_size = 128
precision = "bf16"
{training}
[parallel]
tp = 2
pp = 2
micro_batch_size = 1
zero_stage = 1
recompute = "none"
"""


def _plan(tmp_path: Path, **training: Any) -> Path:
    lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in training.items())
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(training=lines), encoding="utf-8")
    return path


def _figures(text: str) -> tuple[float, float]:
    step = re.search(r"# predicted: step ([0-9.]+) s", text)
    peak = re.search(r"; ([0-9.]+) GiB with", text)
    assert step is not None and peak is not None
    return float(step.group(1)), float(peak.group(1))


@pytest.mark.parametrize(
    ("setting", "note"),
    [
        ({"cross_entropy": "pytorch"}, "cross_entropy = 'pytorch' has no Megatron flag: this job"),
        ({"cross_entropy": "gathered"}, "vocab-parallel cross entropy, its compiled fused"),
        ({"fused_norm": False}, "fused_norm = false has no Megatron flag: this job runs"),
        ({"sp_keeps_gathered_input": True}, "re-gathers the sequence-parallel input"),
        ({"tp_backward_overlap": False}, "tp_backward_overlap = false has no Megatron flag: this"),
        ({"tp_userbuffers": True}, None),
    ],
)
def test_the_header_is_the_job_the_megatron_args_read_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setting: dict[str, Any], note: str | None
) -> None:
    code, out, _ = run(
        ["launch", str(_plan(tmp_path, **setting)), "--target", "megatron-args"], capsys
    )
    assert code == 0
    if note is not None:
        assert note in out
    assert "its loss is the fused vocab-parallel kernel" not in out
    args = tmp_path / "args.txt"
    args.write_text(out, encoding="utf-8")
    cmd = ["check", "--megatron-args", str(args), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, js, _ = run([*cmd, "--json"], capsys)
    back = json.loads(js)
    step, peak = _figures(out)
    assert step == pytest.approx(back["performance"]["step_time_s"], abs=5e-4)
    assert peak == pytest.approx(back["memory"]["peak_gib"], abs=0.05)


def test_userbuffers_are_written_with_every_overlap_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(
        ["launch", str(_plan(tmp_path, tp_userbuffers=True)), "--target", "torchrun"], capsys
    )
    for flag in (
        "--tp-comm-overlap",
        *(
            f"--disable-tp-comm-{x}"
            for x in ("overlap-ag", "overlap-rs", "bulk-dgrad", "bulk-wgrad")
        ),
    ):
        assert f"{flag} " in out or f"{flag}\n" in out or f"{flag} \\" in out
    code, _, err = run(
        ["launch", str(_plan(tmp_path, tp_userbuffers=True)), "--target", "megatron-bridge"], capsys
    )
    assert code == 2 and "training.tp_userbuffers" in err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rl_kv_cache_gib", 10),
        ("rl_inference_parallel", [2, 1, 1, 1]),
        ("vision_encoder", [24, 576, 14]),
    ],
)
@pytest.mark.parametrize("target", ["megatron-args", "torchrun", "slurm", "k8s", "megatron-bridge"])
def test_rl_and_vision_plans_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any, target: str
) -> None:
    code, _, err = run(
        ["launch", str(_plan(tmp_path, **{field: value})), "--target", target], capsys
    )
    assert code == 2
    assert f"training.{field}" in err


def test_bridge_writes_the_gemm_margin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(
        ["launch", str(_plan(tmp_path, gemm_sm_margin=8)), "--target", "megatron-bridge"], capsys
    )
    doc = yaml.safe_load(out)
    assert doc["env_vars"]["NVTE_EXT_MARGIN_SM"] == "8"  # as the torchrun script exports it


def test_bridge_writes_the_models_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss-20b as the catalog has it, then without its clamp: the gpt-oss recipe's provider
    # sets 7.0 (gpt_oss_bridge.py:83-88 @067f987d), so the override must write null
    recipe = (REPO / "examples/recipes/gpt-oss-20b-pretrain-8gpu-b300-fp8mx.toml").read_text()
    path = tmp_path / "oss.toml"
    path.write_text(recipe, encoding="utf-8")
    _, out, _ = run(["launch", str(path), "--target", "megatron-bridge"], capsys)
    doc = yaml.safe_load(out)
    m = doc["model"]
    assert m["activation_func_clamp_value"] == 7.0 and m["glu_linear_offset"] == 1.0
    assert m["softmax_type"] == "learnable" and m["mtp_num_layers"] is None
    # the window is left to the recipe's provider, with a note: Gemma 3's reads window_size as
    # the HF count, an int, and subtracts one on each local layer (gemma3_provider.py:72, :251
    # @067f987d), where gpt-oss's takes (W, 0): a (127, 0) list would break Gemma 3's model
    assert "window_size" not in m and "window_attn_skip_freq" not in m
    assert "window of 127 tokens" in out
    assert m["moe_router_score_function"] == "softmax" and m["moe_apply_probs_on_input"] is False
    path.write_text(recipe.replace("activation_func_clamp_value = 7.0\n", ""), encoding="utf-8")
    _, out, _ = run(["launch", str(path), "--target", "megatron-bridge"], capsys)
    assert yaml.safe_load(out)["model"]["activation_func_clamp_value"] is None
