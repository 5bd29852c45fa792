"""Host (CPU) memory a GPU's training process pins for what the plan offloads, against that GPU's
share of its node's host memory: CPU offloading of whole layers (Megatron
--cpu-offloading-num-layers, `planner.model.cpu_offload`), fine-grained activation offloading
(--offload-modules, `planner.model.fine_offload`) and the CPU-offloaded optimizer
(--optimizer-cpu-offload, `planner.model.optimizer_offload`); and, offloading or not, the
pinned copies a checkpoint save stages its share in (`planner.model.host_checkpoint`: every
Megatron plan saves). A plan that neither offloads nor stages (torchtitan's) pins nothing planner
counts (`HostMemory.total` 0) and the check always passes.

Per GPU, the busiest pipeline rank's:
- whole-layer offloading (pp 1): the activations of the first min(k, n - 1) layers of one
  micro-batch (Transformer Engine's schedule, `cpu_offload`, keeps the others on the GPU; pp 1
  runs one micro-batch at a time);
- fine-grained offloading: each in-flight micro-batch's groups as the first step copies them
  (`offload_chunks.chunk_copies` at fraction 1: of the layers that move them, under full recompute
  only those it leaves whole, the MTP layers' after the last chunk's), the in-flight count that
  of the GPU's activations (`stage_activations.held_peak`). Megatron-LM d98e8a64
  fine_grained_activation_offload.py: the first step is the warm-up, in which every group is
  copied (should_bulk_offload :1211-1212; the fraction, the margin and the last rank's rule are
  set after it, post_warmup_callback :609-668), and its host copies stay pinned: the pool by
  shape keeps every tensor it made (`OffloadTensorPool` :241-244, reset :347-359), the MoE
  groups' blocks (:403-406) PyTorch's caching host allocator, which frees none;
- the offloaded optimizer: HOST_OPTIMIZER_BYTES per offloaded parameter of the GPU's
  distributed-optimizer shard, and the round-up of its two pinned fp32 blocks a parameter's
  piece (the master and the gradient buffer), piece by piece (`planner.model.host_pinned`);
- checkpoint staging: the GPU's share of the checkpoint, its offloaded optimizer state aside,
  each tensor a pinned block (`planner.model.host_checkpoint`).
Both activation paths take their host tensors from PyTorch's pinned-memory allocator
(`torch.empty(..., pin_memory=True)`), which rounds every block up to a power of two
(pytorch aten/src/ATen/core/CachingHostAllocator.h, `allocate`: "Round up the allocation to the
nearest power of two"); `pinned_roundup` charges that on a layer's hidden-state tensor, the
shape most offloaded tensors share.

Capacity: the GPU's share of its node's host memory (`ClusterSpec.host_gib_per_gpu`: the plan's
`host_memory_gib_per_node`, else the catalog's), else ASSUMED_GIB_PER_GPU, less
HOST_RESERVED_GIB_PER_GPU for what every rank's process holds besides. On heterogeneous pools
(`planner.model.pools`) each pool's stages are judged against that pool's nodes, as their GPU
memory is (`memory.estimate`): the busiest of its own ranks against its own share, every pool
running every stage where the data-parallel replicas span the pools (`pools.replica_views`);
the pool with the least headroom is reported (`HostMemory.pool`). Not counted: the data
loader's workers beyond the reserve, Megatron's paged-stash host buffers
(moe_paged_stash_buffer_size_factor_cpu), the offloaded optimizer's transient 16-bit blocks
(one a size class, cached and taken again: `host_pinned`), the pinned rounding of the norms,
biases and routers apart from the walk's ratio, Megatron-FSDP's and torchtitan's synchronous
checkpoint copies (pageable, one tensor at a time)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from planner.inputs import units
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import fp32, pools
from planner.model.host_checkpoint import rank_staging_bytes, stages
from planner.model.host_pinned import (
    MASTER_BYTES,
    PINNED_TENSORS,
    Rounding,
    pinned_block,
    rank_rounding,
)
from planner.model.job_memo import JobMemo
from planner.model.layer_kept import mtp_layers_kept
from planner.model.offload_chunks import chunk_copies
from planner.model.rank_states import state_bytes_per_param
from planner.model.schedule import Chunks
from planner.model.shard import Shard
from planner.model.stage_activations import held_peak, per_layer, shard
from planner.model.stage_params import stage_params

HOST_OPTIMIZER_BYTES = 16.0
"""Host memory per offloaded parameter (Megatron-LM d98e8a64 HybridDeviceOptimizer): its pinned fp32
copy, torch AdamW's two fp32 moments and the pinned fp32 buffer its gradient is copied into."""

