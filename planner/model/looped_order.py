"""torch.distributed.pipelining's looped schedules, op by op: each rank's order of forwards and
backwards (`rank_order`) and the step that order takes (`looped_step`), for the counts of
micro-batches the closed-form bubbles of `planner.model.schedule` do not price: fewer than the
pipeline ranks (`torch_schedules.unfilled`).

Source: pytorch/pytorch torch/distributed/pipelining/schedules.py at 00722e64 (the torch that
torchtitan b5bcd76c builds its schedules with, `planner.model.torch_schedules`). Stage k runs on
rank k mod pp, rank r's chunk c being stage c pp + r (each class's `stage_indices` /
`forward_stage_index`). With g = microbatches_per_round, m // max(1, m // pp) (m itself below pp):

- ScheduleInterleaved1F1B (`_get_1f1b_rank_ops` with `_get_warmup_ops(multiply_factor=2)`):
  w = min((v - 1) g + 2 (pp - 1 - r), m v) warm-up forwards, then m v - w times one forward and
  one backward, then w backwards. Forward k runs chunk (k // g) mod v, backward k chunk
  v - 1 - (k // g) mod v, each chunk's micro-batches in turn: Megatron-LM's interleaved order
  (`schedule.op_order`) with its group set to g.
- ScheduleInterleavedZeroBubble: the same with multiply_factor=1, w = min((v - 1) g + pp - 1 - r,
  m v); each backward is its input-gradient part I, and from backward k = r on (its
  `num_1f1b_microbatches`, the rank) each I is followed by the weight-gradient part W of the
  oldest backward without one; the Ws left run after the last I. (`_add_bubbles_to_actions` only
  pads the order with idle slots.)
- ScheduleLoopedBFS: every micro-batch's forward through chunk 0, then chunk 1, ...; then the
  backwards, the last chunk first, each chunk's micro-batches last first.

The runtime (`_PipelineScheduleRuntime`) runs a rank's actions in that order, skipping the idle
slots, each compute action once its input has arrived: a forward the previous stage's output
(rank 0's chunk c > 0 the last rank's chunk c - 1), an input gradient the next stage's (the last
rank's chunk c < v - 1 rank 0's chunk c + 1; the last stage's its own forward), a W its own I.
`looped_step` times it so, each action when its rank is free and its input ready (`p2p` seconds
after that input where it ran on another rank, the sends overlapped with compute): the longest
path through the order. A chunk takes 1/v of the rank's forward, backward and weight gradient
per micro-batch, an I the backward less the W.

At m >= pp this order's step on equal stages is the closed form's, m t + (pp - 1) t / v
(Interleaved1F1B, LoopedBFS) and m t + (pp - 1)(t - 2W) / v (InterleavedZeroBubble where a chunk's
F, I and W are equal; elsewhere the order idles more), and `schedule.schedule_bubble`
keeps the closed form there (tests/model/test_looped_order.py).
Below pp no micro-batch group fills the pipeline: each wrap from the last rank to rank 0 waits
for micro-batch 0 to cross every rank while the rank has only m - 1 others to run, and a single
micro-batch (m = 1) crosses the 2 pp v chunk ops one after another, sum_r (F_r + B_r).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from planner.model.megatron_order import schedule_table

LOOPED = frozenset({"Interleaved1F1B", "InterleavedZeroBubble", "LoopedBFS"})
"""torch's schedules with stage k on rank k mod pp and any number of stages per rank."""

KINDS = "FBIW"
"""A forward, a whole backward, its input-gradient part, its weight-gradient part."""

Action = tuple[str, int, int]
"""(kind, micro-batch, chunk) of one compute action of a rank."""


def unfilled(name: str, pp: int, m: int) -> bool:
    """Whether looped schedule `name` runs fewer micro-batches than pipeline ranks, where no
    closed form of `planner.model.schedule` prices its fill (module docstring); the V schedules
    are timed in their own order at every m (`planner.model.v_bubble`)."""
    return name in LOOPED and m < pp


def per_round(pp: int, m: int) -> int:
    """torch's microbatches_per_round: m // number_of_rounds, number_of_rounds = max(1, m // pp)."""
    return m // max(1, m // pp)


def _one_f_one_b(pp: int, vpp: int, m: int, rank: int, zero_bubble: bool) -> list[Action]:
    g = per_round(pp, m)
    total = m * vpp
    warm = min((vpp - 1) * g + (1 if zero_bubble else 2) * (pp - 1 - rank), total)
    table = schedule_table(m, vpp, g)  # forward k: table[k]; backward k: its chunk mirrored
    back = "I" if zero_bubble else "B"
    out: list[Action] = [("F", *table[k]) for k in range(warm)]
    owed: list[Action] = []  # the Ws of the backwards run, oldest first

    def backward(k: int) -> None:
        i, c = table[k][0], vpp - 1 - table[k][1]
        out.append((back, i, c))
        owed.append(("W", i, c))
        if zero_bubble and k >= rank:
            out.append(owed.pop(0))

    for k in range(total - warm):
        out.append(("F", *table[warm + k]))
        backward(k)
    for k in range(total - warm, total):
        backward(k)
    return out + owed if zero_bubble else out


