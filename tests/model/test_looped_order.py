"""torch's looped schedules (Interleaved1F1B, InterleavedZeroBubble, LoopedBFS) op by op, and
their step below pp micro-batches, where torchtitan runs them and the closed form does not price
them (planner.model.looped_order, through schedule.schedule_bubble).

Oracles: torch's own construction of each rank's actions (pytorch/pytorch 00722e64
torch/distributed/pipelining/schedules.py: `_get_warmup_ops`, `_get_1f1b_rank_ops` with each
class's `forward_stage_index` / `backward_stage_index`, ScheduleLoopedBFS's
`_calculate_single_rank_operations`), restated in `_torch_ops` below with torch's own per-stage
counters rather than planner's schedule table; hand-timed steps in unit chunk times; Megatron's
interleaved order timed by `schedule.simulate` (a separate event loop over a separate order
builder), which torch's Interleaved1F1B equals with its group set to torch's round; and the
closed forms of `schedule.BUBBLE_TERMS`, written out here, which the priced bubble must keep at
m >= pp."""

from __future__ import annotations

import random

import pytest

from planner.inputs.layout import Layout
from planner.model import schedule
from planner.model.in_flight import schedule_peak
from planner.model.looped_order import looped_peak, looped_step, rank_order, unfilled
from planner.model.schedule import schedule_bubble

LOOPED = ("Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS")


