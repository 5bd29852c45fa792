"""Megatron-LM's interleaved order on one pipeline rank, the two facts every schedule model here
reads: the schedule table (which micro-batch and chunk each entry runs) and the warm-up count
(NVIDIA/Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py, `get_schedule_table`
and `get_pp_rank_microbatches`). `planner.model.schedule.op_order` walks them;
`planner.model.in_flight` and `planner.model.early_receives` count from them."""

from __future__ import annotations


def schedule_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """Megatron's schedule table: (micro-batch, chunk) per entry, in groups of `group`
    micro-batches, the last group taking every one left (schedules.py:989-1016)."""
    return [
        (i, c)
        for first in range(0, m, group)
        for c in range(vpp)
        for i in range(first, m if first + group >= m else first + group)
    ]


def warmup(
    pp: int, vpp: int, rank: int, total: int, group: int | None = None, ep_overlap: bool = False
) -> int:
    """Forwards a rank runs before its first backward (`get_pp_rank_microbatches`):
    pp - rank - 1 without interleaving, (pp - rank - 1) x 2 + (vpp - 1) x g with it (g the
    micro-batches per group of a virtual stage, --microbatch-group-size-per-virtual-pipeline-
    stage, default pp), at most `total` (the rank's m x vpp chunk forwards). Under the EP
    all-to-all overlap (--overlap-moe-expert-parallel-comm) one more, so that each merged
    forward and backward are of different micro-batches (schedules.py:966-970; without
    pipelining combined_1f1b_schedule_for_no_pipelining runs F0, then [F1 | B0], ...: one too)."""
    g = group or pp
    warm = pp - rank - 1 if vpp == 1 else (pp - rank - 1) * 2 + (vpp - 1) * g
    return min(warm + (1 if ep_overlap else 0), total)
