"""The padding of Muon's shard-aligned gradient and parameter buffers (`padding`).

Under --optimizer muon with --use-distributed-optimizer, Megatron-LM d98e8a64 runs its
layer-wise optimizer with the layer-wise parameter layout (the default; `Job.muon_whole_params`
is the legacy one without it): DDP routes the matrices Muon orthogonalises (2-D, not the
embedding or output layer, layer_wise_optimizer.py:38-53, `is_managed_by_layer_wise_optimizer`)
to buffers of their own, dense and expert-parallel apart (param_and_grad_buffer.py
`group_params_for_buffers`), laid out by
LayerWiseDistributedOptimizer._compute_per_buffer_param_layout (layer_wise_optimizer.py:196-444)
so that every data-parallel shard holds whole matrices (`buffer_numel` follows it):
- walking the chunk's matrices in backprop order, a bucket closes once it holds
  max(bucket_size, int(0.9 x dp x its largest matrix)) elements (:410) and the next matrix
  would grow it (`_absorbs`, :383-388, placing each on the least-loaded shard, :390-392);
- each bucket deals its matrices, by Newton-Schulz cost max(m, n) min(m, n)^2 (:258-273) in
  descending order, to the shard with the least cost so far (persisting over the buckets) among
  those whose 64-aligned cursor stays within 1.3 x the even share (:313-326), else to the
  emptiest shard;
- every shard is padded to the largest, rounded up to lcm(64, lcm(dp, 128) / dp) (:184-193,
  :332), and the buffer is the buckets' sum (:423), padding included: both the fp32 gradient
  buffer and the distributed optimizer's parameter buffer take that size
  (param_and_grad_buffer.py:1115, :1184, :1190).
bucket_size is --ddp-bucket-size, or the chunk's parameters // --ddp-num-buckets, or
max(40M, 1M x the dp x cp group) (training.py:2186-2194), None (one bucket) without
--overlap-grad-reduce, on every pipeline rank but the first and for every model chunk but the
first (training.py:2504-2515). dp is the group each optimizer instance shards over
(intra_dp_cp, intra_expt_dp: training.py:2276-2293).

The real run logs what this re-derives: "Layerwise param layout: ... total_padding=...
overhead=...%" (layer_wise_optimizer.py:425-436), one line per buffer.

Planner lists each decoder layer's matrices on one GPU (`muon_time.matrices`, QKV whole as the
parameter is) in layer order, the router after the layer's other dense matrices (Megatron builds
it before the shared experts: a small reordering); MTP layers are left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo
from planner.model.muon_time import matrices
from planner.model.schedule import Chunks
from planner.model.stage_params import stage_params

NUMEL_EPSILON = 0.3
"""A shard may take matrices up to (1 + this) x the bucket's even share (:313)."""
PADDING_FLOOR = 0.9
"""A bucket's soft minimum is at least this x dp x its largest matrix (:365, :410)."""
ALIGN = 64
"""Every matrix starts 64-element aligned (param_layout.py `pad_param_start`)."""

Shape = tuple[int, int]


def _up(value: float, divisor: int) -> int:
    return int(math.ceil(value / divisor) * divisor)


def _emit(shapes: list[Shape], dp: int, divisor: int, loads: list[int], held: list[int]) -> int:
    """Elements of one bucket (`_emit_bucket`): its matrices dealt to dp shards, each shard
    padded to the largest; `held` gains each shard's matrix elements."""
    cap = sum(r * c for r, c in shapes) / dp * (1 + NUMEL_EPSILON)
    cursors = [0] * dp
    for r, c in sorted(shapes, key=lambda s: -max(s) * min(s) ** 2):
        n = r * c
        fits = [s for s in range(dp) if _up(cursors[s], ALIGN) + n <= cap]
        if fits:
            shard = min(fits, key=loads.__getitem__)
        else:
            shard = min(range(dp), key=cursors.__getitem__)
        cursors[shard] = _up(cursors[shard], ALIGN) + n
        loads[shard] += max(r, c) * min(r, c) ** 2
        held[shard] += n
    return dp * _up(max(cursors), divisor)


def buffer_numel(shapes: Sequence[Shape], bucket_size: int | None, dp: int) -> int:
    """Elements of the layer-wise buffer of matrices `shapes` (forward order) over dp shards,
    padding included (module docstring; layer_wise_optimizer.py:242-423)."""
    return lay_out(shapes, bucket_size, dp)[0]


