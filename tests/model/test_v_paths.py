"""The V schedules' step over uneven ranks (planner.model.v_paths.v_step, and the bubble
schedule.schedule_bubble / v_bubble.v_bubble make of it at the layout's m).

Oracles: `v_schedule.simulate_v` with no p2p time (torch's order, pytorch/pytorch 00722e64
torch/distributed/pipelining/schedules.py, each action when its rank is free and its input is
ready; checked by hand and by brute force in tests/cli/test_timeline_v.py): its step, the latest
end, and its bubble, that step less m times the busiest rank's F + B (as test_zbv_bubble.py and
test_dualpipev_bubble.py define it). A brute force over every small-integer time per rank (ties
everywhere) and random uneven draws (rank 0 slowest, another rank slowest, W = 0, W = B), from the
least m torch runs to 12 pp. And the orders themselves for the insertion that v_paths' closed
form in m rests on.
"""

from __future__ import annotations

import itertools
import random

import pytest

from planner.model.schedule import schedule_bubble
from planner.model.v_bubble import V_BUBBLES, v_bubble
from planner.model.v_paths import (
    BASE_ITERATION,
    base_microbatches,
    least_microbatches,
    v_step,
    whole_iteration_start,
)
from planner.model.v_schedule import rank_order, simulate_v

NAMES = ("ZBVZeroBubble", "DualPipeV")


def simulated(name: str, pp: int, m: int, fwd: list[float], bwd: list[float], wgt: list[float]):
    """(step, bubble) of the timed order."""
    step = max(op.end for ops in simulate_v(name, pp, m, fwd, bwd, wgt) for op in ops)
    return step, step - m * max(f + b for f, b in zip(fwd, bwd, strict=True))


def bubble(name: str, m: int, fwd: list[float], bwd: list[float], wgt: list[float]) -> float:
    """Through the cost model's entry: W = WGRAD_SHARE (B - recompute), so recompute B - 2 W."""
    rec = [b - 2 * w for b, w in zip(bwd, wgt, strict=True)]
    return schedule_bubble(name, list(zip(fwd, bwd, strict=True)), rec, 2, m)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pp", [2, 3, 4, 5])
def test_m_plus_k_is_the_order_at_m_with_k_iterations_inserted(name: str, pp: int) -> None:
    # the premise of step(m) = max_c S_c + (m - m_b) t_c + Y_c: at m_b + k each rank runs its
    # order at m_b with k whole iterations after its first h, every later micro-batch + k
    base = base_microbatches(pp)
    width = 6 if name == "ZBVZeroBubble" else 2
    for k in (1, 2, 5):
        for r in range(pp):
            short, long = rank_order(name, pp, base, r), rank_order(name, pp, base + k, r)
            cut = whole_iteration_start(name, pp, r, BASE_ITERATION)
            assert long[:cut] == short[:cut]
            block = long[cut : cut + width * k]  # each iteration the one before, micro-batch + 1
            for j in range(1, k):
                before = block[(j - 1) * width : j * width]
                assert block[j * width : (j + 1) * width] == [
                    tuple(a._replace(micro=a.micro + 1) for a in s) for s in before
                ]
            assert long[cut + width * k :] == [
                tuple(a._replace(micro=a.micro + k) for a in s) for s in short[cut:]
            ]


@pytest.mark.parametrize("name", NAMES)
def test_every_small_integer_time_on_two_ranks(name: str) -> None:
    # F, I, W in {0, 1, 2} a rank (3^6 cases), m from the least torch runs past m_b + 2 and far
    pp, least = 2, least_microbatches(name, 2)
    for fiw in itertools.product((0.0, 1.0, 2.0), repeat=6):
        fwd, wgt = list(fiw[0::3]), list(fiw[2::3])
        bwd = [i + w for i, w in zip(fiw[1::3], wgt, strict=True)]
        for m in (*range(least, base_microbatches(pp) + 3), 19):
            step, _ = simulated(name, pp, m, fwd, bwd, wgt)
            assert v_step(name, pp, m, fwd, bwd, wgt) == step, (m, fiw)


