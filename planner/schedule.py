"""Pipeline schedules: micro-batches, bubbles and the step time of a pipeline.

p = pipeline stages, m = micro-batches per pipeline per step, v = virtual chunks per rank.
m = global_batch / (dp x micro_batch_size) (`Layout.num_microbatches`; Megatron
`num_microbatches_calculator.py`).

Bubble (Narayanan et al. 2021, arXiv:2104.04473; ecosystem.md 3.3): with 1F1B each micro-batch
passes every stage once on the way in (fill) and once on the way out (drain). With per-micro-batch
stage times t_r (forward + backward) the step takes

    T = m * max_r t_r + (sum_r t_r - max_r t_r) / v,

i.e. the slowest stage sets the steady-state pace and the fill/drain is the time the other stages
take, shortened v-fold by the interleaved schedule (each chunk is 1/v of a stage). With equal stages
the bubble is (p-1)/(v*m) of the ideal time m*t: the textbook (p-1)/m for 1F1B and
(p-1)/(v*m) for interleaved 1F1B; as a fraction of the whole step, (p-1)/(v*m + p-1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.layout import Layout


def pipeline_time(stage_times: Sequence[float], m: int, vpp: int = 1) -> tuple[float, float]:
    """(steady, bubble) seconds of one step, from each stage's time per micro-batch.

    steady = m * max(t), bubble = (sum(t) - max(t)) / v."""
    slowest = max(stage_times)
    return m * slowest, (sum(stage_times) - slowest) / vpp


def stage_ranges(num_layers: int, lay: Layout) -> list[range]:
    """The decoder layers of each pipeline rank (Layout.stage_layers: given or even split)."""
    out, start = [], 0
    for n in lay.stage_layers(num_layers):
        out.append(range(start, start + n))
        start += n
    return out


def one_f_one_b(
    pp: int, m: int, fwd: float | Sequence[float] = 1, bwd: float | Sequence[float] = 2
) -> list[list[tuple[float, float, str]]]:
    """The 1F1B schedule as (start, end, op) per rank, in time units: forward fwd and backward
    bwd, the same on every rank or one per rank (uneven stages).

    Rank r runs min(pp - r - 1, m) warm-up forwards, then alternates one forward and one backward,
    then drains its backwards (Narayanan et al. 2021). A forward of micro-batch i on rank r waits
    for rank r - 1's; a backward waits for rank r + 1's."""
    f_of = [float(fwd)] * pp if isinstance(fwd, int | float) else [float(t) for t in fwd]
    b_of = [float(bwd)] * pp if isinstance(bwd, int | float) else [float(t) for t in bwd]
    if len(f_of) != pp or len(b_of) != pp:
        raise ValueError(f"one forward and one backward time per rank: {pp} ranks")
    order: list[list[tuple[str, int]]] = []
    for r in range(pp):
        warm = min(pp - r - 1, m)
        ops = [("F", i) for i in range(warm)]
        f, b = warm, 0
        while b < m:
            if f < m:
                ops.append(("F", f))
                f += 1
            ops.append(("B", b))
            b += 1
        order.append(ops)
    done: dict[tuple[str, int, int], float] = {}
    clock = [0.0] * pp
    pos = [0] * pp
    out: list[list[tuple[float, float, str]]] = [[] for _ in range(pp)]
    while any(pos[r] < len(order[r]) for r in range(pp)):
        progressed = False
        for r in range(pp):
            if pos[r] >= len(order[r]):
                continue
            op, i = order[r][pos[r]]
            if op == "F":
                dep = ("F", r - 1, i) if r > 0 else None
            else:  # the last rank's backward follows its own forward
                dep = ("B", r + 1, i) if r < pp - 1 else ("F", r, i)
            if dep is not None and dep not in done:
                continue
            ready = done[dep] if dep is not None else 0.0
            start = max(clock[r], ready)
            end = start + (f_of[r] if op == "F" else b_of[r])
            out[r].append((start, end, op))
            done[(op, r, i)] = end
            clock[r] = end
            pos[r] += 1
            progressed = True
        if not progressed:  # pragma: no cover - the schedule above is deadlock-free
            raise RuntimeError("1F1B simulation made no progress")
    return out


def timeline_text(
    pp: int,
    m: int,
    width: int = 100,
    fwd: float | Sequence[float] = 1,
    bwd: float | Sequence[float] = 2,
) -> list[str]:
    """One text line per pipeline rank: F forward, B backward, . idle (the bubble), at most
    `width` characters of equal time, each op at least one, its edges rounded to the nearest
    (`one_f_one_b`'s durations)."""
    sched = one_f_one_b(pp, m, fwd, bwd)
    end = max(e for rank in sched for _, e, _ in rank)
    cell = end / width if end > width or not float(end).is_integer() else 1.0
    cols = math.ceil(end / cell - 1e-9)
    lines = []
    for r, ops in enumerate(sched):
        row = ["."] * cols
        for start, stop, op in ops:
            # rounded edges: back-to-back ops tile without a gap
            first = min(round(start / cell), cols - 1)
            for t in range(first, min(max(first + 1, round(stop / cell)), cols)):
                row[t] = op
        lines.append(f"rank {r:>2} " + "".join(row))
    return lines