def rank_order(name: str, pp: int, vpp: int, m: int, rank: int) -> list[Action]:
    """The compute actions rank `rank` runs in one step of looped schedule `name` (module
    docstring), in its order."""
    if name == "LoopedBFS":
        fwd = [("F", i, c) for c in range(vpp) for i in range(m)]
        return fwd + [("B", i, c) for c in reversed(range(vpp)) for i in reversed(range(m))]
    if name in ("Interleaved1F1B", "InterleavedZeroBubble"):
        return _one_f_one_b(pp, vpp, m, rank, name == "InterleavedZeroBubble")
    raise ValueError(f"not a looped schedule: {name}")


def _needs(a: Action, rank: int, pp: int, vpp: int) -> tuple[str, int, int, int] | None:
    """What action `a` on `rank` waits for, as (F or B (an input gradient), rank, micro, chunk);
    a W its own I; None for the first stage's forwards."""
    kind, i, c = a
    if kind == "F":
        if rank > 0:
            return ("F", rank - 1, i, c)
        return ("F", pp - 1, i, c - 1) if c > 0 else None
    if kind == "W":
        return ("B", rank, i, c)
    if rank < pp - 1:
        return ("B", rank + 1, i, c)
    return ("B", 0, i, c + 1) if c < vpp - 1 else ("F", rank, i, c)


@lru_cache(maxsize=256)
def _program(name: str, pp: int, vpp: int, m: int) -> tuple[tuple[int, int, bool, int], ...]:
    """Every action of the step in an order that times each after its inputs, as (index of the
    rank's previous action, index of the action it waits for, whether that ran on another rank,
    duration slot 4 rank + KINDS.index(kind)); -1: none (the sentinel after the last, 0). Found
    by sweeping the ranks, each as far as its inputs allow (what the runtime's waits do)."""
    orders = [rank_order(name, pp, vpp, m, r) for r in range(pp)]
    at: dict[tuple[str, int, int, int], int] = {}
    prog: list[tuple[int, int, bool, int]] = []
    pos, last = [0] * pp, [-1] * pp
    size = sum(map(len, orders))
    while len(prog) < size:
        before = len(prog)
        for r in range(pp):
            while pos[r] < len(orders[r]):
                a = orders[r][pos[r]]
                need = _needs(a, r, pp, vpp)
                if need is not None and need not in at:
                    break
                src = -1 if need is None else at[need]
                cross = need is not None and need[1] != r
                prog.append((last[r], src, cross, 4 * r + KINDS.index(a[0])))
                key = "F" if a[0] == "F" else ("W" if a[0] == "W" else "B")
                last[r] = at[(key, r, a[1], a[2])] = len(prog) - 1
                pos[r] += 1
        if len(prog) == before:  # pragma: no cover - torch's looped orders are deadlock-free
            raise RuntimeError(f"{name} made no progress at pp {pp}, vpp {vpp}, m {m}")
    return tuple(prog)


def looped_step(
    name: str,
    vpp: int,
    m: int,
    fwd: Sequence[float],
    bwd: Sequence[float],
    wgt: Sequence[float],
    p2p: float = 0.0,
) -> float:
    """Seconds of one step of looped schedule `name` over m micro-batches (module docstring):
    fwd, bwd one micro-batch's forward and whole backward through each rank, wgt the
    weight-gradient part of that backward (read by InterleavedZeroBubble alone), each chunk
    1/vpp of them; `p2p` the seconds a message takes between ranks."""
    dur = []
    for f, b, w in zip(fwd, bwd, wgt, strict=True):
        dur += [f / vpp, b / vpp, (b - w) / vpp, w / vpp]
    prog = _program(name, len(fwd), vpp, m)
    end = [0.0] * (len(prog) + 1)  # end[-1]: the sentinel, never written
    for n, (prev, need, cross, slot) in enumerate(prog):
        ready = end[need] + p2p if cross else end[need]
        end[n] = max(end[prev], ready) + dur[slot]
    return max(end)


def looped_peak(name: str, pp: int, m: int, rank: int, kept: Sequence[float]) -> float:
    """The most activation bytes rank `rank` holds at once in `name`'s order, chunk c keeping
    kept[c] per micro-batch from its forward until its backward (or weight-gradient part W:
    torch's I keeps them, `planner.model.in_flight`'s module docstring)."""
    held = peak = 0.0
    for kind, _, c in rank_order(name, pp, len(kept), m, rank):
        if kind == "F":
            held += kept[c]
            peak = max(peak, held)
        elif kind in "BW":
            held -= kept[c]
    return peak


def deferred_peak(
    pp: int, m: int, rank: int, kept: Sequence[float], pending: Sequence[float]
) -> float:
    """The most bytes rank `rank` holds at once in InterleavedZeroBubble's order: chunk c's
    micro-batch keeping kept[c] from its forward until its W and pending[c] more from its I until
    its W (`planner.model.pending_w`: the output gradients its W reads)."""
    held = peak = 0.0
    for kind, _, c in rank_order("InterleavedZeroBubble", pp, len(kept), m, rank):
        if kind == "F":
            held += kept[c]
        elif kind == "I":
            held += pending[c]
        else:
            held -= kept[c] + pending[c]
        peak = max(peak, held)
    return peak