@pytest.mark.parametrize("name", NAMES)
def test_every_zero_one_time_on_three_ranks(name: str) -> None:
    pp, least = 3, least_microbatches(name, 3)
    for fiw in itertools.product((0.0, 1.0), repeat=9):
        fwd, wgt = list(fiw[0::3]), list(fiw[2::3])
        bwd = [i + w for i, w in zip(fiw[1::3], wgt, strict=True)]
        for m in (least, base_microbatches(pp) + 1, 23):
            step, _ = simulated(name, pp, m, fwd, bwd, wgt)
            assert v_step(name, pp, m, fwd, bwd, wgt) == step, (m, fiw)


def _draw(rng: random.Random, pp: int, kind: int) -> tuple[list[float], list[float], list[float]]:
    """Per-rank F, B, W: 0 rank 0 slowest (embedding, output layer, loss), 1 another rank, 2 W = 0,
    3 W = B (I = 0), 4 near-equal ranks (slopes differing by ~1%), 5 anything, zeros included."""
    fwd = [rng.uniform(0.9, 1.1) for _ in range(pp)]
    bwd = [2 * f * rng.uniform(0.95, 1.05) for f in fwd]
    wgt = [b * rng.uniform(0.3, 0.5) for b in bwd]
    if kind in (0, 1):
        slow, s = (0 if kind == 0 else rng.randrange(1, pp)), rng.uniform(1.05, 1.6)
        fwd[slow], bwd[slow], wgt[slow] = fwd[slow] * s, bwd[slow] * s, wgt[slow] * s
    elif kind == 2:
        wgt = [0.0] * pp
    elif kind == 3:
        wgt = list(bwd)
    elif kind == 4:
        fwd = [1.0 + 0.01 * rng.random() for _ in range(pp)]
        bwd = [2.0 + 0.01 * rng.random() for _ in range(pp)]
        wgt = [1.0] * pp
    elif kind == 5:
        fwd = [rng.choice([0.0, rng.uniform(0, 3)]) for _ in range(pp)]
        bwd = [rng.uniform(0, 5) for _ in range(pp)]
        wgt = [b * rng.choice([0.0, 1.0, rng.random()]) for b in bwd]
    return fwd, bwd, wgt


@pytest.mark.parametrize("name", NAMES)
def test_random_uneven_ranks_match_the_simulation(name: str) -> None:
    rng = random.Random(2024)
    for trial in range(60):
        pp = rng.randint(2, 9)
        fwd, bwd, wgt = _draw(rng, pp, trial % 6)
        least = least_microbatches(name, pp)
        for m in sorted(
            {least, 2 * pp, base_microbatches(pp), rng.randint(least, 12 * pp), 12 * pp}
        ):
            step, want = simulated(name, pp, m, fwd, bwd, wgt)
            assert v_step(name, pp, m, fwd, bwd, wgt) == pytest.approx(step, rel=1e-12)
            if all(w <= b for w, b in zip(wgt, bwd, strict=True)):
                got = bubble(name, m, fwd, bwd, wgt)
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9 * step), (trial, m)


# Draws on which the cut after 1 whole iteration with none spare after it (h = 1, x = 0) fell
# short of the simulation at m = 12 pp (by 0.115 and 0.085 here, found among ~250,000 random
# draws): the longest path leaves the rank it stays on one iteration earlier than that tail holds
# (v_paths docstring). Per rank F, I, W.
SHORT_AT_H1_X0 = [
    (
        [1.52, 0.0, 1.41, 0.0, 0.03, 0.03],
        [1.89, 0.0, 0.01, 3.02, 1.12, 1.06],
        [0.0, 2.63, 0.96, 0.0, 0.3, 0.0],
    ),
    (
        [2.03, 0.46, 1.31, 1.44, 0.0, 2.57, 0.7, 0.43],
        [3.26, 3.62, 1.06, 0.1, 0.48, 0.0, 0.0, 4.44],
        [0.0, 0.0, 0.01, 0.02, 0.0, 0.54, 3.02, 0.0],
    ),
]


