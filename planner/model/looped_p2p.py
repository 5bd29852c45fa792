"""Point-to-point seconds torch's looped schedules expose below pp micro-batches
(`looped_order.unfilled`): read off torch's own order, as `planner.model.v_p2p` reads the V
schedules', the step of `looped_order.looped_step` with each cross-rank input `hop` late, less
the step without. `schedule.interleaved_p2p_exposed`, which prices them at m >= pp, counts the
fill's wraps against a group of at least pp micro-batches that hides them; one of m < pp
hides less, and the order's own step says how much less."""

from __future__ import annotations

from collections.abc import Sequence

from planner.model.looped_order import looped_step
from planner.model.schedule import weight_grads


def looped_p2p_exposed(
    name: str,
    vpp: int,
    m: int,
    hop: float,
    stages: Sequence[tuple[float, float]],
    recompute: Sequence[float],
) -> float:
    """Seconds `hop` per message adds to looped schedule `name`'s step over m micro-batches, from
    each stage's (forward, backward) per micro-batch and the recompute in that backward (the
    weight gradients as `schedule.schedule_bubble` takes them)."""
    if hop <= 0:
        return 0.0
    fwd = [f for f, _ in stages]
    bwd = [b for _, b in stages]
    wgt = weight_grads(bwd, recompute)
    late = looped_step(name, vpp, m, fwd, bwd, wgt, hop)
    return max(late - looped_step(name, vpp, m, fwd, bwd, wgt), 0.0)
