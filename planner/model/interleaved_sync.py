"""Megatron's gradient syncs under the interleaved schedule, chunk by chunk: with
--overlap-grad-reduce and the default align_grad_reduce each model chunk's buckets launch
together at a point of the cooldown (`chunk_sync`), not bucket by bucket as they become ready,
each chunk's share of the sync its own parameters' (`RankChunks`: the embedding in rank 0's
chunk 0, the output layer in the last rank's last chunk), and what outlasts the compute is
`chunk_exposed`, which `planner.model.dp_sync.windowed` takes in place of its backward window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.model.job_memo import ModelMemo


def last_group(lay: Layout, m: int) -> int:
    """Micro-batches in the interleaved table's last group (m mod g, g where g divides m)."""
    g = min(lay.microbatch_group_size_per_vp_stage or lay.pp, max(m, 1))
    return m % g or g


Chunked = tuple[int, float, float]
"""(vpp, gap, lead): `chunk_sync`'s chunks, the seconds between their launches and the drain
the first-launched-last one hides under."""


class RankChunks(NamedTuple):
    """The pipeline rank a stage's sync is timed on and each of its model chunks' (dense, expert)
    parameters on one GPU (`planner.model.stage_params.chunk_params`): each chunk is its own DDP
    with its own buckets (Megatron-LM d98e8a64 training.py:2312-2328), and only the first virtual
    stage of pipeline rank 0 builds the embedding, only the last of the last rank the output
    layer (training.py:2389-2399)."""

    rank: int
    params: tuple[tuple[float, float], ...]

    def fractions(self, kind: int) -> tuple[float, ...]:
        """Each chunk's fraction of the rank's parameters of `kind` (0 dense, 1 expert); even
        where the rank holds none of them."""
        each = [p[kind] for p in self.params]
        total = sum(each)
        if total <= 0:
            return tuple(1.0 / len(each) for _ in each)
        return tuple(x / total for x in each)


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
    tests/model/test_aligned_grad_sync.py). A larger L spaces the launches further apart. None
    without interleaving (`dp_sync.windowed` then takes the last micro-batch's backward).
    `rank`: the stage's own pipeline rank; 0 (the default, the only one whose chunk 0 has no
    drain to hide under) bounds every rank's exposure for the same shares."""
    if lay.vpp <= 1:
        return None
    chunk = bwd / lay.vpp
    return lay.vpp, last_group(lay, m) * chunk, rank * chunk


def chunk_exposed(shares: Sequence[float], chunked: Chunked) -> float:
    """Seconds of gradient sync that outlast the step's compute when a stage's chunks each
    launch their `shares[c]` seconds whole, chunk c at t_c = max(gap c, lead) before the end
    (`chunk_sync`), from the last chunk to the first (t_c grows with c), one after another on
    the links. On one link, first come first served, the last chunk (chunk 0) ends at the
    latest over c of chunk c's launch plus everything launched at or after it, chunks 0 to c:
    shares[0] + ... + shares[c] - t_c past the end. Each is a lower bound (none of that work
    starts before chunk c's launch), and the one whose launch begins the link's last busy
    spell is met. With even shares red / vpp, (c + 1) red / vpp - max(gap c, lead): linear in
    c from chunk 1 on (gap >= lead: L >= pp > rank), so chunk 0, 1 or the last decides; on
    rank 0 (lead 0) at least chunk 0's share shows, the embedding's gradients with it."""
    _, gap, lead = chunked
    done = worst = 0.0
    for c, share in enumerate(shares):  # the maxima inline, as `max` takes them (on a rise)
        done += share
        launch = gap * c
        if lead > launch:
            launch = lead
        past = done - launch
        if past > worst:
            worst = past
    return worst


_COUNTS: ModelMemo[tuple[range, ...], tuple[tuple[int, ...], ...]] = ModelMemo()
"""Each chunk's layers of each kind (`ModelArch.kind_counts`) per model and chunks."""


def chunk_counts(arch: ModelArch, chunks: tuple[range, ...]) -> tuple[tuple[int, ...], ...]:
    """Each of a rank's chunks' layers of each kind, remembered per model and chunks: what tells
    apart two interleaved ranks' chunk-by-chunk syncs (`chunk_sync`) for `cost.estimate`."""
    return _COUNTS.get(arch, chunks, lambda: tuple(map(arch.kind_counts, zip(chunks))))
