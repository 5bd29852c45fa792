"""Megatron-LM's interleaved order on one pipeline rank, the two facts every schedule model here
reads: the schedule table (which micro-batch and chunk each entry runs) and the warm-up count
(NVIDIA/Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py, `get_schedule_table`
and `get_pp_rank_microbatches`). `planner.model.schedule.op_order` walks them;
`planner.model.in_flight` and `planner.model.early_receives` count from them."""

from __future__ import annotations

from functools import lru_cache


def schedule_table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """Megatron's schedule table: (micro-batch, chunk) per entry, in groups of `group`
    micro-batches, the last group taking every one left (schedules.py:989-1016)."""
    return [
        (i, c)
        for first in range(0, m, group)
        for c in range(vpp)
        for i in range(first, m if first + group >= m else first + group)
    ]


@lru_cache(maxsize=1 << 10)
def table_chunks(m: int, vpp: int, group: int) -> tuple[int, ...]:
    """The chunk of each entry of `schedule_table` (its second column), remembered: every rank
    of a layout walks the same table (`in_flight`, `early_receives`), and the search asks for
    the ranks of thousands of layouts that share their m, vpp and group. The same values as
    the table's, entry by entry: each group of micro-batches [first, min(first + group, m))
    runs chunk by chunk."""
    out: list[int] = []
    for first in range(0, m, group):
        size = min(group, m - first)
        for c in range(vpp):
            out += [c] * size
    return tuple(out)


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
