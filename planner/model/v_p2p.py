"""Point-to-point seconds a V schedule (torchtitan's ZBVZeroBubble, DualPipeV) exposes.

Megatron's interleaved schedule wraps each micro-batch from the last rank back to rank 0 between
chunks (`schedule.interleaved_p2p_exposed` counts those hops); a V places chunk 1 of a rank's
pair on the same rank as the stage before it turns (`v_schedule.stage`), so the turn is local and
there is no wrap-around. The exposed traffic is read off torch's own order instead: the step of
`v_schedule.simulate_v` with each cross-rank input `hop` late, less the step without
(QA, Llama 3.1 8B pp4 m 16: 4.7 hops ZB-V, 10.7 DualPipeV, where Megatron's formula gave 6.0)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.model.schedule import weight_grads
from planner.model.v_schedule import simulate_v


def v_p2p_exposed(
    name: str,
    m: int,
    hop: float,
    stages: Sequence[tuple[float, float]],
    recompute: Sequence[float],
) -> float:
    """Seconds `hop` per message adds to V schedule `name`'s step, from each stage's (forward,
    backward) per micro-batch and the recompute in that backward (the weight gradients as
    `schedule.schedule_bubble` takes them)."""
    if hop <= 0:
        return 0.0
    fwd = [f for f, _ in stages]
    bwd = [b for _, b in stages]
    wgt = weight_grads(bwd, recompute)

    def step(p2p: float) -> float:
        ops = simulate_v(name, len(stages), m, fwd, bwd, wgt, p2p)
        return max(op.end for rank in ops for op in rank)

    return max(step(hop) - step(0.0), 0.0)
