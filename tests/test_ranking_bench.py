"""The helpers of benchmarks/ranking.py, which prints the issue's ranking figures.

Oracles: Spearman's rank correlation by hand (the textbook 1 - 6 sum d^2 / (n (n^2 - 1)) where
there are no ties); the matched-pair rule restated on the real Hagemann rows; the bubble identity
(a pair that runs exactly as predicted implies the schedule's pp - 1 micro-batch times).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import ranking
from benchmarks.hagemann import Assumptions
from benchmarks.runs import load_hagemann
from planner import cost


def test_spearman_matches_the_no_ties_formula() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [2.0, 1.0, 4.0, 3.0, 5.0]
    # rank differences d = (-1, 1, -1, 1, 0): 1 - 6 * 4 / (5 * 24) = 0.8
    assert ranking.spearman(x, y) == pytest.approx(0.8)
    assert ranking.spearman(x, x[::-1]) == pytest.approx(-1.0)


def test_ties_share_their_mean_rank() -> None:
    assert ranking.ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]


@pytest.mark.parametrize("vary", ["tp", "pp"])
def test_twins_differ_only_in_the_varied_degree(vary: str) -> None:
    cases = load_hagemann()
    pairs = ranking.twins(cases, vary)
    assert pairs
    other = "pp" if vary == "tp" else "tp"
    for i, j in pairs:
        a, b = cases[i], cases[j]
        assert getattr(a.layout, vary) > 1 and getattr(b.layout, vary) == 1
        assert a.group == b.group and a.job.fused_norm == b.job.fused_norm
        assert getattr(a.layout, other) == getattr(b.layout, other)
        assert a.layout.micro_batch_size == b.layout.micro_batch_size
        assert a.layout.recompute == b.layout.recompute
        if vary == "pp" and a.layout.tp > 1:
            assert a.layout.sequence_parallel == b.layout.sequence_parallel


def test_a_pair_that_runs_as_predicted_implies_the_1f1b_bubble() -> None:
    cases = load_hagemann()
    i, j = ranking.twins(cases, "pp")[0]
    pipe, flat = (cost.estimate(cases[x].job, cases[x].layout) for x in (i, j))
    pp = cases[i].layout.pp
    k = ranking.bubble_micro_batches(pipe, flat, pipe.step_time_s / flat.step_time_s, pp)
    assert k == pytest.approx(pp - 1)
    # 10% slower than predicted is more than the schedule's bubble
    assert (
        ranking.bubble_micro_batches(pipe, flat, 1.1 * pipe.step_time_s / flat.step_time_s, pp)
        > pp - 1
    )


def test_the_codes_own_dp_sync_is_never_faster() -> None:
    # --dp-sync fp32_after_backward: the fp32 all-reduce + bf16 all-gather after the backward
    # exposes more than Megatron's overlapped bf16 reduce-scatter + all-gather can (its exposed
    # part is at most the whole bf16 reduce-scatter, half the bytes of one fp32 all-reduce phase)
    base = load_hagemann()
    code = load_hagemann(assume=Assumptions(dp_sync="fp32_after_backward"))
    assert [c.id for c in code] == [c.id for c in base]
    for a, b in zip(base, code, strict=True):
        assert b.job.dp_sync == "fp32_after_backward"
        fast, slow = (cost.estimate(c.job, c.layout).tokens_per_s_per_gpu for c in (a, b))
        assert slow < fast if a.layout.dp > 1 else slow == fast


def test_assumptions_scale_the_named_tier_and_reject_nonsense() -> None:
    half_ib = load_hagemann(assume=Assumptions(ib_scale=0.5))
    for a, b in zip(load_hagemann(), half_ib, strict=True):
        assert b.job.cluster.tiers[0] == a.job.cluster.tiers[0]  # NVLink untouched
        assert b.job.cluster.tiers[1].bandwidth_gb_per_s_per_gpu == pytest.approx(
            0.5 * a.job.cluster.tiers[1].bandwidth_gb_per_s_per_gpu
        )
        # a slower network never makes a layout faster
        slow, fast = (cost.estimate(c.job, c.layout).step_time_s for c in (b, a))
        assert slow >= fast
    for bad in ({"split": "random"}, {"nvlink_scale": 0.0}, {"ib_scale": -1.0}):
        with pytest.raises(ValueError):
            Assumptions(**bad)  # type: ignore[arg-type]
