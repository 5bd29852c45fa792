"""A Megatron-LM target launches a plan ranked with Transformer Engine's fused cross entropy with
another loss (`launch_pricing.megatron_lm_launched`: Megatron-LM refuses TE's), so the file's
header predicts another step than the plan's own (the step `suggest --write-plan` writes at the
plan's top, and `check` gives). The header then has a line with the plan's own figures, and
`launch` says both on stderr, as `check` does; a plan launched as written gets neither.

Oracle: the plan as written, priced as `check` prices it (`cost.estimate`, `memory.estimate` on
the loaded plan), against the header's 'predicted' step; the premise that the two steps differ at
the header's three places is checked first. The plan and --headroom 22.2878 are the QA pass's
(llama3.1-8b, 8 H100, usable 61.89 GiB, 10 MiB under its peak): no compiled native loss fits
there, so Megatron-LM runs its unfused loss, slower than TE's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.plan import load_plan
from planner.inputs.units import against
from planner.model import cost, memory

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 8192
global_batch_size = 128
precision = "bf16"
main_grad_dtype = "fp32"
{loss}
[parallel]
tp = 1
pp = 2
dp = 2
cp = 2
vpp = 6
micro_batch_size = 1
zero_stage = 1
recompute = "none"
pipeline_layers = [17, 15]
"""

HEADROOM = 22.2878
"""The QA pass's --headroom: 79.64 GiB x (1 - 0.222878) = 61.89 GiB usable."""

PREDICTED = re.compile(r"^# predicted: step ([\d.]+) s", re.M)


def _plan(tmp_path: Path, loss: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(loss=loss), encoding="utf-8")
    return path


@pytest.mark.parametrize("target", ["megatron-args", "slurm"])
def test_the_header_gives_the_plans_own_figures_where_the_launched_job_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    path = _plan(tmp_path, "")  # the default loss: TE's fused cross entropy
    plan = load_plan(path)
    lay = plan.require_layout()
    step = cost.estimate(plan.job, lay).step_time_s
    rep = memory.estimate(plan.job, lay, HEADROOM)
    code, out, err = run(
        ["launch", str(path), "--target", target, "--headroom", str(HEADROOM)], capsys
    )
    assert code == 0
    found = PREDICTED.search(out)
    assert found is not None
    launched = float(found.group(1))
    assert f"{launched:.3f}" != f"{step:.3f}"  # premise: the launched job's step is another
    own = f"# plan as written: step {step:.3f} s, "
    assert own in out
    line = next(x for x in out.splitlines() if x.startswith(own))
    peak, cap = against(rep.peak, rep.capacity)
    assert f"peak memory {peak} GiB of {cap} GiB usable (DOES NOT FIT" in line
    assert f"note: --target {target} launches the plan as its training code runs it" in err
    assert f"predicted step {launched:.3f} s" in err
    assert f"the plan as written predicts step {step:.3f} s" in err


def test_a_plan_launched_as_written_has_no_such_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the unfused loss: Megatron-LM runs it as the plan names it (no --cross-entropy-loss-fusion),
    # so `megatron_lm_launched` returns the plan as it is
    path = _plan(tmp_path, "loss_fusion = false")
    argv = ["launch", str(path), "--target", "megatron-args", "--headroom", str(HEADROOM)]
    code, out, err = run(argv, capsys)
    assert code == 0
    assert "plan as written" not in out
    assert "plan as written" not in err