HOST_RESERVED_GIB_PER_GPU = 32.0
"""Host memory a training rank's process holds besides what it offloads, GiB: Python and the
CUDA, NCCL and PyTorch libraries, the CUDA context's host side, the data loader's workers and the
dataset's index files. A planning assumption (no measurement of a rank's resident memory was
read): an eighth of a DGX H100 GPU's 256 GiB share, two-fifteenths of a GB200's 240."""

ASSUMED_GIB_PER_GPU = 128.0
"""A GPU's host-memory share where neither the plan nor the catalog gives its node's: the least
of the catalog's sourced shares (DGX A100 320GB, 1 TiB over 8 GPUs), so that an unknown host is
not assumed larger than a known one. `[cluster] host_memory_gib_per_node` sets the real one."""


@dataclass(frozen=True)
class HostMemory:
    """Host bytes one GPU's process pins for offloading (the busiest rank's), and its budget."""

    activations: float
    """Offloaded activations (whole layers or fine-grained groups), pinned round-up included."""
    optimizer: float
    """The CPU-offloaded optimizer's share (HOST_OPTIMIZER_BYTES per offloaded parameter), its
    pinned blocks' round-up included."""
    share: float
    """The GPU's share of its node's host memory, bytes."""
    assumed: bool
    """Whether `share` is ASSUMED_GIB_PER_GPU (neither the plan nor the catalog gives it)."""
    pool: str = ""
    """On pools, the pool whose stages have the least headroom (the figures above are its);
    "" on one kind of GPU."""
    gpu: str = ""
    """That pool's GPU ("" on one kind of GPU: the cluster's)."""
    per_node: int = 1
    """GPUs a node of that pool (of the cluster on one kind of GPU), whose shares one host holds."""
    checkpoint: float = 0.0
    """The pinned staging of checkpoint saves (`host_checkpoint.rank_staging_bytes`); it and
    `optimizer` are those of the rank whose sum of the two is the most (`rank_fixed_bytes`)."""

    @property
    def total(self) -> float:
        return self.activations + self.optimizer + self.checkpoint

    def parts(self) -> list[tuple[str, float]]:
        """The pinned parts that are not 0, named as explain and suggest print them."""
        named = (
            ("activations", self.activations),
            ("optimizer", self.optimizer),
            ("checkpoint staging", self.checkpoint),
        )
        return [(what, b) for what, b in named if b > 0]

    @property
    def capacity(self) -> float:
        return usable_bytes(self.share)

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    @property
    def shortfall(self) -> float:
        """Bytes over the capacity (<= 0 when it fits)."""
        return self.total - self.capacity


def usable_bytes(share: float) -> float:
    """Bytes the offloads may pin out of a GPU's `share`: less HOST_RESERVED_GIB_PER_GPU."""
    return max(share - units.from_gib(HOST_RESERVED_GIB_PER_GPU), 0.0)


def share_bytes(job: Job) -> tuple[float, bool]:
    """(a GPU's share of its node's host memory in bytes, whether it is ASSUMED_GIB_PER_GPU)."""
    gib = job.cluster.host_gib_per_gpu
    if gib is None:
        return units.from_gib(ASSUMED_GIB_PER_GPU), True
    return units.from_gib(gib), False


def pinned_roundup(nbytes: float) -> float:
    """What PyTorch's pinned allocator takes for a block of `nbytes`, over `nbytes`: the next
    power of two's share (1 for an exact power, just under 2 past one)."""
    return pinned_block(nbytes) / nbytes if nbytes > 1 else 1.0


