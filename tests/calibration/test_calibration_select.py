"""Which constants the fit takes and what it says of its error, against brute force and the
constants the logs were written with (tests/synthetic_logs.py: the model's own step times with
chosen constants and 1% noise).

Oracles: refitting without each run and predicting it (the leave-one-out error by its
definition, which the fit computes so, and its linearised PRESS shortcut for many runs must
reproduce where the selection holds); the constants the logs
were written with (`truth`) and the shipped model's error on a size the fit did not see."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import synthetic_logs
from synthetic_logs import write_log

from planner.calibration import fit as fit_module
from planner.calibration.fit import TIME_KEYS, fit
from planner.calibration.measured import read_runs
from planner.model import calibratable, cost
from planner.model.calibratable import DEFAULTS

GPU = "h100-sxm-80gb"


def _step(run_, values: dict[str, float]) -> float:
    with calibratable.calibrated(values):
        return cost.estimate(run_.plan.job, run_.plan.require_layout()).step_time_s


def test_leave_one_out_is_refitting_without_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The left-out errors are refits: each run left out, the constants selected and fitted to
    the others, the run predicted with them. Brute force: the same through `fit`, every one of
    the seven, the run without which the refit also takes the scale-up bandwidth (run 4, the
    only pp 4 run) included; a QA case of five logs whose linearised (PRESS) band said 0.7% where
    refitting gives 8.5% was that. The PRESS shortcut (beyond `REFIT_RUNS`) stays within 0.05
    percentage points of the refit where the refit takes the same constants (it is exact for a
    linear least-squares fit of them; QA: it once paired each constant's prior with another's
    Jacobian column, printing +0.59/-0.89/+0.64/+0.26/+0.79% where refitting gave
    -0.27/-1.44/-0.54/-0.34/-0.25%)."""
    truth = {"gemm_efficiency": 0.62, "step_overhead_s": 0.08}
    runs = read_runs([write_log(tmp_path, i, truth) for i in range(7)], GPU)
    f = fit(runs)
    # the order the PRESS bug needed: overhead chosen first, the reverse of the built-in order
    assert TIME_KEYS.index("gemm_efficiency") < TIME_KEYS.index("step_overhead_s")
    assert f.order.index("step_overhead_s") < f.order.index("gemm_efficiency")
    monkeypatch.setattr(fit_module, "REFIT_RUNS", 1)
    press = fit(runs)
    changed = 0
    for i, left_out in enumerate(f.runs):
        rest = fit(runs[:i] + runs[i + 1 :])
        refit = _step(runs[i], rest.values) / runs[i].step_time_s - 1
        own = math.log1p(left_out.predicted_s / runs[i].step_time_s - 1)
        floor = math.copysign(max(abs(math.log1p(refit)), abs(own)), refit)
        assert left_out.leave_one_out == pytest.approx(math.expm1(floor), abs=1e-9), i
        if set(rest.order) == set(f.order):
            assert press.runs[i].leave_one_out == pytest.approx(refit, abs=5e-4), i
        else:
            changed += 1
    assert changed >= 1  # a selection the refit changes is in the set
    # the band is their root mean square (in log terms), by its definition
    logs = [math.log1p(r.leave_one_out) for r in f.runs if r.leave_one_out is not None]
    assert f.band == pytest.approx(math.expm1(math.sqrt(sum(x * x for x in logs) / 7)))


ONE_SHAPE = tuple(("llama3.1-8b", n, 4096, 4 * n, "tp = 1\npp = 1") for n in (8, 16, 32))
"""tp 1, pp 1, seq 4096, 4 sequences per GPU, on 8, 16 and 32 GPUs: every GPU does the same
work in each; only the data-parallel gradient all-reduce changes with the size."""


def test_logs_of_one_shape_do_not_pick_between_gemm_and_overhead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """QA: three such logs written with GEMMs 20% slow (gemm_efficiency 0.8 x default, the
    overhead at its default 0.01 s) were fitted with a per-step overhead of 0.2495 s, called
    determined at +/-12%, and the profile promised +/-0.5% while another size (plan 1: tp 2 at
    seq 8192) was predicted 10.7% short. With the GEMM efficiency free beside it the overhead's
    posterior sd is 0.60 of its prior spread (and the GEMM's 0.81): over the 0.5 rule. Oracle:
    the truth the logs were written with (neither constant may move away from it on a claim of
    being determined, and no third constant may take their place); and the held-out size's
    error must lie within the band the fit quotes."""
    monkeypatch.setattr(synthetic_logs, "PLANS", (*synthetic_logs.PLANS, *ONE_SHAPE))
    first = len(synthetic_logs.PLANS) - len(ONE_SHAPE)
    truth = {"gemm_efficiency": 0.8 * DEFAULTS["gemm_efficiency"]}
    runs = read_runs(
        [write_log(tmp_path, i, truth) for i in range(first, first + len(ONE_SHAPE))], GPU
    )
    f = fit(runs)
    assert f.order == ()
    for key in TIME_KEYS:
        assert not f.determined[key] and f.values[key] == DEFAULTS[key], key
    assert f.inseparable == {
        "gemm_efficiency": "step_overhead_s",
        "step_overhead_s": "gemm_efficiency",
    }
    (other,) = read_runs([write_log(tmp_path, 1, truth, noise=0.0)], GPU)
    error = _step(other, f.values) / other.step_time_s - 1
    assert abs(error) <= f.band  # the shipped model's -12.2% here; the band says 16%
