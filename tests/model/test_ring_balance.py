"""Causal load balance of torchtitan's ring attention (planner.model.ring_balance). Oracle: a
brute-force count of the causal (query chunk, key chunk) work each rank does at each lock-step ring
step, with contiguous chunks and with the head-tail split."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import cost
from planner.model.ring_balance import ring_skew

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 32768\nglobal_batch_size = 8\n"


def _pair(q: int, k: int) -> float:
    """Causal work of query piece q against key piece k (equal pieces): whole, half, none."""
    return 1.0 if q > k else 0.5 if q == k else 0.0


def _ring_time(cp: int, headtail: bool) -> float:
    """Sum over the cp ring steps of the busiest rank's work, in units of a (s/2cp)^2 block."""
    pieces = [[i, 2 * cp - 1 - i] if headtail else [2 * i, 2 * i + 1] for i in range(cp)]
    total = 0.0
    for step in range(cp):
        total += max(
            sum(_pair(q, k) for q in pieces[r] for k in pieces[(r - step) % cp]) for r in range(cp)
        )
    return total


@pytest.mark.parametrize("cp", [2, 4, 8, 16])
def test_skew_is_the_brute_force_ratio(cp: int, tmp_path: Path) -> None:
    want = _ring_time(cp, headtail=False) / _ring_time(cp, headtail=True)
    text = plan_text(
        training=TITAN,
        cluster=f'[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {cp}\n',
        parallel=f"[parallel]\ncp = {cp}\nzero_stage = 3\n",
    )
    plan = load_plan(write(tmp_path, text + "[torchtitan]\ncp_load_balance = false\n"))
    assert ring_skew(plan.job, plan.require_layout()) == pytest.approx(want)
    assert want == pytest.approx((2 * cp - 1) / cp)
    balanced = load_plan(write(tmp_path, text, "balanced.toml"))
    assert ring_skew(balanced.job, balanced.require_layout()) == 1.0
    slow = cost.estimate(plan.job, plan.require_layout()).step_time_s
    assert slow > cost.estimate(balanced.job, balanced.require_layout()).step_time_s
