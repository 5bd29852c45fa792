"""torchtitan's Interleaved1F1B and InterleavedZeroBubble at m >= pp: the exposed pipeline p2p at
torch's micro-batch group (planner.model.pipeline_p2p, `schedule.interleaved_p2p_exposed` with
`torch_schedules.microbatch_group`), not Megatron's.

Oracle: torch's own order replayed (`looped_order.looped_step`: each rank's actions as
pytorch/pytorch 00722e64 torch/distributed/pipelining/schedules.py builds them, checked against
torch's construction in tests/model/test_looped_order.py), the step with each cross-rank input
`hop` late less the step without: the seconds the sends add. torch runs rounds = m // pp rounds
of m // rounds micro-batches each (at pp 4, m 6 one round of 6, m 10 two of 5), where Megatron's
groups of pp would leave a last group of m mod pp whose wraps the closed form counts as exposed.
As for Megatron (tests/model/test_p2p_group.py): exact on equal stages while a hop is at most a
chunk's forward (Interleaved1F1B is Megatron's order with the group set to the round; the zero
bubble one warms up with half the forwards and the closed form bounds it from above)."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from plan_text import titan_job, write

from planner.inputs.plan import load_plan
from planner.model import cost
from planner.model.looped_order import looped_step
from planner.model.looped_p2p import looped_p2p_exposed
from planner.model.schedule import WGRAD_SHARE, interleaved_p2p_exposed
from planner.model.torch_schedules import microbatch_group, refusal
from planner.search.rules import check_plan

ROUNDS = ("Interleaved1F1B", "InterleavedZeroBubble")


def _replayed(name: str, v: int, m: int, f: list[float], b: list[float], hop: float) -> float:
    """The seconds `hop` per message adds to torch's order (module docstring), W = half of B."""
    w = [WGRAD_SHARE * x for x in b]
    return looped_step(name, v, m, f, b, w, hop) - looped_step(name, v, m, f, b, w)


def test_equal_stages_at_torchs_round() -> None:
    """Interleaved1F1B, every m in [pp, 3 pp] torch runs, a chunk's forward 1 and backward 2, a
    hop a quarter of a chunk's forward or all of it: the closed form at torch's round is the
    replay's growth exactly."""
    name = "Interleaved1F1B"
    for pp in (2, 3, 4):
        for v in (2, 3):
            for m in range(pp, 3 * pp + 1):
                if refusal(name, pp, m):
                    continue
                g = m // max(1, m // pp)  # torch's microbatches_per_round
                f, b = [float(v)] * pp, [2.0 * v] * pp
                for hop in (0.25, 1.0):
                    want = _replayed(name, v, m, f, b, hop)
                    got = interleaved_p2p_exposed(v, m, hop, f, b, g)
                    assert got == pytest.approx(want, abs=1e-9), (pp, v, m, hop)


def test_closed_form_is_not_the_other_orders() -> None:
    """Why InterleavedZeroBubble and LoopedBFS are replayed at every m: on equal stages
    (forward 1, backward 2 a chunk, hop a quarter of a chunk's forward) the closed form lies
    below the zero-bubble order's growth somewhere (its warm-up runs fewer forwards to hide
    the fill's wraps) and above LoopedBFS's (every micro-batch of a chunk hides each wrap)."""
    diff: dict[str, list[float]] = {"InterleavedZeroBubble": [], "LoopedBFS": []}
    for name, seen in diff.items():
        for pp in (2, 3, 4, 6):
            for v in (2, 3):
                for m in range(pp, 3 * pp + 1):
                    if refusal(name, pp, m):
                        continue
                    g = m // max(1, m // pp) if name != "LoopedBFS" else None
                    f, b = [float(v)] * pp, [2.0 * v] * pp
                    want = _replayed(name, v, m, f, b, 0.25)
                    seen.append(interleaved_p2p_exposed(v, m, 0.25, f, b, g) - want)
    assert min(diff["InterleavedZeroBubble"]) < -0.25  # more than a hop under
    assert max(diff["LoopedBFS"]) > 0.25


def _plan(name: str, m: int) -> tuple[object, object]:
    # Llama 3.1 8B on 8 H100, pp 4 x dp 2, vpp 2: global batch 2 m gives m micro-batches
    text = titan_job(gbs=2 * m) + "[parallel]\npp = 4\nvpp = 2\nzero_stage = 3\n"
    text += f'[torchtitan]\npipeline_schedule = "{name}"\n'
    plan = check_plan(load_plan(write(Path(tempfile.mkdtemp()), text)))
    return plan.job, plan.require_layout()


