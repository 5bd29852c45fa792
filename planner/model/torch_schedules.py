"""How many micro-batches torch.distributed.pipelining's looped schedules take, and in what groups
(torchtitan runs them; `planner.inputs.torchtitan.Schedule`).

Source: pytorch/pytorch torch/distributed/pipelining/schedules.py at 00722e64 (the version whose
schedules take `backward_requires_autograd`, as torchtitan b5bcd76c's
distributed/pipeline_parallel.py `build_pipeline_schedule` passes it):

- ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble run rounds = max(1, m // pp) rounds
  of microbatches_per_round = m // rounds micro-batches, and raise unless m is a multiple of
  rounds. Within a round each rank runs chunk 0 for all of its micro-batches, then chunk 1, ...
  (`forward_stage_index`: (step // microbatches_per_round) % n_local_stages), after
  (n_local_stages - 1) x microbatches_per_round + 2 (pp - 1 - rank) warm-up forwards
  (`_get_warmup_ops`; the zero-bubble one 1 x (pp - 1 - rank)): Megatron-LM's interleaved
  schedule with its micro-batch group (--microbatch-group-size-per-virtual-pipeline-stage) set
  to microbatches_per_round. So m = 10 at pp 4 runs 2 rounds of 5, where Megatron's rule (groups
  of pp, the last at least pp) refuses it.
- Schedule1F1B raises unless m >= pp (its __init__: "Number of microbatches ... must be greater
  than or equal to the number of stages"); ScheduleGPipe takes any m.
- ScheduleDualPipeV raises unless m >= its stages, 2 pp.
- ScheduleZBVZeroBubble lays out max(2 pp - 1, m) micro-batches and leaves the slots of those
  past m empty; ScheduleLoopedBFS takes any m.

Where torch runs fewer micro-batches than the pipeline needs to fill (m < pp for the interleaved
and breadth-first schedules, in one round of m; m < 2 pp - 1 for ZB-V) its ranks wait through a
longer fill than the closed-form bubbles of `planner.model.schedule.schedule_bubble` price: those
steps are timed in torch's own order (`planner.model.looped_order`, `planner.model.v_bubble`), and
only what torch raises on is refused (`refusal`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.model.schedule import schedule_name

if TYPE_CHECKING:
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job

ROUNDS = frozenset({"Interleaved1F1B", "InterleavedZeroBubble"})
"""torch's schedules that run micro-batches in rounds (module docstring)."""


def rounds(pp: int, m: int) -> int:
    """torch's number_of_rounds for m micro-batches over pp ranks."""
    return max(1, m // pp)


def schedule_microbatches(job: Job, lay: Layout) -> int:
    """Micro-batches one call of the pipeline schedule runs: the step's, global_batch_size / (dp x
    micro_batch_size) (at least 1), over torchtitan's pipeline schedules a step (`[torchtitan]
    gradient_accumulation_steps` k with pp > 1: each a pp_schedule.step of local_batch_size /
    pipeline_parallel_microbatch_size, `planner.model.titan_accumulation`); all of them in
    Megatron-LM's one schedule a step."""
    m = max(lay.num_microbatches(job.global_batch_size), 1)
    if job.framework == "torchtitan" and lay.pp > 1:
        return max(m // job.titan.gradient_accumulation_steps, 1)
    return m


def microbatch_group(job: Job, lay: Layout) -> int | None:
    """Micro-batches a looped schedule runs through one chunk in a row: torch's
    microbatches_per_round under torchtitan's Interleaved1F1B and InterleavedZeroBubble (of one
    schedule's micro-batches, `schedule_microbatches`), else the layout's Megatron group (None:
    Megatron's default, pp)."""
    if job.framework == "torchtitan" and lay.vpp > 1 and schedule_name(job, lay) in ROUNDS:
        m = schedule_microbatches(job, lay)
        return m // rounds(lay.pp, m)
    return lay.microbatch_group_size_per_vp_stage


def refusal(name: str, pp: int, m: int) -> str | None:
    """Why torch's schedule `name` cannot run m micro-batches over pp pipeline ranks, as its
    constructor raises (module docstring); None where it runs them."""
    if pp == 1:
        return None
    if name == "1F1B" and m < pp:  # Schedule1F1B.__init__ (00722e64); GPipe takes any m
        return (
            f"at least pipeline_parallel_degree ({pp}) micro-batches (got {m}): torch raises "
            "with fewer (Schedule1F1B)"
        )
    r = rounds(pp, m)
    if name in ROUNDS and m % r:
        return (
            f"a number of micro-batches ({m}) that is a multiple of torch's rounds "
            f"({r} = {m} // {pp}); torch raises otherwise"
        )
    if name == "DualPipeV" and m < 2 * pp:
        return (
            f"at least as many micro-batches as stages, 2 x pipeline_parallel_degree "
            f"({2 * pp}; got {m}); torch raises otherwise"
        )
    return None
