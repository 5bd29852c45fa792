"""torch.distributed.pipelining's V schedules, action by action, as `planner explain --timeline`
draws them: each rank's order of forwards and backwards (`rank_order`) and that order timed
(`simulate_v`).

Source: pytorch/pytorch torch/distributed/pipelining/schedules.py at 00722e64 (the torch that
torchtitan b5bcd76c builds its schedules with, `planner.model.torch_schedules`), each class's
`_calculate_single_rank_operations`, and _utils.py `generate_rank_to_stage_mapping(style="v")`:
rank r runs stages r (its chunk 0) and 2 pp - 1 - r (its chunk 1), as torchtitan places them
(e347b1e5 distributed/pipeline_parallel.py:447-469; `Layout.v_stages`).

ScheduleZBVZeroBubble, at n = max(2 pp - 1, m) micro-batches, those past m left as empty slots:
  warm-up    2 (pp - r) - 1 forwards of chunk 0; r times (F chunk 1, F chunk 0); pp - r times
             (F, I, W of chunk 1)
  steady     while chunk 1 has run fewer forwards than chunk 0, or chunk 0 fewer than n:
             F of chunk 0 (while fewer than n), I and W of chunk 0, then F, I and W of chunk 1
  cool-down  r times (I chunk 0, I chunk 1); pp - r times (I chunk 0, then W of chunk 0's oldest
             backward without one); the W of chunk 1 left, then those of chunk 0
ScheduleDualPipeV (m >= 2 pp), each kind counted per stage, a W taking the oldest I without one:
  1  2 (pp - r - 1) forwards of chunk 0
  2  r + 1 times (F chunk 0, F chunk 1)
  3  pp - r - 1 times (I chunk 1, its W, F chunk 1)
  4  m - 2 pp + r + 1 times: (F chunk 0 with B chunk 1; on the last rank the first time apart,
     F then B), then (F chunk 1 with B chunk 0)
  5  pp - r - 1 times: B chunk 1, then (F chunk 1 with B chunk 0)
  6  r + 1 times (chunk 1's backward, chunk 0's): whole backwards until the middle (i = (r + 1)
     // 2), from there I (an odd rank from chunk 1's, an even one from chunk 0's)
  7  pp - r - 1 times (a pending W, then chunk 0's backward, I once 6 switched)
  8  r + 1 pending W
Here F is a forward, B a whole backward, I its input-gradient part and W its weight-gradient part
(torch's BACKWARD_INPUT and BACKWARD_WEIGHT); "with" is one OVERLAP_F_B action, the forward and
the backward of two micro-batches run together (torchtitan's dual_pipe_v overlap_callback).

Timing (`simulate_v`): an action starts when its rank is free and its input is ready: a forward
after the previous stage's forward of its micro-batch, an I or B after the next stage's (the last
stage's after its own forward), a W after its own I; `p2p` seconds later where that ran on another
rank. An overlapped pair starts when both of its inputs are ready and takes the forward's time
plus the backward's: the cost model's reading of DualPipeV (`v_bubble.dualpipev_bubble`, F&B
taken as F + B: what the overlap hides is communication, which planner does not model there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class VAction(NamedTuple):
    """One compute action of a V schedule on one rank."""

    kind: str
    """ "F" forward, "B" whole backward, "I" its input-gradient part, "W" its weight-gradient
    part."""
    micro: int
    chunk: int
    """0: the rank's stage r, 1: its stage 2 pp - 1 - r."""


Step = tuple[VAction, ...]
"""What a rank runs as one action: one VAction, or DualPipeV's overlapped forward and backward
(the forward first)."""


class VOp(NamedTuple):
    """One timed action (`simulate_v`); `paired` the other half of an overlapped pair."""

    start: float
    end: float
    kind: str
    micro: int
    chunk: int
    paired: VAction | None = None


def stage(pp: int, rank: int, chunk: int) -> int:
    """The stage of a rank's chunk under the V placement."""
    return rank if chunk == 0 else 2 * pp - 1 - rank