def _orders(name: str, pp: int, v: int, m: int) -> list[list[tuple[str, int, int]]]:
    """Each rank's compute actions (kind, micro-batch, chunk) as pytorch/pytorch 00722e64
    torch/distributed/pipelining/schedules.py builds them, restated with torch's own per-chunk
    counters (independent of `looped_order.rank_order`). LoopedBFS
    (`ScheduleLoopedBFS._calculate_single_rank_operations`): every forward of chunk 0, then
    chunk 1, ...; then the backwards, the last chunk first, its micro-batches last first.
    InterleavedZeroBubble (`_get_1f1b_rank_ops`, `_get_warmup_ops` with multiply_factor 1):
    g = m // max(1, m // pp), warm-up min((v - 1) g + pp - 1 - r, m v) forwards, forward step s
    running chunk (s // g) % v, backward step s chunk v - 1 - (s // g) % v; each backward its
    input part I, and from backward step r on each I followed by the oldest owed W."""
    out = []
    for r in range(pp):
        if name == "LoopedBFS":
            fwd = [("F", i, c) for c in range(v) for i in range(m)]
            out.append(fwd + [("B", i, c) for c in reversed(range(v)) for i in reversed(range(m))])
            continue
        g = m // max(1, m // pp)
        warm = min((v - 1) * g + pp - 1 - r, m * v)
        count = {"F": [0] * v, "I": [0] * v, "W": [0] * v}
        owed: list[int] = []
        ops: list[tuple[str, int, int]] = []
        # steps: warm-up forwards, then a forward and a backward each, then the backwards
        steps = [("F", s) for s in range(warm)]
        for s in range(m * v - warm):
            steps += [("F", warm + s), ("B", s)]
        steps += [("B", s) for s in range(m * v - warm, m * v)]
        for kind, s in steps:
            if kind == "F":
                c = (s // g) % v
            else:
                c, kind = v - 1 - (s // g) % v, "I"
                owed.append(c)
            ops.append((kind, count[kind][c], c))
            count[kind][c] += 1
            if kind == "I" and s >= r:  # the oldest owed W after each I from step r on
                w = owed.pop(0)
                ops.append(("W", count["W"][w], w))
                count["W"][w] += 1
        for w in owed:
            ops.append(("W", count["W"][w], w))
            count["W"][w] += 1
        out.append(ops)
    return out


def _simulated(
    name: str, v: int, m: int, f: list[float], b: list[float], w: list[float], hop: float
) -> float:
    """An event simulation of one step (the oracle, independent of `looped_order.looped_step`):
    stage k = c pp + r on rank r; each rank runs its actions in torch's order (`_orders`), one
    at a time, each when the rank is free and its input has arrived: a forward the previous
    stage's output (none for stage 0), a backward or I the next stage's input gradient (the
    last stage its own forward's output, on the same rank), a W its own I. A finished forward
    sends its output to stage k + 1 and a finished backward or I its input gradient to stage
    k - 1, each arriving `hop` seconds later (every such send crosses ranks at pp > 1); a
    chunk's F, B, I and W take 1/v of the rank's f, b, b - w and w."""
    pp = len(f)
    last = v * pp - 1
    dur = {"F": [x / v for x in f], "B": [x / v for x in b], "W": [x / v for x in w]}
    dur["I"] = [(x - y) / v for x, y in zip(b, w, strict=True)]
    orders = _orders(name, pp, v, m)
    arrive: dict[tuple[str, int, int], float] = {}  # (F or G, stage, micro): input ready at
    done_i: dict[tuple[int, int], float] = {}  # (stage, micro): its I's end
    free, pos, end = [0.0] * pp, [0] * pp, 0.0
    while any(pos[r] < len(orders[r]) for r in range(pp)):
        moved = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                kind, i, c = orders[r][pos[r]]
                k = c * pp + r
                if kind == "F":
                    ready = 0.0 if k == 0 else arrive.get(("F", k, i))
                elif kind == "W":
                    ready = done_i.get((k, i))
                else:
                    ready = arrive.get(("G", k, i))
                if ready is None:
                    break
                t = max(free[r], ready) + dur[kind][r]
                free[r], end, moved = t, max(end, t), True
                pos[r] += 1
                if kind == "F" and k < last:
                    arrive[("F", k + 1, i)] = t + hop
                elif kind == "F":
                    arrive[("G", k, i)] = t  # the loss: on the last stage's own rank
                elif kind in "BI":
                    done_i[(k, i)] = t
                    if k > 0:
                        arrive[("G", k - 1, i)] = t + hop
        assert moved, "deadlock"
    return end


def test_simulation_by_hand() -> None:
    """The oracle itself, hand-timed (tests/model/test_looped_order.py's worked steps): pp 4,
    v 2, m 2, LoopedBFS, a chunk's forward 1 and backward 2, no hop: 27; pp 2, v 2, m 1,
    InterleavedZeroBubble, F = I = W = 1 a chunk: 9. With a hop of 1 in the second, every one
    of the 6 messages on the single micro-batch's path (F: stage 0 -> 1 -> 2 -> 3, I: 3 -> 2
    -> 1 -> 0 less the loss turn, which is local) is on the critical path: 9 + 6 = 15."""
    four = [2.0] * 4
    assert _simulated("LoopedBFS", 2, 2, four, [4.0] * 4, [0.0] * 4, 0.0) == 27
    two = [2.0] * 2
    assert _simulated("InterleavedZeroBubble", 2, 1, two, [4.0] * 2, two, 0.0) == 9
    assert _simulated("InterleavedZeroBubble", 2, 1, two, [4.0] * 2, two, 1.0) == 15


@pytest.mark.parametrize("name", [*ROUNDS, "LoopedBFS"])
@pytest.mark.parametrize("m", [4, 5, 6, 7, 8, 10, 15])
def test_estimate_prices_the_replay(name: str, m: int) -> None:
    """The estimate's exposed PP traffic against torch's order replayed on the estimate's own
    stages and hop (uneven: the embedding and the output layer): Interleaved1F1B at least the
    replay's growth and at most 2 (pp v - 1) hops more (the closed form counts each of the
    fill's and drain's wraps at most once), the other two the replay's. Before, at m 5, 6, 7,
    10 and 15 Megatron's groups of 4 left a last group of 1 to 3 micro-batches, and compute
    waiting was booked as p2p: 62 to 224 ms where the replay adds about 1 ms (hop 0.19 ms)."""
    job, lay = _plan(name, m)
    perf = cost.estimate(job, lay)
    if name != "LoopedBFS":
        assert microbatch_group(job, lay) == m // max(1, m // 4)  # type: ignore[arg-type]
    f = [x for x, _ in perf.stages]
    b = [x for _, x in perf.stages]
    hop = perf.p2p_hop
    got = perf.breakdown.pp_comm_exposed
    if name == "Interleaved1F1B":
        want = _replayed(name, 2, m, f, b, hop)
        assert want > 0
        assert want * (1 - 1e-9) <= got <= want + 2 * (4 * 2 - 1) * hop, (got, want)
        return
    # the event simulation above (not planner's replay): W = WGRAD_SHARE x B (schedule.py:70),
    # this plan recomputing nothing
    w = [WGRAD_SHARE * x for x in b]
    want = _simulated(name, 2, m, f, b, w, hop) - _simulated(name, 2, m, f, b, w, 0.0)
    assert want > 0
    assert got == pytest.approx(want, rel=1e-9), (got, want)


def test_replay_is_the_simulation_on_random_stages() -> None:
    """`looped_p2p.looped_p2p_exposed` (what `pipeline_p2p` prices InterleavedZeroBubble and
    LoopedBFS with at every m) against the event simulation above on random uneven stages with
    recompute (W = WGRAD_SHARE of the backward less its recompute, schedule.py:123-125), every
    m torch runs from 1 to 2 pp + 1, a hop up to a chunk's whole forward."""
    rng = random.Random(17)
    checked = 0
    for name in ("InterleavedZeroBubble", "LoopedBFS"):
        for pp in (2, 3, 4, 5):
            for v in (2, 3):
                for m in range(1, 2 * pp + 2):
                    if refusal(name, pp, m):
                        continue
                    stages = [(rng.uniform(0.5, 2.0), rng.uniform(1.0, 4.0)) for _ in range(pp)]
                    rec = [rng.uniform(0.0, 0.4) * x for _, x in stages]
                    f = [x for x, _ in stages]
                    b = [x for _, x in stages]
                    w = [WGRAD_SHARE * max(x - y, 0.0) for x, y in zip(b, rec, strict=True)]
                    hop = rng.uniform(0.0, min(f) / v)
                    want = _simulated(name, v, m, f, b, w, hop) - _simulated(
                        name, v, m, f, b, w, 0.0
                    )
                    got = looped_p2p_exposed(name, v, m, hop, stages, rec)
                    assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (name, pp, v, m)
                    checked += 1
    assert checked > 100
