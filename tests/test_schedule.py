"""Tests for planner.schedule (and Layout.num_microbatches, the m it uses). Oracle: hand
arithmetic of the 1F1B and interleaved bubbles (Narayanan et al. 2021; ecosystem.md 3.3)."""

from __future__ import annotations

import itertools

import pytest

from planner import schedule
from planner.layout import Layout


def test_num_microbatches() -> None:
    # 1536 sequences / (dp 32 x mbs 4) = 12
    assert Layout(dp=32, micro_batch_size=4).num_microbatches(1536) == 12


def _bubble_ratio_and_fraction(pp: int, m: int, vpp: int = 1) -> tuple[float, float]:
    """Bubble / ideal time and bubble / step time of pp equal stages of 1 s per micro-batch."""
    steady, bubble = schedule.pipeline_time([1.0] * pp, m, vpp)
    return bubble / steady, bubble / (steady + bubble)


def test_bubble_1f1b_and_interleaved() -> None:
    # p = 4, m = 8: (p-1)/m = 3/8 of the ideal time, 3/11 of the step
    ratio, fraction = _bubble_ratio_and_fraction(4, 8)
    assert ratio == pytest.approx(3 / 8)
    assert fraction == pytest.approx(3 / 11)
    # interleaved v = 2: (p-1)/(v m) = 3/16, 3/19 of the step
    ratio, fraction = _bubble_ratio_and_fraction(4, 8, 2)
    assert ratio == pytest.approx(3 / 16)
    assert fraction == pytest.approx(3 / 19)
    assert _bubble_ratio_and_fraction(1, 8)[0] == 0


def test_pipeline_time_equal_stages_matches_bubble_ratio() -> None:
    # 4 stages of 1 s per micro-batch, m = 8: steady 8 s, bubble 3 s = (p-1)/m x 8 s
    steady, bubble = schedule.pipeline_time([1.0] * 4, 8)
    assert (steady, bubble) == (8.0, 3.0)
    steady, bubble = schedule.pipeline_time([1.0] * 4, 8, vpp=3)
    assert bubble == pytest.approx(1.0)


def test_slowest_stage_sets_the_pace() -> None:
    # stages 1, 1, 2, 1 s, m = 10: steady 10 x 2 = 20 s; fill/drain = (1+1+2+1) - 2 = 3 s
    steady, bubble = schedule.pipeline_time([1.0, 1.0, 2.0, 1.0], 10)
    assert steady == 20.0
    assert bubble == 3.0


@pytest.mark.parametrize(("pp", "m"), [(2, 2), (4, 8), (8, 8), (8, 32), (3, 7)])
def test_simulated_1f1b_bubble_matches_closed_form(pp: int, m: int) -> None:
    # Oracle: Narayanan et al. 2021 section 2.2: with forward f and backward b, 1F1B takes
    # m (f + b) + (pp - 1)(f + b): the bubble is (pp - 1)(f + b), i.e. (pp - 1)/m of the ideal.
    sched = schedule.one_f_one_b(pp, m, fwd=1, bwd=2)
    end = max(e for rank in sched for _, e, _ in rank)
    assert end == m * 3 + (pp - 1) * 3
    # every rank runs every micro-batch forward and backward exactly once, never overlapping
    for ops in sched:
        assert sorted(op for _, _, op in ops) == ["B"] * m + ["F"] * m
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ops))


def test_1f1b_with_uneven_stages_by_hand() -> None:
    # pp 2, m 2, rank 0 forward 1 / backward 2, rank 1 forward 2 / backward 4.
    # rank 0 runs F0 F1 B0 B1 (one warm-up forward), rank 1 runs F0 B0 F1 B1:
    #   r0 F0 0-1, r1 F0 1-3, r0 F1 1-2, r1 B0 3-7, r0 B0 7-9 (after r1 B0),
    #   r1 F1 7-9, r1 B1 9-13, r0 B1 13-15 (after r1 B1): the step ends at 15,
    # which is pipeline_time's m x max(t) + (sum(t) - max(t)) = 2 x 6 + 3
    sched = schedule.one_f_one_b(2, 2, fwd=[1, 2], bwd=[2, 4])
    assert sched[0] == [(0, 1, "F"), (1, 2, "F"), (7, 9, "B"), (13, 15, "B")]
    assert sched[1] == [(1, 3, "F"), (3, 7, "B"), (7, 9, "F"), (9, 13, "B")]
    assert sum(schedule.pipeline_time([3.0, 6.0], 2)) == 15.0
    with pytest.raises(ValueError, match="per rank"):
        schedule.one_f_one_b(3, 2, fwd=[1, 2], bwd=2)


def test_timeline_text_by_hand() -> None:
    # equal stages, forward 1 and backward 2 units, one character each: pp 2, m 2 takes
    # (m + pp - 1) x 3 = 9 units. r0 F0 0-1, F1 1-2; r1 F0 1-2, B0 2-4; r0 B0 4-6 (after r1's);
    # r1 F1 4-5, B1 5-7; r0 B1 7-9
    assert schedule.timeline_text(2, 2, width=100) == ["rank  0 FF..BB.BB", "rank  1 .FBBFBB.."]
    # the uneven schedule of the test above (step 15), one character per unit at width 15,
    # and squeezed into 5 characters of 3 units (each op keeps at least one)
    uneven = {"fwd": [1, 2], "bwd": [2, 4]}
    wide = schedule.timeline_text(2, 2, width=15, **uneven)
    assert wide == ["rank  0 FF.....BB....BB", "rank  1 .FFBBBBFFBBBB.."]
    narrow = schedule.timeline_text(2, 2, width=5, **uneven)
    assert [len(line) for line in narrow] == [len("rank  0 ") + 5] * 2