def place(pp: int, s: int) -> tuple[int, int]:
    """(rank, chunk) of stage s under the V placement."""
    return (s, 0) if s < pp else (2 * pp - 1 - s, 1)


def _zbv(pp: int, m: int, r: int) -> list[Step]:
    n = max(2 * pp - 1, m)
    out: list[VAction] = []
    f, b = [0, 0], [0, 0]  # forwards and input backwards run, per chunk

    def run(kind: str, c: int, i: int) -> None:
        out.append(VAction(kind, i, c))

    def fwd(c: int) -> None:
        run("F", c, f[c])
        f[c] += 1

    def bwd(c: int, weight: bool) -> None:
        run("I", c, b[c])
        if weight:
            run("W", c, b[c])
        b[c] += 1

    for _ in range(2 * (pp - r) - 1):
        fwd(0)
    for _ in range(r):
        fwd(1)
        fwd(0)
    for _ in range(pp - r):
        fwd(1)
        bwd(1, True)
    while f[1] < f[0] or f[0] < n:
        if f[0] < n:
            fwd(0)
        bwd(0, True)
        fwd(1)
        bwd(1, True)
    w = list(b)  # the backwards whose W has run
    for _ in range(r):
        bwd(0, False)
        bwd(1, False)
    for _ in range(pp - r):
        bwd(0, False)
        run("W", 0, w[0])
        w[0] += 1
    for c in (1, 0):
        out += [VAction("W", i, c) for i in range(w[c], b[c])]
    return [(a,) for a in out if a.micro < m]  # the slots past m stay empty


def _dualpipev(pp: int, m: int, r: int) -> list[Step]:
    out: list[Step] = []
    f, b = [0, 0], [0, 0]  # forwards and backwards (whole or input) run, per chunk
    pending: list[VAction] = []  # W owed for each I, oldest first

    def fa(c: int) -> VAction:
        f[c] += 1
        return VAction("F", f[c] - 1, c)

    def ba(c: int, split: bool = False) -> VAction:
        b[c] += 1
        if split:
            pending.append(VAction("W", b[c] - 1, c))
            return VAction("I", b[c] - 1, c)
        return VAction("B", b[c] - 1, c)

    def weight() -> None:
        if pending:
            out.append((pending.pop(0),))

    for _ in range(2 * (pp - r - 1)):
        out.append((fa(0),))
    for _ in range(r + 1):
        out += [(fa(0),), (fa(1),)]
    for _ in range(pp - r - 1):
        out.append((ba(1, split=True),))
        weight()
        out.append((fa(1),))
    for i in range(m - 2 * pp + r + 1):
        if i == 0 and r == pp - 1:
            out += [(fa(0),), (ba(1),)]
        else:
            out.append((fa(0), ba(1)))
        out.append((fa(1), ba(0)))
    for _ in range(pp - r - 1):
        out.append((ba(1),))
        out.append((fa(1), ba(0)))
    split = False
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            split = True
        out.append((ba(1, split),))
        if i == (r + 1) // 2 and r % 2 == 0:
            split = True
        out.append((ba(0, split),))
    for _ in range(pp - r - 1):
        weight()
        out.append((ba(0, split),))
    for _ in range(r + 1):
        weight()
    return out


def rank_order(name: str, pp: int, m: int, rank: int) -> list[Step]:
    """The compute actions rank `rank` runs in one step of V schedule `name` over m
    micro-batches, in its order (module docstring)."""
    if name == "ZBVZeroBubble":
        return _zbv(pp, m, rank)
    if name == "DualPipeV":
        if m < 2 * pp:
            raise ValueError(f"DualPipeV runs at least 2 pp = {2 * pp} micro-batches (got {m})")
        return _dualpipev(pp, m, rank)
    raise ValueError(f"not a V schedule: {name}")


