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

Activations: `planner.activations` per layer and micro-batch, times the micro-batches in flight on
each stage (1F1B: pp - r on rank r; interleaved: Megatron's warm-up count
2(pp - r - 1) + (vpp - 1) pp + 1 chunks, which on rank 0 gives Korthikanti's
1 + (pp - 1)/(pp x vpp) factor), capped by the micro-batches there are.

Fixed costs (CUDA context, cuBLAS workspace, NCCL communicators and buffers) and allocator
fragmentation are the constants below; they are planning constants, documented where defined and
checked against measured runs by `benchmarks/memory_fidelity.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner import activations as act
from planner import params
from planner.activations import Shard
from planner.layout import Layout
from planner.spec import Job
from planner.units import GIB, MIB

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

DP_BUCKET_PARAMS = 40_000_000
"""Megatron's default DDP bucket (max(40M, 1M x dp) parameters): the transient full-precision
gradient bucket of ZeRO-2/3 before it is reduce-scattered."""

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
    other: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.other


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


def stage_chunks(layers_on_rank: int, vpp: int) -> list[int]:
    """A rank's layers split into vpp chunks as evenly as possible (first chunks get more)."""
    base, extra = divmod(layers_on_rank, vpp)
    return [base + (1 if c < extra else 0) for c in range(vpp)]


def in_flight(layout: Layout, rank: int, num_microbatches: int) -> int:
    """Micro-batch chunks whose activations rank `rank` holds at its peak (1F1B / interleaved)."""
    pp, vpp = layout.pp, layout.vpp
    if vpp == 1:
        return min(pp - rank, num_microbatches)
    warmup = 2 * (pp - rank - 1) + (vpp - 1) * pp
    return min(warmup + 1, num_microbatches * vpp)


def _shard(job: Job, layout: Layout) -> Shard:
    s = job.seq_length // layout.cp
    return Shard(
        tokens=s * layout.micro_batch_size,
        tp=layout.tp,
        sequence_parallel=layout.sequence_parallel,
        etp=layout.expert_tp,
        recompute=layout.recompute,
        fp8=job.precision == "fp8",
        seq_per_cp_rank=s,
        micro_batch_size=layout.micro_batch_size,
        fused_norm=job.fused_norm,
        vocab_parallel_loss=job.vocab_parallel_loss,
    )


def _layer_ranges(job: Job, layout: Layout) -> list[range]:
    out, start = [], 0
    for n in layout.stage_layers(job.arch.num_layers):
        out.append(range(start, start + n))
        start += n
    return out


def state_bytes_per_param(
    zero_stage: int, grad_bytes: float, shard_group: int
) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter: 2 bf16 weights, grad_bytes of gradient
    (4 fp32 main_grad, 2 bf16) and 12 of fp32 master + Adam m, v; ZeRO stage z shards the
    optimizer (z >= 1), the gradients (z >= 2) and the weights (z = 3) over shard_group ranks."""
    weights = 2.0 / shard_group if zero_stage >= 3 else 2.0
    grads = grad_bytes / shard_group if zero_stage >= 2 else grad_bytes
    optim = 12.0 / shard_group if zero_stage >= 1 else 12.0
    return weights, grads, optim


def stage_params(job: Job, layout: Layout, rank: int, layers: range) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of pipeline rank `rank` holds."""
    arch = job.arch
    dense = 0.0
    expert = 0.0
    for i in layers:
        d, e = params.layer_params(arch, i)
        dense += d / layout.tp
        expert += e / (layout.ep * layout.expert_tp)
    vocab = arch.padded_vocab(layout.tp)
    last = rank == layout.pp - 1
    if rank == 0:
        # word embeddings are split over tp; learned position embeddings are not
        words = vocab * arch.hidden_size
        dense += words / layout.tp + params.embedding_params(arch, vocab) - words
    if last:
        # untied: the output layer; tied with pp > 1: Megatron keeps a copy of the embedding
        out = params.output_params(arch, vocab)
        if out == 0 and layout.pp > 1:
            out = vocab * arch.hidden_size
        dense += out / layout.tp + params.final_norm_params(arch)
        mtp_dense, mtp_expert = params.mtp_layer_params(arch)
        dense += mtp_dense / layout.tp
        expert += mtp_expert / (layout.ep * layout.expert_tp)
    return dense, expert


def _fixed_bytes(job: Job, layout: Layout) -> float:
    groups = 1 + sum(d > 1 for d in (layout.tp, layout.pp, layout.cp, layout.ep, layout.dp))
    return CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups


def _transient_bytes(job: Job, layout: Layout, dense: float, expert: float, nlayers: int) -> float:
    """Buffers alive only part of the step: ZeRO-2/3 gradient buckets, ZeRO-3 gathered layers.

    FP8 (Transformer Engine caches the fp8 weight and its transpose across micro-batches,
    te/pytorch/module/linear.py `is_first_microbatch`): with `--fp8-param-gather` (Megatron's
    examples/llama/train_llama3_8b_h100_fp8.sh; needs the distributed optimizer) the fp8 weight
    (1 byte) and its transpose (1 byte) replace the bf16 weight (2 bytes): nothing extra;
    without it both sit beside the bf16 weight: 2 bytes per parameter."""
    total = 0.0
    if job.precision == "fp8" and not (job.fp8_param_gather and layout.zero_stage >= 1):
        total += 2.0 * (dense + expert)
    if layout.zero_stage >= 2:
        total += 4.0 * DP_BUCKET_PARAMS
    if layout.zero_stage == 3 and nlayers:
        per_layer = (dense + expert) / nlayers
        total += 2 * per_layer * 2.0 + per_layer * 4.0  # two gathered layers (prefetch) + grads
    return total


def stage_memory(job: Job, layout: Layout, rank: int, layers: range) -> StageMemory:
    arch = job.arch
    sh = _shard(job, layout)
    dense, expert = stage_params(job, layout, rank, layers)
    dense_group = layout.dp * layout.cp
    grad_bytes = 4.0 if job.main_grad_dtype == "fp32" else 2.0
    z = layout.zero_stage
    w_d, g_d, o_d = state_bytes_per_param(z, grad_bytes, dense_group)
    w_e, g_e, o_e = state_bytes_per_param(z, grad_bytes, max(layout.expert_dp, 1))

    m = layout.num_microbatches(job.global_batch_size)
    flight = in_flight(layout, rank, max(m, 1))
    moe = arch.moe_layers
    chunks = stage_chunks(len(layers), layout.vpp)
    per_mb = max(
        sum(act.layer_bytes(arch, moe[i], sh) for i in layers[sum(chunks[:c]) :][: chunks[c]])
        for c in range(len(chunks))
    )
    acts = flight * per_mb
    if rank == 0:
        acts += flight * act.embedding_bytes(arch, sh)
    if rank == layout.pp - 1:
        logits = act.logits_bytes(arch, arch.padded_vocab(layout.tp), sh)
        # each MTP layer runs one more decoder layer and one more output layer and loss
        mtp = arch.mtp_num_layers * (act.layer_bytes(arch, moe[-1], sh) + logits)
        acts += logits + mtp
    if layout.recompute == "full" and len(layers):
        # the layer being recomputed holds its full activations during its backward pass
        acts += max(act.layer_bytes(arch, moe[i], sh, recompute=False) for i in layers)
    if layout.cp > 1 and len(layers):
        # ring attention keeps the K/V chunk in flight from the neighbour (double-buffered)
        kv = 2 * 2 * sh.tokens * arch.query_groups * arch.head_dim * 2 / layout.tp
        acts += kv
    transient = _transient_bytes(job, layout, dense, expert, len(layers))
    acts_total = acts * FRAGMENTATION
    other = _fixed_bytes(job, layout) + transient * FRAGMENTATION
    return StageMemory(
        stage=rank,
        layers=len(layers),
        weights=dense * w_d + expert * w_e,
        grads=dense * g_d + expert * g_e,
        optimizer=dense * o_d + expert * o_e,
        activations=acts_total,
        other=other,
    )


def estimate(job: Job, layout: Layout, headroom_pct: float = DEFAULT_HEADROOM_PCT) -> MemoryReport:
    """Per-stage memory of a layout that passed `planner.rules`."""
    stages = tuple(
        stage_memory(job, layout, r, rng) for r, rng in enumerate(_layer_ranges(job, layout))
    )
    physical = job.cluster.capacity_bytes
    return MemoryReport(
        stages=stages,
        capacity=physical * (1 - headroom_pct / 100),
        physical=physical,
        headroom_pct=headroom_pct,
    )


def fmt_gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


__all__ = ["MIB", "MemoryReport", "StageMemory", "estimate", "fmt_gib"]
