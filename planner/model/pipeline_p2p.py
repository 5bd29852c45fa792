"""Point-to-point seconds an interleaved pipeline (vpp > 1) exposes beyond its stages' own time,
by the schedule that runs it (`cost.estimate`'s `pp_comm_exposed`; 1F1B's blocking exchanges are
in its stage times, `cost._exchanges`):

- torch's V schedules (ZBVZeroBubble, DualPipeV): read off torch's order (`v_p2p.v_p2p_exposed`);
- torch's looped schedules below pp micro-batches, and InterleavedZeroBubble and LoopedBFS at
  every m: read off torch's order (`looped_p2p.looped_p2p_exposed`). The closed form below is
  Megatron's interleaved order's: on equal stages it lies up to 10 hops under the zero-bubble
  order's growth (pp 6, vpp 2, m 7 to 10: its warm-up runs half the forwards, so fewer hide the
  fill's wraps) and up to 104 over LoopedBFS's (pp 6, vpp 3, m 13: every micro-batch of a chunk
  runs before the next chunk, which hides each wrap; tests/model/test_titan_round_p2p.py);
- otherwise the interleaved order's closed form (`schedule.interleaved_p2p_exposed`) at the
  schedule's micro-batch group: Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage
  (default pp), or torch's microbatches_per_round under torchtitan's Interleaved1F1B and
  InterleavedZeroBubble (`torch_schedules.microbatch_group`: at pp 4, m 6 one round of 6, where
  Megatron's groups of 4 would leave a last group of 2 whose wraps the formula counts as
  exposed); with Megatron's waits on its forward sends, the MTP stage's extra hops
  (`mtp_hops.interleaved_extra`) and without the p2p overlap its blocking exchanges
  (`blocking_p2p`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import blocking_p2p
from planner.model.looped_order import unfilled
from planner.model.looped_p2p import looped_p2p_exposed
from planner.model.mtp_hops import Hops, interleaved_extra
from planner.model.schedule import interleaved_p2p_exposed
from planner.model.torch_schedules import microbatch_group
from planner.model.v_bubble import V_BUBBLES
from planner.model.v_p2p import v_p2p_exposed

REPLAYED = frozenset({"InterleavedZeroBubble", "LoopedBFS"})
"""torch's looped schedules whose p2p is read off their order at every m (module docstring)."""


def interleaved_exposed(
    job: Job,
    lay: Layout,
    name: str,
    m: int,
    hop: float,
    size: float,
    at: Callable[[float], Hops],
    stages: Sequence[tuple[float, float]],
    recompute: Sequence[float],
    stage_times: Sequence[float],
    worst: int,
) -> tuple[float, list[float]]:
    """(exposed seconds, Megatron's blocking exchanges per rank or none) of one step of
    schedule `name` (module docstring) over m micro-batches at the layout's vpp > 1: `hop` one
    message's seconds, `size` its bytes and `at` each rank's hops for a size (`cost._hops_at`),
    each stage's (forward, backward) and the recompute in that backward per micro-batch, each
    stage's time per micro-batch and the slowest stage `worst`."""
    if name in V_BUBBLES:  # a V turns chunks locally: no wrap-around hops
        return v_p2p_exposed(name, m, hop, stages, recompute), []
    if name in REPLAYED or unfilled(name, lay.pp, m):  # torch's looped order (docstring)
        return looped_p2p_exposed(name, lay.vpp, m, hop, stages, recompute), []
    fwds, bwds = zip(*stages, strict=True)
    # Megatron waits on each forward's send before freeing its output (schedules.py
    # :1811-1815): the slowest rank's vpp a micro-batch, the last rank's last chunk none
    waits = lay.vpp - (worst == lay.pp - 1) if job.framework == "megatron" else 0
    group = microbatch_group(job, lay)  # torch's round under torchtitan
    over = interleaved_p2p_exposed(lay.vpp, m, hop, fwds, bwds, group, waits)
    over += interleaved_extra(job, lay, m, size, at)
    if job.framework == "megatron" and not lay.overlap_p2p_comm:
        # blocking exchanges (`blocking_p2p`), never below the overlapped schedule's (whose
        # closed form is an upper bound where a hop outlasts a chunk's forward)
        blocking = blocking_p2p.exchanges(job, lay, size, at)
        return max(over, blocking_p2p.exposed(stage_times, blocking, m, lay.vpp)), blocking
    return over, []