def held_peak(
    name: str, pp: int, m: int, rank: int, kept: Sequence[float], pending: Sequence[float]
) -> float:
    """The most bytes rank `rank` holds at once in V schedule `name`'s order (`rank_order`),
    after each action (an overlapped pair's forward first): a chunk-c micro-batch keeps kept[c]
    from its forward until its whole backward B or its weight-gradient part W, and pending[c]
    more from its input-gradient part I until its W (`planner.model.pending_w`: torch's
    `stage.backward_one_chunk(full_backward=False)` runs an I, `backward_weight_one_chunk` its W;
    a B, DualPipeV's overlapped backward included, runs whole and keeps nothing after it)."""
    held = peak = 0.0
    for step in rank_order(name, pp, m, rank):
        for a in step:
            if a.kind == "F":
                held += kept[a.chunk]
            elif a.kind == "I":
                held += pending[a.chunk]
            elif a.kind == "W":
                held -= kept[a.chunk] + pending[a.chunk]
            else:
                held -= kept[a.chunk]
            if held > peak:
                peak = held
    return peak


def needs(pp: int, a: VAction, rank: int) -> tuple[str, int, int] | None:
    """What action `a` on `rank` waits for: ("F" or "B", stage, micro), "B" an input gradient
    (a whole backward or its I), or for a W its own I; None for the first stage's forward."""
    s = stage(pp, rank, a.chunk)
    if a.kind == "F":
        return None if s == 0 else ("F", s - 1, a.micro)
    if a.kind == "W":
        return ("B", s, a.micro)
    return ("F", s, a.micro) if s == 2 * pp - 1 else ("B", s + 1, a.micro)


def produced(pp: int, a: VAction, rank: int) -> tuple[str, int, int]:
    """What action `a` on `rank` completes, as `needs` names it: ("F", "B" (a whole backward or
    its I) or "W", stage, micro)."""
    key = "F" if a.kind == "F" else ("W" if a.kind == "W" else "B")
    return key, stage(pp, rank, a.chunk), a.micro


def simulate_v(
    name: str,
    pp: int,
    m: int,
    fwd: Sequence[float],
    bwd: Sequence[float],
    wgt: Sequence[float],
    p2p: float = 0.0,
) -> list[list[VOp]]:
    """One step of V schedule `name`, every action timed, per rank (module docstring): fwd, bwd
    one micro-batch's forward and whole backward through each rank (each chunk half of them),
    wgt the weight-gradient part of that backward (a W; an I is the rest)."""
    if not (len(fwd) == len(bwd) == len(wgt) == pp):
        raise ValueError(f"one forward, backward and weight time per rank: {pp} ranks")

    def seconds(rank: int, kind: str) -> float:
        half = {"F": fwd[rank], "B": bwd[rank], "W": wgt[rank], "I": bwd[rank] - wgt[rank]}
        return half[kind] / 2

    orders = [rank_order(name, pp, m, r) for r in range(pp)]
    done: dict[tuple[str, int, int], tuple[float, int]] = {}  # -> (end, rank)
    clock, pos = [0.0] * pp, [0] * pp
    out: list[list[VOp]] = [[] for _ in range(pp)]

    def ready(rank: int, a: VAction) -> float | None:
        need = needs(pp, a, rank)
        if need is None:
            return 0.0
        if need not in done:
            return None
        end, where = done[need]
        return end + (p2p if where != rank else 0.0)

    while any(pos[r] < len(orders[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            while pos[r] < len(orders[r]):
                step = orders[r][pos[r]]
                times = [ready(r, a) for a in step]
                if any(t is None for t in times):
                    break
                t = max([clock[r], *(x for x in times if x is not None)])
                for a in step:
                    end = t + seconds(r, a.kind)
                    other = next((o for o in step if o is not a), None)
                    out[r].append(VOp(t, end, a.kind, a.micro, a.chunk, other))
                    done[produced(pp, a, r)] = (end, r)
                    t = end
                clock[r] = t
                pos[r] += 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{name} made no progress at pp {pp}, m {m}")
    return out
