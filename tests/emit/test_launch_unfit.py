"""`launch` of a plan predicted not to fit: the file is written (its header says DOES NOT FIT),
and stderr warns, so that `planner launch ... && sbatch ...` does not submit it unheard. The
oracle is `check`'s own verdict and peak on the same plan (exit 1, `peak_gib`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

PLAN = """[model]
name = "llama3.1-70b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16
[training]
seq_length = 8192
global_batch_size = 64
precision = "bf16"
loss_fusion = false
[parallel]
tp = 8
pp = 1
micro_batch_size = 1
zero_stage = {zero}
recompute = "{recompute}"
"""


@pytest.mark.parametrize("target", ["slurm", "megatron-args", "megatron-bridge"])
def test_a_plan_that_does_not_fit_is_written_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    # 70B at zero 0, tp 8: 70.6e9 / 8 params x 18 bytes alone is 148 GiB > 80 GB H100
    plan = tmp_path / "nofit.toml"
    plan.write_text(PLAN.format(zero=0, recompute="none"), encoding="utf-8")
    code, out, _ = run(["check", str(plan), "--json"], capsys)
    assert code == 1
    peak = json.loads(out)["memory"]["peak_gib"]
    code, out, err = run(["launch", str(plan), "--target", target, "--out", str(tmp_path)], capsys)
    assert code == 0
    assert f"planner: warning: {plan}: the launched plan does not fit: peak {peak:.1f} GiB" in err
    assert "DOES NOT FIT" in Path(out.strip()).read_text(encoding="utf-8")


def test_a_plan_that_fits_launches_without_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(
        ["launch", str(REPO / "examples" / "llama3.1-8b-h100.toml"), "--target", "slurm"], capsys
    )
    assert code == 0
    assert "warning" not in err