def _roundup(job: Job, sh: Shard) -> float:
    """`pinned_roundup` of a layer's hidden-state tensor on one GPU (split over tp where sequence
    parallel splits it), in the activations' dtype (`fp32.word`: 2 bytes, 4 in fp32 training):
    the host copy takes the offloaded tensor's dtype (Megatron-LM d98e8a64
    fine_grained_activation_offload.py:926, `allocate(src_tensor.shape, dtype=src_tensor.dtype)`).
    A power-of-two factor leaves the ratio as it is (`pinned_roundup(2x) == pinned_roundup(x)`),
    so fp32's 4 bytes round up as bf16's 2 do; the bytes are the tensor's all the same."""
    nbytes = fp32.word(sh) * sh.tokens * job.arch.hidden_size
    return pinned_roundup(nbytes / sh.tp if sh.sequence_parallel else nbytes)


def activation_bytes(job: Job, layout: Layout, only: Collection[int] | None = None) -> float:
    """Host bytes of offloaded activations on the busiest GPU (module docstring), of the
    pipeline ranks `only` where given (one pool's)."""
    k, mods = layout.cpu_offloading_num_layers, frozenset(layout.offload_modules)
    if k <= 0 and not mods:
        return 0.0
    arch, sh = job.arch, shard(job, layout)
    ranks = layout.chunk_layers(arch.num_layers)
    if k > 0:  # pp 1 (rules.features): one rank, one chunk, one micro-batch at a time
        if only is not None and 0 not in only:
            return 0.0
        chunk = ranks[0][0]
        first = range(chunk.start, chunk.start + min(k, len(chunk) - 1))
        host = per_layer(arch, sh).total(arch.kind_counts((first,)))
        return host * _roundup(job, sh)
    peak, seen = 0.0, set()
    mtp = layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    tail = mtp_layers_kept(job, layout, sh, per_layer(arch, sh))[1] if mtp is not None else ()
    warm = layout.with_(activation_offload_fraction=1.0)  # the first step copies every group
    for rank, chunks in enumerate(ranks):
        if only is not None and rank not in only:
            continue
        per_chunk = chunk_copies(arch, warm, sh, chunks, False, tail if rank == mtp else ())
        if per_chunk in seen and job.framework == "megatron":
            continue  # Megatron's schedules: a lower rank holds as much, in no fewer micro-batches
        seen.add(per_chunk)
        peak = max(peak, held_peak(job, layout, rank, per_chunk))
    return peak * _roundup(job, sh)


def optimizer_bytes(job: Job, layout: Layout, only: Collection[int] | None = None) -> float:
    """Host bytes of the CPU-offloaded optimizer on the busiest GPU (of the pipeline ranks
    `only` where given): `rank_optimizer_bytes`' most."""
    if not offloads_optimizer(job):
        return 0.0
    return max(
        (rank_optimizer_bytes(job, layout, r, c) for r, c in _ranks(job, layout, only)),
        default=0.0,
    )