def _torch_ops(name: str, pp: int, v: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """Rank `rank`'s compute actions as torch's schedules.py (00722e64) builds them, as (kind,
    micro-batch, chunk), the idle slots dropped. Interleaved: rounds = max(1, m // pp), g = m //
    rounds; warm-up min((v - 1) g + f (pp - 1 - rank), m v) with f = 2 (Interleaved1F1B) or 1
    (InterleavedZeroBubble); forward step s runs chunk (s // g) % v, backward step s chunk
    v - 1 - ((s - warm-up) // g) % v, each stage's micro-batch the count of its earlier ops of
    that kind; zero bubble: the backward is I, and from step warm-up + rank on each I is followed
    by the W of the oldest backward step without one, the rest after. LoopedBFS: every stage's
    forwards in stage order, micro-batches in order, then the backwards, stages and micro-batches
    reversed."""
    if name == "LoopedBFS":
        ops = [("F", i, c) for c in range(v) for i in range(m)]
        return ops + [("B", i, c) for c in range(v - 1, -1, -1) for i in range(m - 1, -1, -1)]
    zb = name == "InterleavedZeroBubble"
    g = m // max(1, m // pp)
    warm = min((v - 1) * g + (1 if zb else 2) * (pp - 1 - rank), m * v)
    fcount, bcount, wcount = [0] * v, [0] * v, [0] * v
    done: list[int] = []  # chunk of each backward step run
    wdone = 0
    out: list[tuple[str, int, int]] = []

    def fwd(step: int) -> None:
        c = (step // g) % v
        out.append(("F", fcount[c], c))
        fcount[c] += 1

    def bwd(step: int) -> None:
        nonlocal wdone
        c = v - 1 - ((step - warm) // g) % v
        out.append(("I" if zb else "B", bcount[c], c))
        bcount[c] += 1
        done.append(c)
        if zb and step - warm >= rank:
            w = done[wdone]
            out.append(("W", wcount[w], w))
            wcount[w] += 1
            wdone += 1

    for step in range(warm + m * v):
        if step < warm:
            fwd(step)
        elif step < m * v:
            fwd(step)
            bwd(step)
        else:
            bwd(step)
    while zb and wdone < len(done):
        w = done[wdone]
        out.append(("W", wcount[w], w))
        wcount[w] += 1
        wdone += 1
    return out


@pytest.mark.parametrize("name", LOOPED)
def test_orders_are_torchs(name: str) -> None:
    """Every rank's order, fewer micro-batches than ranks among them, is torch's."""
    for pp in (2, 3, 4, 6):
        for v in (2, 3, 4):
            for m in range(1, 3 * pp + 1):
                if name != "LoopedBFS" and m % max(1, m // pp):
                    continue  # torch raises (torch_schedules.refusal)
                for r in range(pp):
                    assert rank_order(name, pp, v, m, r) == _torch_ops(name, pp, v, m, r)


def test_hand_worked_steps() -> None:
    """Unit chunk times: a chunk's forward 1, its backward 2 (I 1 and W 1), so a rank's forward
    F = v, backward B = 2v, W = v, per micro-batch.

    pp 2, v 2, m 1, Interleaved1F1B (g = 1; warm-up min(1 + 2 (1 - r), 2): rank 0 2, rank 1 1):
      rank 0: F0c0 F0c1 B0c1 B0c0        rank 1: F0c0 F0c1 B0c1 B0c0
    the one micro-batch crosses the four chunk stages and back, nothing to overlap:
      r0 F0c0 0-1, r1 F0c0 1-2, r0 F0c1 2-3, r1 F0c1 3-4, r1 B0c1 4-6, r0 B0c1 6-8,
      r1 B0c0 8-10, r0 B0c0 10-12: 12 = sum_r (F + B). The closed form says m t + (p-1) t / v
      = 6 + 3 = 9.

    pp 4, v 2, m 2, Interleaved1F1B (g = 2; warm-up min(2 + 2 (3 - r), 4): 4, 4, 4, 2):
      ranks 0-2: F0c0 F1c0 F0c1 F1c1 B0c1 B1c1 B0c0 B1c0
      rank 3:    F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 B0c0 B1c0
      chunk 0 forwards: r0 0-1 1-2, r1 1-2 2-3, r2 2-3 3-4, r3 3-4 4-5;
      chunk 1: r0 4-5 (after r3's F0c0) 5-6, r1 5-6 6-7, r2 6-7 7-8, r3 F0c1 7-8, B0c1 8-10,
      F1c1 10-11, B1c1 11-13; r2 B0c1 10-12 B1c1 13-15, r1 12-14 15-17, r0 14-16 17-19;
      chunk 0 backwards wait for rank 0's chunk 1: r3 B0c0 16-18 B1c0 19-21, r2 18-20 21-23,
      r1 20-22 23-25, r0 22-24 25-27: 27, where the closed form says 2 x 6 + 3 x 6 / 2 = 21.

    pp 4, v 2, m 2, LoopedBFS (every rank: F0c0 F1c0 F0c1 F1c1 B1c1 B0c1 B1c0 B0c0): forwards as
      above but r3 F0c1 7-8 F1c1 8-9; r3 B1c1 9-11 B0c1 11-13, r2 11-13 13-15, r1 13-15 15-17,
      r0 15-17 17-19; r3 B1c0 17-19 B0c0 19-21, r2 19-21 21-23, r1 21-23 23-25, r0 23-25 25-27.

    pp 2, v 2, m 1, InterleavedZeroBubble (warm-up min(1 + (1 - r), 2): 2, 1; W from backward
      step `rank` on):
      rank 0: F0c0 F0c1 I0c1 W0c1 I0c0 W0c0    rank 1: F0c0 F0c1 I0c1 I0c0 W0c1 W0c0
      r0 F 0-1, r1 F 1-2, r0 F0c1 2-3, r1 F0c1 3-4, r1 I0c1 4-5, r0 I0c1 5-6, r0 W0c1 6-7,
      r1 I0c0 6-7, r1 W0c1 7-8, r1 W0c0 8-9, r0 I0c0 7-8, r0 W0c0 8-9: 9."""
    f, b, w = [2.0, 2.0], [4.0, 4.0], [2.0, 2.0]
    assert looped_step("Interleaved1F1B", 2, 1, f, b, w) == 12
    f4, b4, w4 = [2.0] * 4, [4.0] * 4, [2.0] * 4
    assert looped_step("Interleaved1F1B", 2, 2, f4, b4, w4) == 27
    assert looped_step("LoopedBFS", 2, 2, f4, b4, w4) == 27
    assert looped_step("InterleavedZeroBubble", 2, 1, f, b, w) == 9
    # priced: the step less m x (F + B); no recompute, so W = WGRAD_SHARE x B = 2
    assert schedule_bubble("Interleaved1F1B", [(2.0, 4.0)] * 2, [0.0] * 2, 2, 1) == 12 - 6
    assert schedule_bubble("Interleaved1F1B", [(2.0, 4.0)] * 4, [0.0] * 4, 2, 2) == 27 - 12
    assert schedule_bubble("LoopedBFS", [(2.0, 4.0)] * 4, [0.0] * 4, 2, 2) == 27 - 12
    assert schedule_bubble("InterleavedZeroBubble", [(2.0, 4.0)] * 2, [0.0] * 2, 2, 1) == 9 - 6


def test_unfilled_interleaved_equals_megatrons_simulation() -> None:
    """Below pp torch's Interleaved1F1B is Megatron's interleaved order in one group of all m
    (`schedule.simulate`, its own order and event loop): the same step on uneven stages, with
    and without a send delay."""
    rng = random.Random(11)
    for _ in range(200):
        pp, v = rng.randint(2, 6), rng.randint(2, 4)
        m = rng.randint(1, pp - 1)
        fwd = [rng.uniform(0.5, 2.0) for _ in range(pp)]
        bwd = [rng.uniform(1.0, 4.0) for _ in range(pp)]
        hop = rng.choice((0.0, rng.uniform(0.0, 0.3)))
        sim = schedule.simulate(pp, m, fwd, bwd, v, hop, group=m)
        want = max(op.end for ops in sim for op in ops)
        got = looped_step("Interleaved1F1B", v, m, fwd, bwd, [0.0] * pp, hop)
        assert got == pytest.approx(want, rel=1e-12)


def _closed_form(name: str, stages: list[tuple[float, float]], rec: list[float], v: int) -> float:
    """BUBBLE_TERMS' bubble, (sum g - max g) / v: g = F + B, less 2 W for ZB1P, W = B less its
    recompute, halved (schedule.py's module docstring)."""
    w = -2.0 if name == "InterleavedZeroBubble" else 0.0
    g = [max(f + b + w * 0.5 * max(b - r, 0.0), 0.0) for (f, b), r in zip(stages, rec, strict=True)]
    return (sum(g) - max(g)) / v


def test_filled_pipelines_priced_as_before() -> None:
    """At m >= pp (torch's rounds whole) `schedule_bubble` given m is the closed form, on random
    uneven stages with recompute: the grid of what planner priced before. And the order's own
    step agrees with the closed form on equal stages there (Interleaved1F1B and LoopedBFS at
    any F and B; ZB1P where I = W), so the two meet where the closed form is exact."""
    rng = random.Random(5)
    checked = 0
    for name in LOOPED:
        for pp in (2, 3, 4, 6, 8):
            for v in (2, 3, 4):
                for m in range(pp, 4 * pp + 1):
                    if name != "LoopedBFS" and m % max(1, m // pp):
                        continue
                    assert not unfilled(name, pp, m)
                    stages = [(rng.uniform(0.5, 2), rng.uniform(1, 4)) for _ in range(pp)]
                    rec = [rng.uniform(0, 0.5) * b for _, b in stages]
                    got = schedule_bubble(name, stages, rec, v, m)
                    assert got == _closed_form(name, stages, rec, v)
                    f, b = rng.uniform(0.5, 2), rng.uniform(1, 4)
                    w = 0.0
                    if name == "InterleavedZeroBubble":  # ZB-H1's F = I = W
                        f, w = b / 2, b / 2
                    step = looped_step(name, v, m, [f] * pp, [b] * pp, [w] * pp)
                    even = _closed_form(name, [(f, b)] * pp, [0.0] * pp, v)
                    assert step == pytest.approx(m * (f + b) + even, rel=1e-12)
                    checked += 1
    assert checked > 300


def test_unfilled_fill_is_longer_than_the_closed_form() -> None:
    """Below pp on equal stages the order waits longer than the closed form's fill (the reason
    it is not priced so): every m < pp, each looped schedule."""
    for name in LOOPED:
        for pp in (2, 3, 4, 8):
            for v in (2, 3):
                for m in range(1, pp):
                    got = schedule_bubble(name, [(1.0, 2.0)] * pp, [0.0] * pp, v, m)
                    assert got > _closed_form(name, [(1.0, 2.0)] * pp, [0.0] * pp, v), (name, m)


def test_unfilled_in_flight_is_torchs_order() -> None:
    """The activations held below pp (`in_flight.schedule_peak` with torch's round as the group,
    `torch_schedules.microbatch_group`) are those of torch's Interleaved1F1B order walked op by
    op (each forward adds its chunk's bytes, each backward frees them); LoopedBFS holds every
    forward; InterleavedZeroBubble holds its own order's (freed at each W: torch's I keeps the
    activations, tests/model/test_zb_in_flight.py)."""
    rng = random.Random(3)
    for pp in (2, 3, 4, 6):
        for v in (2, 3):
            lay = Layout(tp=1, pp=pp, dp=1, vpp=v)
            for m in range(1, pp):
                for r in range(pp):
                    kept = tuple(rng.uniform(1.0, 3.0) for _ in range(v))
                    ours = schedule_peak(kept, lay, r, m, "Interleaved1F1B", m)
                    walked = 0.0
                    held = 0.0
                    for kind, _, c in _torch_ops("Interleaved1F1B", pp, v, m, r):
                        held += kept[c] if kind == "F" else -kept[c]
                        walked = max(walked, held)
                    assert ours == pytest.approx(walked)
                    bfs = schedule_peak(kept, lay, r, m, "LoopedBFS", m)
                    assert bfs == pytest.approx(looped_peak("LoopedBFS", pp, m, r, kept))
                    zb = schedule_peak(kept, lay, r, m, "InterleavedZeroBubble", m)
                    assert zb == pytest.approx(looped_peak("InterleavedZeroBubble", pp, m, r, kept))
