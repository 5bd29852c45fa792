"""The pinned host tensors of Megatron's CPU-offloaded optimizer, block by block: what PyTorch's
pinned allocator takes for the pieces of the parameters a GPU's optimizer shard holds.

PyTorch's CachingHostAllocator rounds every pinned block up to a power of two (aten/src/ATen/
core/CachingHostAllocator.h, `allocate`: "Round up the allocation to the nearest power of
two"), block by block, so the round-up is each tensor's, not one of the total.

Megatron-LM d98e8a64, --optimizer-cpu-offload (which needs --use-precision-aware-optimizer,
training/arguments.py:1884-1887): the distributed optimizer hands HybridDeviceOptimizer the
16-bit shard of each model parameter it owns (distrib_optimizer.py:412-414, :491-494, a view
`model_param.view(-1)[start:end]` of the parameter's range in this data-parallel rank's part
of a bucket) and HybridDeviceOptimizer gives each one it offloads
- a pinned fp32 master, its own block (cpu_offloading/hybrid_optimizer.py:274, the 16-bit
  clone pinned, then :278-280 an fp32 clone of it pinned in its place; the 16-bit block goes
  back to the allocator's cache, where the next tensor of its size class takes it again);
- a pinned fp32 gradient buffer, its own block (:108-112, `torch.empty(param.shape,
  dtype=param.dtype, pin_memory=...)`, made at the first step and kept);
torch AdamW's two moments are `torch.zeros_like` of the master (torch/optim/adam.py
`_init_group`), which does not pin: pageable and exact.
So each offloaded piece of n elements pins two blocks of 2^ceil(log2(4n)) bytes
(`pinned_block`). The pieces are the distributed optimizer's
(`DistributedOptimizer._compute_per_buffer_param_layout`, distrib_optimizer.py:506-584, with
optimizer/param_layout.py:19-42): a model chunk's parameters in backprop order (reversed), each
start 64-element aligned; a bucket closes once it holds bucket_size elements, its end padded to
a multiple of lcm(dp, 128); each bucket split into dp equal parts, data-parallel rank r owning
part r (`pieces`). Expert parameters have a buffer of their own, split over the expert
data-parallel group.

Planner lists a chunk's GEMM weights (`muon_layout.layer_shapes`, QKV whole as the parameter
is; each local expert's fc1 and fc2), its word embedding on the first rank's first chunk and
its output layer on the last stage's (vocabulary / tp rows each); the norms, biases and router
(a few thousandths of the parameters) are left out of the walk and take the walk's ratio.
MTP layers are left out. The ratio (`rounding`) is the fullest data-parallel rank's blocks over
its even share of the buffer, so a rank that holds more than its share is charged for it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo
from planner.model.muon_layout import layer_shapes
from planner.model.schedule import Chunks
from planner.model.stage_params import stage_params

Rounding = Literal["exact", "floor", "ceiling"]
"""How a rank's bytes take the blocks' round-up: `rank_rounding`'s, none (a floor: every
`rounding` >= 1), or `rounding_ceiling`'s (a ceiling, without the walk of the pieces)."""

MASTER_BYTES = 4.0
"""Bytes an element of each pinned host tensor the offloaded optimizer gives a piece: the fp32
master and the fp32 gradient buffer (hybrid_optimizer.py:109-110, :278)."""
PINNED_TENSORS = 2
"""Pinned host tensors a piece (the master, the gradient buffer; the moments are pageable)."""
PARAM_ALIGN = 64
"""Every parameter starts 64-element aligned (optimizer/param_layout.py:24-26)."""
BUCKET_ALIGN = 128
"""Each bucket ends at a multiple of lcm(dp, 128) (param_layout.py:29-33)."""
DEFAULT_BUCKET = 40_000_000
"""--ddp-bucket-size's default: max(40M, 1M x the data-parallel size) (training.py:2186-2194)."""


def pinned_block(nbytes: float) -> float:
    """Bytes of the block PyTorch's pinned allocator gives `nbytes`: the next power of two."""
    return 2.0 ** math.ceil(math.log2(nbytes)) if nbytes > 1 else 1.0


