"""Peak memory per GPU, per pipeline stage: weights, gradients, optimizer states, activations and
fixed costs. The worst stage decides whether a layout fits.

Model states (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054, and Megatron's distributed
optimizer, docs/user-guide/features/dist_optimizer.md), bytes per parameter held by a GPU:

    weights     2 (bf16)                               / N_d at zero_stage 3
    gradients   4 (fp32 main_grad) or 2 (bf16)         / N_d at zero_stage >= 2
    optimizer   12 (fp32 master, Adam m and v)         / N_d at zero_stage >= 1

so zero_stage 1 with fp32 grads is Megatron's 6 + 12/d, with bf16 grads the ZeRO paper's
4 + 12/N_d. N_d is the data-parallel group the optimizer is sharded over: dp x cp for dense
parameters (Megatron shards over the DP x CP group) and the expert-data-parallel size
world / (etp x ep x pp) for expert parameters.

Activations: `planner.model.activations` per layer and micro-batch, times the micro-batches in
flight on each stage (1F1B: pp - r on rank r; interleaved: Megatron's warm-up count
2(pp - r - 1) + (vpp - 1) pp + 1 chunks, which on rank 0 gives Korthikanti's
1 + (pp - 1)/(pp x vpp) factor), capped by the micro-batches there are.

Fixed costs (CUDA context, cuBLAS workspace, NCCL communicators and buffers) and allocator
fragmentation are the constants below; they are planning constants, documented where defined and
checked against measured runs by `benchmarks/memory_fidelity.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, lru_cache

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import activations as act
from planner.model import params
from planner.model.activations import Shard
from planner.model.comms import DP_BUCKET_PARAMS
from planner.model.schedule import Chunks, layer_count, warmup

CUDA_CONTEXT_BYTES = 0.8 * GIB
"""CUDA context plus cuBLAS/cuDNN workspaces and PyTorch's own start-up allocations on one GPU:
about 500-600 MiB of context on Hopper with CUDA 12 (nvidia-smi of an idle process), plus the
Transformer Engine / cuBLASLt workspaces (32 MiB each per stream)."""

NCCL_BYTES_PER_GROUP = 0.25 * GIB
"""NCCL communicator buffers: NCCL_BUFFSIZE (4 MiB) x protocols x channels (up to 32) per peer
connection; about 0.2-0.3 GiB for each process group a rank communicates in."""

FRAGMENTATION = 1.10
"""PyTorch caching-allocator overhead on activation and transient memory: reserved / allocated,
typically 1.05-1.15 in long training runs (Megatron's own estimator multiplies by 1.05)."""


DEFAULT_HEADROOM_PCT = 3.0
"""Capacity kept free by default: the allocator's reserve and run-to-run variation."""


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one GPU of one pipeline stage."""

    stage: int
    layers: int
    weights: float
    grads: float
    optimizer: float
    activations: float
    """Activation bytes, the allocator's fragmentation on them included."""
    other: float
    """Buffers (FP8 weight caches, gradient buckets, gathered ZeRO-3 layers, their fragmentation)
    and the fixed costs (CUDA context, NCCL)."""
    unallocated: float = 0.0
    """Of the above, what PyTorch's allocator does not count as allocated: the CUDA context, the
    NCCL buffers and the fragmentation (reserved but free)."""

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other

    @property
    def allocated(self) -> float:
        """What `torch.cuda.max_memory_allocated()` would report on this stage's worst rank: the
        total less the CUDA context, NCCL buffers and fragmentation."""
        return self.total - self.unallocated


@dataclass(frozen=True)
class MemoryReport:
    stages: tuple[StageMemory, ...]
    capacity: float
    """Usable bytes: the GPU's memory less the headroom."""
    physical: float
    headroom_pct: float

    @property
    def worst(self) -> StageMemory:
        return max(self.stages, key=lambda st: st.total)

    @property
    def peak(self) -> float:
        return self.worst.total

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity

    @property
    def shortfall(self) -> float:
        """Bytes over capacity (<= 0 when it fits)."""
        return self.peak - self.capacity


def in_flight(layout: Layout, rank: int, num_microbatches: int) -> int:
    """Micro-batch chunks whose activations rank `rank` holds at its peak (1F1B / interleaved):
    its warm-up forwards and the steady state's next one. With the EP all-to-all overlap on one
    stage (pp = 1) a micro-batch's forward runs merged with the previous one's backward: two."""
    pp, vpp = layout.pp, layout.vpp
    total = num_microbatches * vpp
    if layout.ep_comm_overlap and pp == 1:
        return min(2, total)
    return min(warmup(pp, vpp, rank, total) + 1, total)


def _shard(job: Job, layout: Layout) -> Shard:
    s = job.seq_length // layout.cp
    return Shard(
        tokens=s * layout.micro_batch_size,
        tp=layout.tp,
        sequence_parallel=layout.sequence_parallel,
        etp=layout.expert_tp,
        recompute=job.recompute_policy(layout.recompute),
        fp8=job.precision == "fp8",
        seq_per_cp_rank=s,
        micro_batch_size=layout.micro_batch_size,
        fused_norm=job.fused_norm,
        cross_entropy=job.cross_entropy,
        fused_swiglu=job.fused_swiglu,
        sp_keeps_gathered_input=job.sp_keeps_gathered_input,
        flash_attention=job.flash_attention,
    )


def state_bytes_per_param(
    zero_stage: int, grad_bytes: float, shard_group: int, optimizer_bytes: float = 12.0
) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter: 2 bf16 weights, grad_bytes of gradient
    (4 fp32 main_grad, 2 bf16) and optimizer_bytes of fp32 master + Adam m, v (12; 8 with bf16
    moments); ZeRO stage z shards the optimizer (z >= 1), the gradients (z >= 2) and the weights
    (z = 3) over shard_group ranks."""
    weights = 2.0 / shard_group if zero_stage >= 3 else 2.0
    grads = grad_bytes / shard_group if zero_stage >= 2 else grad_bytes
    optim = optimizer_bytes / shard_group if zero_stage >= 1 else optimizer_bytes
    return weights, grads, optim


@cache
def _edge_params(arch: ModelArch, vocab: int) -> tuple[int, int, int, tuple[int, int]]:
    """(word embedding, position embedding, output layer incl. final norm, MTP split)."""
    words = vocab * arch.hidden_size
    positions = params.embedding_params(arch, vocab) - words
    out = params.output_params(arch, vocab) or words  # tied: the last stage keeps a copy
    return words, positions, out, params.mtp_layer_params(arch)


def decoder_params(job: Job, layout: Layout, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters of some decoder layers (a rank's chunks) on one GPU (TP / EP x
    expert-TP split)."""
    (dd, de), (md, me) = params.layer_kinds(job.arch)
    n_moe = job.arch.moe_in(chunks)
    n_dense = layer_count(chunks) - n_moe
    dense = (n_dense * dd + n_moe * md) / layout.tp
    expert = (n_dense * de + n_moe * me) / (layout.ep * layout.expert_tp)
    return dense, expert


def stage_params(job: Job, layout: Layout, rank: int, chunks: Chunks) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of pipeline rank `rank` (its decoder layers `chunks`)
    holds: the embedding on rank 0, the output layer and final norm on the last rank, the MTP
    layers on the rank whose last chunk holds them (`Layout.mtp_rank`), with a copy of the output
    layer where that is not the last rank (the MTP layers compute their own logits)."""
    arch = job.arch
    expert_split = layout.ep * layout.expert_tp
    dense, expert = decoder_params(job, layout, chunks)
    words, positions, out, (mtp_dense, mtp_expert) = _edge_params(
        arch, arch.padded_vocab(layout.tp)
    )
    if rank == 0:
        # word embeddings are split over tp; learned position embeddings are not
        dense += words / layout.tp + positions
    if rank == layout.pp - 1:
        # untied: the output layer; tied with pp > 1: Megatron keeps a copy of the embedding
        if layout.pp > 1 or arch.untie_embeddings_and_output_weights:
            dense += out / layout.tp
        dense += params.final_norm_params(arch)
    if rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        dense += mtp_dense / layout.tp
        expert += mtp_expert / expert_split
        if rank != layout.pp - 1:
            dense += out / layout.tp
    return dense, expert


def _fixed_bytes(job: Job, layout: Layout) -> float:
    groups = 1 + sum(d > 1 for d in (layout.tp, layout.pp, layout.cp, layout.ep, layout.dp))
    return CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups


def fp8_weight_cache_bytes(job: Job, layout: Layout, chunks: Chunks) -> float:
    """Transformer Engine caches each FP8 GEMM weight and its transpose across micro-batches
    (te/pytorch/module/linear.py `is_first_microbatch`; Megatron passes it). With
    `--fp8-param-gather` (Megatron's examples/llama/train_llama3_8b_h100_fp8.sh; needs the
    distributed optimizer) the fp8 weight (1 byte) and its transpose (1 byte) replace the bf16
    weight (2 bytes): nothing extra. Without it both sit beside the bf16 weight: 2 bytes per
    decoder-layer parameter (embedding and output layer are not FP8 GEMMs)."""
    if job.precision != "fp8" or (job.fp8_param_gather and layout.zero_stage >= 1):
        return 0.0
    return 2.0 * sum(decoder_params(job, layout, chunks))


def _transient_bytes(job: Job, layout: Layout, dense: float, expert: float, nlayers: int) -> float:
    """Buffers alive only part of the step: ZeRO-2/3 gradient buckets, ZeRO-3 gathered layers."""
    total = 0.0
    if layout.zero_stage >= 2:
        # the full-precision gradient bucket before it is reduce-scattered
        total += 4.0 * DP_BUCKET_PARAMS
    if layout.zero_stage == 3 and nlayers:
        per_layer = (dense + expert) / nlayers
        total += 2 * per_layer * 2.0 + per_layer * 4.0  # two gathered layers (prefetch) + grads
    return total


@dataclass(frozen=True)
class _PerLayer:
    """Activation bytes of one layer for one micro-batch, by kind, for one layout."""

    dense: float
    moe: float
    dense_full: float
    """Without full recompute: the working set while one layer is recomputed."""
    moe_full: float

    def kept(self, n_dense: int, n_moe: int) -> float:
        return n_dense * self.dense + n_moe * self.moe


@lru_cache(maxsize=4096)
def _per_layer(arch: ModelArch, sh: Shard) -> _PerLayer:
    dense = act.layer_bytes(arch, False, sh)
    dense_full = act.layer_bytes(arch, False, sh, recompute=False)
    if not arch.is_moe:
        return _PerLayer(dense, dense, dense_full, dense_full)
    moe = act.layer_bytes(arch, True, sh)
    moe_full = act.layer_bytes(arch, True, sh, recompute=False)
    return _PerLayer(dense, moe, dense_full, moe_full)


def _recompute_working(arch: ModelArch, layout: Layout, per: _PerLayer, chunks: Chunks) -> float:
    """Bytes a micro-batch's backward holds beyond what it kept (`_chunk_kept`) while layers are
    recomputed: the backward runs from the last layer to the first, freeing each layer's
    activations as it passes, and rebuilds a recomputed layer (or, with uniform full recompute,
    a group of recompute_num_layers) whole before its backward. Per-op recompute and uniform
    full recompute: one layer or group, whole, on top of the inputs kept. Block full recompute
    (the first N layers of a chunk recomputed): by then the chunk's later layers are freed, so
    only a chunk whose every layer is recomputed needs more than it kept."""
    full = per.moe_full if arch.moe_in(chunks) else per.dense_full
    if layout.recompute != "full":
        return full
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return min(k, max(len(c) for c in chunks)) * full
    return full if any(0 < len(c) <= k for c in chunks) else 0.0


def _chunk_kept(arch: ModelArch, layout: Layout, per: _PerLayer, chunk: range) -> float:
    """Activation bytes one micro-batch leaves in a chunk of layers until its backward.

    Full recompute, uniform with N = recompute_num_layers: the chunk's layers are checkpointed
    in groups of N, each group keeping its input only (ceil(n / N) layer inputs). Full
    recompute, block N: the first N layers of the chunk keep their inputs, the rest everything
    (Megatron counts N per model chunk, i.e. per virtual stage). Otherwise each layer keeps what
    its recompute policy leaves (`_PerLayer`)."""
    n, n_moe = len(chunk), arch.moe_count(chunk)
    if layout.recompute != "full":
        return per.kept(n - n_moe, n_moe)
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return math.ceil(n / k) * per.dense  # a layer input: the same for both kinds
    r = min(k, n)
    moe_rest = n_moe - arch.moe_count(range(chunk.start, chunk.start + r))
    return r * per.dense + (n - r - moe_rest) * per.dense_full + moe_rest * per.moe_full


def stage_memory(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    sh: Shard | None = None,
    per: _PerLayer | None = None,
) -> StageMemory:
    """Bytes on one GPU of pipeline rank `rank`, whose decoder layers are `chunks` (one range per
    virtual chunk, `Layout.chunk_layers`)."""
    arch = job.arch
    sh = sh or _shard(job, layout)
    per = per or _per_layer(arch, sh)
    weights, grads, optimizer, other = _state(job, layout, rank, chunks)
    n_layers = layer_count(chunks)

    m = layout.num_microbatches(job.global_batch_size)
    flight = in_flight(layout, rank, max(m, 1))
    per_mb = max((_chunk_kept(arch, layout, per, chunk) for chunk in chunks), default=0.0)
    acts = flight * per_mb
    if rank == 0:
        acts += flight * act.embedding_bytes(arch, sh)
    logits = act.logits_bytes(arch, arch.padded_vocab(layout.tp), sh)
    if rank == layout.pp - 1:
        acts += logits
    if rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        # each MTP layer runs one more decoder layer and one more output layer and loss, for the
        # micro-batches in flight through the rank's last chunk: one on the last rank (its loss
        # backward follows its forward), up to pp - rank elsewhere (as in 1F1B)
        last = per.moe if arch.moe_layers[-1] else per.dense
        held = 1 if rank == layout.pp - 1 else min(flight, layout.pp - rank)
        acts += held * arch.mtp_num_layers * (last + logits)
    if sh.recompute in ("full", "per_op") and n_layers:
        # the layers being recomputed hold their full activations during their backward pass
        working = _recompute_working(arch, layout, per, chunks)
        if rank == layout.pp - 1 and job.cross_entropy == "gathered":
            # that happens after the loss backward has released its fp32 buffers: only the two
            # bf16 logits tensors the pipeline's output buffers hold are still alive then
            # (measured on the Hagemann et al. layouts; for the other loss kernels both peaks
            # are added, the safe side, as no measured run separates them)
            vocab = arch.padded_vocab(layout.tp)
            released = logits - act.GATHERED_HELD_BYTES_PER_LOGIT * sh.tokens * vocab
            working = max(0.0, working - released)
        acts += working
    if layout.cp > 1 and n_layers:
        # ring attention keeps the K/V chunk in flight from the neighbour (double-buffered)
        # (K and V heads are replicated when tp exceeds the query groups: at least one per rank)
        kv_heads = max(arch.query_groups / layout.tp, 1)
        acts += 2 * 2 * sh.tokens * kv_heads * arch.head_dim * 2
    return StageMemory(
        stage=rank,
        layers=n_layers,
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        activations=acts * FRAGMENTATION,
        other=other,
        unallocated=_unallocated(job, layout, rank, chunks, acts),
    )


def _state(
    job: Job, layout: Layout, rank: int, chunks: Chunks
) -> tuple[float, float, float, float]:
    """(weights, grads, optimizer, other) bytes on one GPU of pipeline rank `rank`: all but the
    activations, so the same at every micro-batch size and recompute policy."""
    dense, expert = stage_params(job, layout, rank, chunks)
    z, opt = layout.zero_stage, job.optimizer_bytes
    w_d, g_d, o_d = state_bytes_per_param(z, job.grad_bytes, layout.dense_dp, opt)
    w_e, g_e, o_e = state_bytes_per_param(z, job.grad_bytes, max(layout.expert_dp, 1), opt)
    transient = _transient_bytes(job, layout, dense, expert, layer_count(chunks))
    other = (
        _fixed_bytes(job, layout)
        + fp8_weight_cache_bytes(job, layout, chunks)
        + transient * FRAGMENTATION
    )
    return dense * w_d + expert * w_e, dense * g_d + expert * g_e, dense * o_d + expert * o_e, other


def _unallocated(job: Job, layout: Layout, rank: int, chunks: Chunks, acts: float) -> float:
    """The part of a stage's bytes the caching allocator does not report as allocated: the fixed
    costs and the fragmentation on activations and transient buffers."""
    dense, expert = stage_params(job, layout, rank, chunks)
    transient = _transient_bytes(job, layout, dense, expert, layer_count(chunks))
    return _fixed_bytes(job, layout) + (acts + transient) * (FRAGMENTATION - 1)


def _peak_candidates(job: Job, layout: Layout, ranks: tuple[Chunks, ...]) -> list[int]:
    """The ranks that can hold the peak: among ranks with the same layers (count and MoE count
    of each chunk) and the same role (first, last, holding the MTP layers, or none), the lowest
    rank has the most micro-batches in flight and everything else equal."""
    arch = job.arch
    mtp = layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    seen: dict[tuple[object, ...], int] = {}
    for r, chunks in enumerate(ranks):
        shape = tuple((len(c), arch.moe_count(c)) for c in chunks)
        seen.setdefault((shape, r == 0, r == layout.pp - 1, r == mtp), r)
    return sorted(seen.values())


def state_floor(job: Job, layout: Layout) -> float:
    """The most a stage that can hold the peak (`_peak_candidates`) keeps besides activations:
    a lower bound on `estimate(...).peak` that holds for every micro-batch size and recompute
    policy of the layout (the search rejects a ZeRO stage on it before trying either)."""
    ranks = layout.chunk_layers(job.arch.num_layers)
    return max(
        (sum(_state(job, layout, r, ranks[r])) for r in _peak_candidates(job, layout, ranks)),
        default=0.0,
    )


def usable_bytes(physical: float, headroom_pct: float) -> float:
    """The memory a layout may use: the GPU's capacity less the headroom."""
    return physical * (1 - headroom_pct / 100)


def estimate(
    job: Job,
    layout: Layout,
    headroom_pct: float = DEFAULT_HEADROOM_PCT,
    all_stages: bool = True,
) -> MemoryReport:
    """Per-stage memory of a layout that passed `planner.search.rules`. With all_stages=False
    only the stages that can hold the peak are computed (the search's fast path; the peak is the
    same)."""
    sh = _shard(job, layout)
    per = _per_layer(job.arch, sh)
    chunks = layout.chunk_layers(job.arch.num_layers)
    ranks = range(len(chunks)) if all_stages else _peak_candidates(job, layout, chunks)
    stages = tuple(stage_memory(job, layout, r, chunks[r], sh, per) for r in ranks)
    physical = job.cluster.capacity_bytes
    return MemoryReport(
        stages=stages,
        capacity=usable_bytes(physical, headroom_pct),
        physical=physical,
        headroom_pct=headroom_pct,
    )