def lay_out(shapes: Sequence[Shape], bucket_size: int | None, dp: int) -> tuple[int, list[int]]:
    """(`buffer_numel`, the matrix elements each of the dp shards holds over all buckets): data-
    parallel rank r updates, and keeps the optimizer states of, shard r of every bucket
    (layer_wise_optimizer.py:667-672, `_shard_params_from_layout`)."""
    held = [0] * dp
    if not shapes:
        return 0, held
    divisor = math.lcm(ALIGN, math.lcm(dp, 128) // dp)
    loads = [0] * dp  # Newton-Schulz cost per shard, over all buckets
    total = 0
    chunk: list[Shape] = []
    numel = largest = 0
    placed = [0] * dp  # the closing rule's estimate of the shards' fill
    for shape in reversed(shapes):
        n = shape[0] * shape[1]
        if bucket_size is not None and chunk:
            threshold = max(bucket_size, int(dp * largest * PADDING_FLOOR))
            absorbs = _up(min(placed), ALIGN) + n <= _up(max(placed), divisor)
            if numel >= threshold and not absorbs:
                total += _emit(chunk, dp, divisor, loads, held)
                chunk, numel, largest, placed = [], 0, 0, [0] * dp
        s = min(range(dp), key=placed.__getitem__)
        placed[s] = _up(placed[s], ALIGN) + n
        chunk.append(shape)
        numel += n
        largest = max(largest, n)
    return total + _emit(chunk, dp, divisor, loads, held), held


def layer_shapes(job: Job, layout: Layout, layer: int) -> tuple[list[Shape], list[Shape]]:
    """(dense, expert) Muon matrices of decoder layer `layer` on one GPU, as parameters."""
    kind = job.arch.layer_kinds[layer]
    lay = layout
    dense, expert = matrices(job.arch, kind, lay.ep, lay.tp, lay.expert_tp, split_qkv=False)
    d = [(round(m[2]), round(m[3])) for m in dense for _ in range(round(m[4]))]
    e = [(round(m[2]), round(m[3])) for m in expert for _ in range(round(m[4]))]
    return d, e


def matrix_elements(job: Job, layout: Layout, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) elements of the matrices Muon takes among decoder layers `chunks` on one
    GPU (`layer_shapes`): Megatron's `_is_muon_excluded` (emerging_optimizers.py:140-147) leaves
    the rest of the layers (1-D norms and biases; Mamba's in_proj, use_muon False) to Adam."""
    dense = expert = 0.0
    for chunk in chunks:
        for layer in chunk:
            d, e = layer_shapes(job, layout, layer)
            dense += sum(r * c for r, c in d)
            expert += sum(r * c for r, c in e)
    return dense, expert


_PADS: JobMemo[tuple[object, ...], tuple[float, float, float, float]] = JobMemo()
"""`_walk` per job and (degrees, instances, bucketing, rank's chunks)."""


def applies(job: Job, layout: Layout) -> bool:
    """Whether the layer-wise layout lays the buffers out: Muon with the distributed optimizer
    (ZeRO 1 here) and the layer-wise layout, under Megatron-LM, with gradients."""
    return (
        job.optimizer == "muon"
        and layout.zero_stage == 1
        and not job.muon_whole_params
        and job.framework == "megatron"
        and not job.frozen_model
    )


def _bucket_size(job: Job, layout: Layout, rank: int, chunks: Chunks) -> int | None:
    if rank > 0 or not layout.overlap_grad_reduce:
        return None
    if layout.ddp_bucket_size is not None:
        return layout.ddp_bucket_size
    if layout.ddp_num_buckets:
        return int(sum(stage_params(job, layout, rank, chunks))) // layout.ddp_num_buckets
    return max(40_000_000, 1_000_000 * layout.dense_dp)


def padding(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) padding elements of the Muon buffers on one GPU of pipeline rank `rank`
    (its decoder layers `chunks`, one model chunk each): each chunk's buffer less its matrices
    (`buffer_numel`); experts share the dense buffer where they are not expert-parallel (ep 1,
    expert TP = TP). (0, 0) where the layout does not apply (`applies`)."""
    if not applies(job, layout):
        return 0.0, 0.0
    return _walk(job, layout, rank, chunks)[:2]


def largest_shards(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) Muon matrix elements of the fullest data-parallel shard on pipeline rank
    `rank`, over its chunks' buffers (`lay_out`: rank r holds shard r of each): whose states the
    worst GPU keeps. With experts in the dense buffer (`padding`), (theirs and the dense, 0).
    (0, 0) where the layout does not apply (`applies`)."""
    if not applies(job, layout):
        return 0.0, 0.0
    return _walk(job, layout, rank, chunks)[2:]


def _walk(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float, float, float]:
    n = job.optimizer_instances
    dp, edp = max(layout.dense_dp // n, 1), max(layout.expert_dp // n, 1)
    bucket = _bucket_size(job, layout, rank, chunks)
    lay = layout
    key = (lay.tp, lay.ep, lay.expert_tp, dp, edp, bucket, tuple(chunks))
    memo = _PADS.of(job)
    if key not in memo:
        memo[key] = _padding(job, layout, chunks, (dp, edp), bucket)
    return memo[key]


def _padding(
    job: Job, layout: Layout, chunks: Chunks, dps: tuple[int, int], bucket: int | None
) -> tuple[float, float, float, float]:
    merged = layout.ep == 1 and layout.expert_tp == layout.tp
    pad_d = pad_e = 0.0
    held_d, held_e = [0] * dps[0], [0] * dps[1]
    for i, chunk in enumerate(chunks):
        dense: list[Shape] = []
        expert: list[Shape] = []
        for layer in chunk:
            d, e = layer_shapes(job, layout, layer)
            dense += d + e if merged else d
            expert += [] if merged else e
        size = bucket if i == 0 else None
        (numel_d, shards_d), (numel_e, shards_e) = (
            lay_out(dense, size, dps[0]),
            lay_out(expert, size, dps[1]),
        )
        pad_d += numel_d - sum(r * c for r, c in dense)
        pad_e += numel_e - sum(r * c for r, c in expert)
        held_d = [a + b for a, b in zip(held_d, shards_d, strict=True)]
        held_e = [a + b for a, b in zip(held_e, shards_e, strict=True)]
    return pad_d, pad_e, float(max(held_d)), float(max(held_e))
