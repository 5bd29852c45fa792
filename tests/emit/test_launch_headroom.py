"""`launch --headroom`: a plan ranked at a headroom other than check's default is launched with
what fits at that headroom, and its header says to launch it so.

Oracle: planner's own memory model at the two headrooms, and `check` of the launched line. The
plan is Llama 3.1 8B on 8 H100 at 8192 tokens and global batch 32, tp 1 with Megatron-FSDP's ZeRO
3 with its double buffer (once suggest's first pick at --headroom 10, then without it; its
reduce-scatter queue and prefetch window are counted since, planner/model/megatron_fsdp.py):
71.3 GiB of the 71.7 GiB usable (79.6 GiB x 0.90). Megatron-LM refuses TE's fused loss, so a
Megatron-LM target launches its compiled native fusion where that fits, else the unfused loss
(launch_pricing.megatron_lm_launched); the native fusion's extra fp32 copy of the local logits
(8192 x 128256 x 4 B = 3.9 GiB at tp 1, mbs 1) brings it to 75.6 GiB: within 3%'s 77.3 GiB, over
10%'s 71.7 GiB. The header test takes suggest's own pick at 10%."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.emit.launch_pricing import megatron_lm_launched
from planner.inputs.plan import load_plan
from planner.model import memory

JOB = """[model]
name = "llama3.1-8b"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8

[training]
seq_length = 8192
global_batch_size = 32
precision = "bf16"
"""


@pytest.fixture
def plan_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    job = tmp_path / "job.toml"
    job.write_text(JOB)
    plan = tmp_path / "h10.toml"
    code, _, err = run(["suggest", str(job), "--headroom", "10", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    return plan


PLAN = (
    JOB + '[parallel]\ntp = 1\npp = 1\nmicro_batch_size = 1\nzero_stage = 3\nrecompute = "none"\n'
    "fsdp_double_buffer = true\n"
)


def test_the_native_fusion_fits_at_three_percent_only(tmp_path: Path) -> None:
    path = tmp_path / "z3.toml"
    path.write_text(PLAN)
    plan = load_plan(path)
    lay = plan.require_layout()
    assert plan.job.megatron_loss == "te" and memory.estimate(plan.job, lay, 10).fits
    at3 = megatron_lm_launched(plan, "megatron-args", 3).job
    at10 = megatron_lm_launched(plan, "megatron-args", 10).job
    assert at3.compiled_loss_fusion and memory.estimate(at3, lay, 3).fits
    assert not memory.estimate(at3, lay, 10).fits  # what launch picked before, at 10%
    assert not at10.compiled_loss_fusion and not at10.loss_fusion
    assert memory.estimate(at10, lay, 10).fits


def test_launched_line_passes_check_at_the_plan_headroom(
    plan_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "and launch --headroom 10" in plan_path.read_text().splitlines()[2]
    out = tmp_path / "d"
    argv = ["launch", str(plan_path), "--target", "megatron-args", "--out", str(out)]
    code, _, err = run([*argv, "--headroom", "10"], capsys)
    assert code == 0, err
    check = ["check", "--megatron-args", str(out / "megatron-args.txt")]
    check += ["--gpu", "h100-sxm-80gb", "--num-gpus", "8", "--headroom", "10"]
    code, text, _ = run(check, capsys)
    assert code == 0, text