def rank_optimizer_bytes(
    job: Job, layout: Layout, rank: int, chunks: Chunks, rounding: Rounding = "exact"
) -> float:
    """Host bytes of the CPU-offloaded optimizer on a GPU of pipeline rank `rank` (its decoder
    layers `chunks`): HOST_OPTIMIZER_BYTES per parameter of the offloaded fraction of its
    distributed-optimizer shard, and the round-up of its pinned master and gradient blocks
    (`host_pinned.rank_rounding` of the shard's pieces; of whole parameters at ZeRO 0;
    `rounding`: exact, or a floor or a ceiling of it, `host_pinned.Rounding`)."""
    f = job.optimizer_offload_fraction
    if not offloads_optimizer(job):
        return 0.0
    n, z = job.optimizer_instances, layout.zero_stage
    dense_share = state_bytes_per_param(z, 0.0, max(layout.dense_dp // n, 1), 1.0)[2]
    expert_share = state_bytes_per_param(z, 0.0, max(layout.expert_dp // n, 1), 1.0)[2]
    dense, expert = stage_params(job, layout, rank, chunks)
    ratios = (1.0, 1.0)
    if rounding != "floor":
        up = rounding == "ceiling"
        ratios = rank_rounding(job, layout, rank, chunks, whole=z == 0, ceiling=up)
    per = [HOST_OPTIMIZER_BYTES + PINNED_TENSORS * MASTER_BYTES * (r - 1) for r in ratios]
    return f * (dense * dense_share * per[0] + expert * expert_share * per[1])


def rank_fixed_bytes(
    job: Job, layout: Layout, rank: int, chunks: Chunks, rounding: Rounding = "exact"
) -> tuple[float, float]:
    """(offloaded optimizer, checkpoint staging) host bytes a GPU of pipeline rank `rank` (its
    decoder layers `chunks`) pins whatever it offloads of its activations; `rounding` "floor"
    or "ceiling": bounds of them without the walk of the pinned pieces (`host_pinned.Rounding`)."""
    opt = rank_optimizer_bytes(job, layout, rank, chunks, rounding)
    return opt, rank_staging_bytes(job, layout, rank, chunks, rounding)


def _busiest_fixed(
    job: Job, layout: Layout, only: Collection[int] | None = None, rounding: Rounding = "exact"
) -> tuple[float, float]:
    """`rank_fixed_bytes` of the rank (of `only` where given) whose sum is the most (the first
    such), asked once per role: all it reads of a rank beside the job and layout is whether it
    is the first (the embedding, rank 0's buckets: `stage_params.edge_params`,
    `host_pinned.bucket_size`), the last stage's (`host_pinned._holds_output`) and the MTP rank,
    and each chunk's layers' kinds (`stage_params.decoder_params` and the bounds' `chunk_totals`
    count them; the exact walk, `host_pinned.chunk_sizes`, takes their sizes in order, which
    read a kind and the degrees alone), so a later rank of a role never replaces an earlier
    (DeepSeek-V3 on 2,048 H800: 941 roles of the 2,516 ranks its search asks;
    tests/model/test_host_fixed_roles.py)."""
    if not (offloads_optimizer(job) or stages(job, layout.zero_stage)):
        return 0.0, 0.0
    arch, seen, most = job.arch, set(), None
    mtp = layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    exact = rounding == "exact"
    for r, c in _ranks(job, layout, only):
        # the kinds' order matters to the exact walk alone (the bounds count each chunk's kinds)
        kinds = [arch.layer_kinds[x.start : x.stop] if exact else arch.kind_counts((x,)) for x in c]
        role = (r == 0, r == layout.output_rank, r == mtp, *kinds)
        if role not in seen:
            seen.add(role)
            part = rank_fixed_bytes(job, layout, r, c, rounding)
            most = part if most is None or sum(part) > sum(most) else most
    return most or (0.0, 0.0)


def offloads_optimizer(job: Job) -> bool:
    """Whether the job offloads its optimizer (a fraction > 0 of a model that trains)."""
    return job.optimizer_offload_fraction > 0 and not job.frozen_model


def _ranks(job: Job, layout: Layout, only: Collection[int] | None) -> list[tuple[int, Chunks]]:
    """(rank, its chunks) of the layout's pipeline ranks, of `only` where given."""
    ranks = enumerate(layout.chunk_layers(job.arch.num_layers))
    return [(r, c) for r, c in ranks if only is None or r in only]


def fixed_bytes(
    job: Job, layout: Layout, only: Collection[int] | None = None, rounding: Rounding = "exact"
) -> float:
    """Host bytes the busiest GPU (of the pipeline ranks `only` where given) pins whatever it
    offloads of its activations: the offloaded optimizer and the checkpoint staging of the
    rank whose sum is the most (`rank_fixed_bytes`; `rounding` "ceiling": no less, "floor":
    no more, without the walk of the pinned pieces)."""
    return sum(_busiest_fixed(job, layout, only, rounding))


def activation_budget(job: Job, layout: Layout, rounding: Rounding = "exact") -> float:
    """Host bytes a GPU may pin for offloaded activations under the layout's ZeRO stage: the
    capacity less the offloaded optimizer's share and the checkpoint staging (negative where
    they alone are over); what the
    one-kind search (`planner.search.variants`) holds each memory saver's `activation_bytes` to.
    On pools, where stages' budgets differ, the least of them (a bound: `estimate` judges).
    `rounding` "ceiling" gives no more than the exact budget, "floor" no less (cheap bounds).
    On one GPU kind remembered per job under `budget_key`, what it reads of the layout: the
    search asks it of every micro-batch size, token dispatcher and overlap of a structure."""
    if job.pools:
        return _activation_budget(job, layout, rounding)
    memo = _BUDGETS.of(job)
    key = (rounding, *budget_key(layout))
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _activation_budget(job, layout, rounding)
    return hit


def budget_key(layout: Layout) -> tuple[object, ...]:
    """What `activation_budget` reads of a layout on one GPU kind: the ZeRO stage (what is
    offloaded and staged, `host_checkpoint.split_bytes`); the degrees (tp, ep and expert-TP
    split the parameters, `stage_params` and `host_pinned.chunk_sizes`; dp x cp and the expert
    data-parallel size tp x pp x cp x dp / (ep x expert-TP) shard them); the split (each rank's
    chunks, the output and MTP ranks, `Layout.split_key`); and the DDP buckets
    (`host_pinned.bucket_size`). Not the micro-batch size, the token dispatcher, the TP and EP
    overlaps or the memory savers (tests/model/test_host_budget_memo.py)."""
    lay = layout
    degrees = (lay.tp, lay.cp, lay.dp, lay.pp, lay.ep, lay.expert_tp)
    buckets = (lay.overlap_grad_reduce, lay.ddp_bucket_size, lay.ddp_num_buckets)
    return (lay.zero_stage, degrees, lay.split_key(), buckets)


_BUDGETS: JobMemo[tuple[object, ...], float] = JobMemo()
"""`activation_budget` per one-kind job, rounding and `budget_key`."""


def _activation_budget(job: Job, layout: Layout, rounding: Rounding) -> float:
    return min(
        usable_bytes(share_bytes(j)[0]) - fixed_bytes(j, lay, only, rounding)
        for j, lay, only, _ in _stage_groups(job, layout)
    )


_Group = tuple[Job, Layout, frozenset[int] | None, str]


def _stage_groups(job: Job, layout: Layout) -> list[_Group]:
    """(job, layout, its pipeline ranks or None for all, pool name) of each group of stages that
    shares one host: on one kind of GPU the whole pipeline; on pools each pool's ranks with the
    pool's job (`pools.rank_pools`), or every stage on each pool's replicas (`replica_views`,
    equal pools once)."""
    if not job.pools:
        return [(job, layout, None, "")]
    views = pools.replica_views(job, layout)
    if views:
        out: list[_Group] = []
        seen: set[int] = set()
        for (j, lay), pool in zip(views, job.pools, strict=True):
            if id(j) not in seen:
                seen.add(id(j))
                out.append((j, lay, None, pool.name))
        return out
    owners = pools.rank_pools(job, layout)
    return [
        (
            pools.pool_job(job, k),
            layout,
            frozenset(r for r, o in enumerate(owners) if o == k),
            p.name,
        )
        for k, p in enumerate(job.pools)
    ]


def by_pool(job: Job, layout: Layout) -> list[HostMemory]:
    """The plan's host memory per GPU against its budget for each group of stages that shares
    one kind of host (`_stage_groups`): one entry on one kind of GPU, one a pool on pools."""
    out = []
    for j, lay, only, name in _stage_groups(job, layout):
        share, assumed = share_bytes(j)
        acts, (opt, ckpt) = activation_bytes(j, lay, only), _busiest_fixed(j, lay, only)
        gpu = j.cluster.gpu.name if name else ""
        out.append(HostMemory(acts, opt, share, assumed, name, gpu, j.cluster.gpus_per_node, ckpt))
    return out


def fits_below_ceiling(job: Job, layout: Layout) -> bool:
    """Whether every host holds the plan with each pinned block of the optimizer and the staging
    taken at its ceiling (`host_pinned.rounding_ceiling`, no less than the walk of the pieces):
    where so, `estimate(...).fits` (a sufficient test, without the walk)."""
    return all(
        activation_bytes(j, lay, only) + fixed_bytes(j, lay, only, "ceiling")
        <= usable_bytes(share_bytes(j)[0])
        for j, lay, only, _ in _stage_groups(job, layout)
    )


def estimate(job: Job, layout: Layout) -> HostMemory:
    """The plan's host memory per GPU against its budget; on pools the pool with the least
    headroom (module docstring)."""
    return max(by_pool(job, layout), key=lambda h: h.shortfall)