def _up(value: int, divisor: int) -> int:
    return -(-value // divisor) * divisor


def pieces(sizes: Sequence[int], bucket_size: int | None, dp: int) -> list[list[int]]:
    """Elements of each piece of each data-parallel rank (the module docstring's layout):
    `sizes` the chunk's parameters in forward order, `bucket_size` None for one bucket."""
    out: list[list[int]] = [[] for _ in range(dp)]
    end_align = math.lcm(dp, BUCKET_ALIGN)
    spans: list[tuple[int, int]] = []  # parameters of the open bucket
    start = bucket_start = 0

    def close(end: int) -> int:
        bucket_end = _up(end, end_align)
        part = (bucket_end - bucket_start) // dp
        for lo, hi in spans:
            first, last = (lo - bucket_start) // part, (hi - 1 - bucket_start) // part
            for r in range(first, last + 1):
                a, b = bucket_start + r * part, bucket_start + (r + 1) * part
                out[r].append(min(hi, b) - max(lo, a))
        spans.clear()
        return bucket_end

    for n in reversed(sizes):
        start = _up(start, PARAM_ALIGN)
        spans.append((start, start + n))
        start += n
        if bucket_size is not None and start - bucket_start >= bucket_size:
            start = bucket_start = close(start)
    if spans:
        close(start)
    return out


def rounding(sizes: Sequence[int], bucket_size: int | None, dp: int) -> float:
    """Pinned bytes of the fullest data-parallel rank's pieces (`pinned_block` of each, fp32)
    over MASTER_BYTES x its even share of `sizes`: >= 1 where the blocks round up or the rank
    holds more than its share (1.0 with no parameters)."""
    total = sum(sizes)
    if total <= 0:
        return 1.0
    most = max(
        sum(pinned_block(MASTER_BYTES * n) for n in rank) for rank in pieces(sizes, bucket_size, dp)
    )
    return most / (MASTER_BYTES * total / dp)


def rounding_ceiling(sizes: Sequence[int], bucket_size: int | None, dp: int) -> float:
    """A ceiling of `rounding` without the walk of the pieces: every block is under twice its
    piece (`pinned_block` of 4n >= 4 bytes), and the fullest rank's pieces are no more than its
    parts of the padded buckets, the elements with each parameter's alignment (< PARAM_ALIGN)
    and each bucket's end (< lcm(dp, BUCKET_ALIGN); at most a bucket a parameter): under
    2 x padded / elements (1.0 with no parameters)."""
    return ceiling_of(sum(sizes), len(sizes), bucket_size, dp)


def ceiling_of(total: int, count: int, bucket_size: int | None, dp: int) -> float:
    """`rounding_ceiling` of `count` parameters of `total` elements in all: all it reads of
    their sizes."""
    if total <= 0:
        return 1.0
    buckets = 1 if bucket_size is None else count
    padded = total + PARAM_ALIGN * count + buckets * math.lcm(dp, BUCKET_ALIGN)
    return 2.0 * padded / total


def bucket_size(job: Job, layout: Layout, rank: int, chunk: int) -> int | None:
    """The DDP bucket size of pipeline rank `rank`'s model chunk `chunk`: None (one bucket)
    without --overlap-grad-reduce and on every rank but the first and every chunk but the first
    (training.py:2504-2515); else --ddp-bucket-size, the chunk's parameters / --ddp-num-buckets
    (approximated by the rank's), or DEFAULT_BUCKET / 1M x dp."""
    if rank > 0 or chunk > 0 or not layout.overlap_grad_reduce:
        return None
    if layout.ddp_bucket_size is not None:
        return layout.ddp_bucket_size
    if layout.ddp_num_buckets:
        chunks = layout.chunk_layers(job.arch.num_layers)[0]
        return int(sum(stage_params(job, layout, 0, chunks))) // layout.ddp_num_buckets
    return max(DEFAULT_BUCKET, 1_000_000 * layout.dense_dp)


_SIZES: JobMemo[tuple[object, ...], tuple[list[int], list[int]]] = JobMemo()
"""A decoder layer's (dense, expert) parameter sizes per job, kind and (tp, ep, expert tp)."""


def chunk_sizes(
    job: Job, layout: Layout, rank: int, chunk: int, chunks: Chunks
) -> tuple[list[int], list[int]]:
    """(dense, expert) parameter sizes of pipeline rank `rank`'s model chunk `chunk` on one GPU,
    forward order (the module docstring's list)."""
    arch, lay = job.arch, layout
    dense: list[int] = []
    expert: list[int] = []
    words = arch.padded_vocab(lay.tp) // lay.tp * arch.hidden_size
    if rank == 0 and chunk == 0:
        dense.append(words)
    kinds = job.arch.layer_kinds
    for layer in chunks[chunk]:
        d_sizes, e_sizes = _layer_sizes(job, lay, kinds[layer], layer)
        dense += d_sizes
        expert += e_sizes
    if _holds_output(job, lay, rank, chunk, chunks):
        dense.append(words)
    return dense, expert


def _layer_sizes(job: Job, lay: Layout, kind: object, layer: int) -> tuple[list[int], list[int]]:
    """(dense, expert) parameter sizes of decoder layer `layer` (of kind `kind`) on one GPU,
    remembered per job, kind and (tp, ep, expert tp): a layer's sizes read its kind and the
    degrees alone (`muon_layout.layer_shapes`)."""
    each = _SIZES.of(job)
    key = (kind, lay.tp, lay.ep, lay.expert_tp)
    if key not in each:
        d, e = layer_shapes(job, lay, layer)
        each[key] = [r * c for r, c in d], [r * c for r, c in e]
    return each[key]


def _holds_output(job: Job, lay: Layout, rank: int, chunk: int, chunks: Chunks) -> bool:
    """Whether rank `rank`'s chunk `chunk` lists the output layer (the last stage's, where it is
    not the word embedding itself: pp 1 with tied weights)."""
    last = rank == lay.output_rank and chunk == len(chunks) - 1
    return last and (lay.pp > 1 or job.arch.untie_embeddings_and_output_weights)


_TOTALS: JobMemo[tuple[object, ...], tuple[int, int, int, int]] = JobMemo()
"""A decoder layer's (dense elements, dense parameters, expert elements, expert parameters) per
job, kind and (tp, ep, expert tp): `_layer_sizes`' sums and lengths."""


def chunk_totals(
    job: Job, layout: Layout, rank: int, chunk: int, chunks: Chunks
) -> tuple[tuple[int, int], tuple[int, int]]:
    """(elements, parameters) of `chunk_sizes`' dense and expert lists, without making them
    (all `rounding_ceiling` reads of them): the same integers, from each kind's layer counts in
    the chunk (`ModelArch.kind_counts`)."""
    arch, lay = job.arch, layout
    d_total = d_n = e_total = e_n = 0
    words = arch.padded_vocab(lay.tp) // lay.tp * arch.hidden_size
    if rank == 0 and chunk == 0:
        d_total, d_n = d_total + words, d_n + 1
    if _holds_output(job, lay, rank, chunk, chunks):
        d_total, d_n = d_total + words, d_n + 1
    memo = _TOTALS.of(job)
    for kind, n in zip(arch.kinds, arch.kind_counts((chunks[chunk],)), strict=True):
        if not n:
            continue
        key = (kind, lay.tp, lay.ep, lay.expert_tp)
        sums = memo.get(key)
        if sums is None:
            d, e = _layer_sizes(job, lay, kind, arch.layer_kinds.index(kind))
            sums = memo[key] = (sum(d), len(d), sum(e), len(e))
        d_total += n * sums[0]
        d_n += n * sums[1]
        e_total += n * sums[2]
        e_n += n * sums[3]
    return (d_total, d_n), (e_total, e_n)


_RATIOS: JobMemo[tuple[object, ...], tuple[float, float]] = JobMemo()


def rank_rounding(
    job: Job, layout: Layout, rank: int, chunks: Chunks, whole: bool = False, ceiling: bool = False
) -> tuple[float, float]:
    """(dense, expert) `rounding` of pipeline rank `rank`'s pieces, over its chunks' buffers
    together (a chunk's ratio weighted by its parameters): the dense ones split over the
    optimizer's data-parallel shards, the experts' over the expert ones; `whole`: the
    parameters whole (one shard); `ceiling`: `rounding_ceiling` in its place, no less."""
    n = job.optimizer_instances
    dps = max(layout.dense_dp // n, 1), max(layout.expert_dp // n, 1)
    if whole:
        dps = 1, 1
    lay = layout
    buckets = (lay.overlap_grad_reduce, lay.ddp_bucket_size, lay.ddp_num_buckets, lay.dense_dp)
    key = (
        lay.tp,
        lay.ep,
        lay.expert_tp,
        lay.pp,
        lay.output_rank,
        dps,
        rank,
        chunks,
        buckets,
        ceiling,
    )
    memo = _RATIOS.of(job)
    if key not in memo:
        memo[key] = _rank_rounding(job, layout, rank, chunks, dps, ceiling)
    return memo[key]


def _rank_rounding(
    job: Job, layout: Layout, rank: int, chunks: Chunks, dps: tuple[int, int], ceiling: bool
) -> tuple[float, float]:
    weighted = [0.0, 0.0]
    totals = [0.0, 0.0]
    for i in range(len(chunks)):
        size = bucket_size(job, layout, rank, i)
        if ceiling:  # the sizes' sums and counts alone (`chunk_totals`: the same integers)
            for k, (total, n) in enumerate(chunk_totals(job, layout, rank, i, chunks)):
                weighted[k] += ceiling_of(total, n, size, dps[k]) * total
                totals[k] += total
            continue
        for k, sizes in enumerate(chunk_sizes(job, layout, rank, i, chunks)):
            weighted[k] += rounding(sizes, size, dps[k]) * sum(sizes)
            totals[k] += sum(sizes)
    dense, expert = (w / t if t > 0 else 1.0 for w, t in zip(weighted, totals, strict=True))
    return dense, expert