@pytest.mark.parametrize("fiw", SHORT_AT_H1_X0)
def test_the_rare_late_turns(fiw: tuple[list[float], list[float], list[float]]) -> None:
    fwd, inp, wgt = fiw
    bwd = [i + w for i, w in zip(inp, wgt, strict=True)]
    pp = len(fwd)
    for m in (base_microbatches(pp), 5 * pp, 12 * pp):
        step, _ = simulated("ZBVZeroBubble", pp, m, fwd, bwd, wgt)
        assert v_step("ZBVZeroBubble", pp, m, fwd, bwd, wgt) == pytest.approx(step, rel=1e-12)


def test_rank_0_slowest() -> None:
    # pp 4, m 32, rank 0 (embedding, output layer, loss) 25% slower than the others: it starts at
    # once and never waits, so the step is its own work, 32 x (2.5 + 5) = 240, and the bubble 0.
    # The mean of the other stages priced 3 (ZB-V) and 6 (DualPipeV): the equal-stage forms at
    # F = 2, B = 4, W = 2 (test_zbv_bubble.py / test_dualpipev_bubble.py test_pp4_m8_by_hand).
    fwd, bwd = [2.5, 2.0, 2.0, 2.0], [5.0, 4.0, 4.0, 4.0]
    wgt = [b / 2 for b in bwd]
    for name in NAMES:
        assert simulated(name, 4, 32, fwd, bwd, wgt) == (240.0, 0.0)
        assert bubble(name, 32, fwd, bwd, wgt) == 0.0
        assert V_BUBBLES[name](4, 2.0, 4.0, 2.0) == {"ZBVZeroBubble": 3.0, "DualPipeV": 6.0}[name]


@pytest.mark.parametrize("name", NAMES)
def test_equal_stages_agree_with_the_closed_forms(name: str) -> None:
    # the closed forms (test_zbv_bubble.py, test_dualpipev_bubble.py prove them against the
    # simulation) are the longest path too: v_step at equal stages gives them
    rng = random.Random(3)
    for _ in range(20):
        pp = rng.randint(2, 8)
        f, i, w = rng.uniform(0.1, 3), rng.uniform(0.1, 3), rng.uniform(0.05, 3)
        fwd, bwd, wgt = [f] * pp, [i + w] * pp, [w] * pp
        for m in (least_microbatches(name, pp), 5 * pp):
            got = v_step(name, pp, m, fwd, bwd, wgt) - m * (f + i + w)
            assert got == pytest.approx(V_BUBBLES[name](pp, f, i + w, w)), (pp, m)


@pytest.mark.parametrize("name", NAMES)
def test_the_bubble_depends_on_m_and_settles(name: str) -> None:
    # rank 3 1% quicker than rank 0 but with a longer detour: it sets the bubble at small m,
    # which falls by 1% of a rank's work a micro-batch (0.03) until rank 0's own detour takes
    # over, by m 27 here (m None: that limit)
    fwd, bwd = [1.01, 0.3, 0.3, 1.0], [2.02, 0.6, 0.6, 2.0]
    wgt = [b / 2 for b in bwd]
    stages, rec = list(zip(fwd, bwd, strict=True)), [0.0] * 4
    got = [schedule_bubble(name, stages, rec, 2, m) for m in range(8, 60)]
    want = [simulated(name, 4, m, fwd, bwd, wgt)[1] for m in range(8, 60)]
    assert got == pytest.approx(want, abs=1e-9)
    assert got[0] > got[-1] + 0.3
    assert got[1] == pytest.approx(got[0] - 0.03)
    assert v_bubble(name, stages, wgt) == pytest.approx(got[-1])


def test_edges() -> None:
    # one stage: no pipeline; DualPipeV below 2 pp micro-batches (torch raises,
    # torch_schedules.refusal refuses it) is priced at 2 pp
    assert v_bubble("DualPipeV", [(1.0, 2.0)], [1.0], 5) == 0.0
    stages, wgt = [(1.2, 2.4), (1.0, 2.0), (1.0, 2.1)], [1.2, 1.0, 1.0]
    assert v_bubble("DualPipeV", stages, wgt, 4) == v_bubble("DualPipeV", stages, wgt, 6)
