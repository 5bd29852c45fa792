"""Megatron's gradient syncs under the interleaved schedule, chunk by chunk: with
--overlap-grad-reduce and the default align_grad_reduce each model chunk's buckets launch
together at a point of the cooldown (`chunk_sync`), not bucket by bucket as they become ready,
and what outlasts the compute is `chunk_exposed`, which `planner.model.dp_sync.windowed` takes
in place of its backward window.
"""

from __future__ import annotations

from planner.inputs.layout import Layout


def last_group(lay: Layout, m: int) -> int:
    """Micro-batches in the interleaved table's last group (m mod g, g where g divides m)."""
    g = min(lay.microbatch_group_size_per_vp_stage or lay.pp, max(m, 1))
    return m % g or g


Chunked = tuple[int, float, float]
"""(vpp, gap, lead): `chunk_sync`'s chunks, the seconds between their launches and the drain
the first-launched-last one hides under."""


def chunk_sync(bwd: float, lay: Layout, m: int, rank: int = 0) -> Chunked | None:
    """How Megatron's default interleaved schedule launches a stage's gradient syncs: with
    --overlap-grad-reduce and align_grad_reduce (default True, training/config/common_config.py
    :80) training.py:4356-4357 sets grad_sync_func, so the buckets never go as they become final
    (the backwards run under no_sync, schedules.py:1141, 1422, 1456) and each chunk's go
    together: at the rank's backward k, the chunk whose last micro-batch's backward was
    k - rank (schedules.py:1446-1453), those not reached by the last backward right after it
    (:2063-2068). Chunk c's last backward is L c chunk backwards (`last_group`; bwd / vpp each)
    before the rank's last, and rank r's last backward ends r chunk backwards before rank 0's
    (the drain), so chunk c launches max(L c, r) chunk backwards before the step's end on every
    rank: the offset aligns the launches across the pipeline (`schedule.simulate`:
    tests/model/test_aligned_grad_sync.py). None without interleaving (`reduce_window`).
    `rank` 0 (the default, the only one whose chunk 0 has no drain to hide under) gives the
    most exposed of a stage's ranks."""
    if lay.vpp <= 1:
        return None
    chunk = bwd / lay.vpp
    return lay.vpp, last_group(lay, m) * chunk, rank * chunk


def chunk_exposed(red: float, chunked: Chunked) -> float:
    """Seconds of `red` seconds of gradient sync that outlast the step's compute when a stage's
    vpp chunks each launch their share red / vpp whole, chunk c at max(gap c, lead) before the
    end (`chunk_sync`), one after another on the links: the sync ends when the latest-bound
    chunk's and all launched after it are done, max over c of (c + 1) red / vpp less chunk c's
    lead. Linear in c from chunk 1 on (gap >= lead: L >= pp > rank): chunk 0, 1 or the last
    decides."""
    vpp, gap, lead = chunked
    share = red / vpp
    return max(share - lead, 2 * share - gap, red - (vpp - 1) * gap, 0.0)
