"""Host (CPU) memory a GPU's training process pins for what the plan offloads, against that GPU's
share of its node's host memory: CPU offloading of whole layers (Megatron
--cpu-offloading-num-layers, `planner.model.cpu_offload`), fine-grained activation offloading
(--offload-modules, `planner.model.fine_offload`) and the CPU-offloaded optimizer
(--optimizer-cpu-offload, `planner.model.optimizer_offload`). Without any of them a plan pins
nothing planner counts (`HostMemory.total` 0) and the check always passes.

Per GPU, the busiest pipeline rank's:
- whole-layer offloading (pp 1): the activations of the first min(k, n - 1) layers of one
  micro-batch (Transformer Engine's schedule, `cpu_offload`, keeps the others on the GPU; pp 1
  runs one micro-batch at a time);
- fine-grained offloading: each in-flight micro-batch's offloaded groups (`offloaded_bytes` of
  each layer that moves them, `fine_offload.offloading_layers`: under full recompute only those
  it leaves whole; the first `Layout.activation_offload_fraction` of them), the in-flight count
  that of the GPU's activations (`in_flight.schedule_peak`): Megatron-LM d98e8a64
  fine_grained_activation_offload.py keeps the host copies in a pool of pinned tensors by shape
  (`OffloadTensorPool`), as many as were ever in flight;
- the offloaded optimizer: HOST_OPTIMIZER_BYTES per offloaded parameter of the GPU's
  distributed-optimizer shard.
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
the pool with the least headroom is reported (`HostMemory.pool`). Not counted: the staging
copies of checkpoint saves, the data loader's workers beyond the reserve, Megatron's paged-stash
host buffers (moe_paged_stash_buffer_size_factor_cpu)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from planner.inputs import units
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import fp32, pools
from planner.model.fine_offload import offloaded_bytes, offloading_layers
from planner.model.in_flight import schedule_peak
from planner.model.rank_states import state_bytes_per_param
from planner.model.schedule import schedule_name
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard
from planner.model.stage_params import stage_params
from planner.model.torch_schedules import microbatch_group

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
    """The CPU-offloaded optimizer's share (HOST_OPTIMIZER_BYTES per offloaded parameter)."""
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

    @property
    def total(self) -> float:
        return self.activations + self.optimizer

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
    if nbytes <= 1:
        return 1.0
    return 2.0 ** math.ceil(math.log2(nbytes)) / nbytes


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
    each = [offloaded_bytes(arch, kind, sh, mods, recompute=False) for kind in arch.kinds]
    f = layout.activation_offload_fraction
    m = max(layout.num_microbatches(job.global_batch_size), 1)
    name, group = schedule_name(job, layout), microbatch_group(job, layout)
    peak, seen = 0.0, set()
    for rank, chunks in enumerate(ranks):
        if only is not None and rank not in only:
            continue
        per_chunk = tuple(
            f * sum(n * b for n, b in zip(counts, each, strict=True))
            for counts in offloading_layers(arch, layout, sh, chunks)
        )
        if per_chunk in seen and job.framework == "megatron":
            continue  # Megatron's schedules: a lower rank holds as much, in no fewer micro-batches
        seen.add(per_chunk)
        peak = max(peak, schedule_peak(per_chunk, layout, rank, m, name, group))
    return peak * _roundup(job, sh)


def optimizer_bytes(job: Job, layout: Layout, only: Collection[int] | None = None) -> float:
    """Host bytes of the CPU-offloaded optimizer on the busiest GPU (of the pipeline ranks
    `only` where given): HOST_OPTIMIZER_BYTES per parameter of the offloaded fraction of its
    distributed-optimizer shard."""
    f = job.optimizer_offload_fraction
    if f <= 0 or job.frozen_model:
        return 0.0
    n, z = job.optimizer_instances, layout.zero_stage
    dense_share = state_bytes_per_param(z, 0.0, max(layout.dense_dp // n, 1), 1.0)[2]
    expert_share = state_bytes_per_param(z, 0.0, max(layout.expert_dp // n, 1), 1.0)[2]
    most = 0.0
    for rank, chunks in enumerate(layout.chunk_layers(job.arch.num_layers)):
        if only is not None and rank not in only:
            continue
        dense, expert = stage_params(job, layout, rank, chunks)
        most = max(most, dense * dense_share + expert * expert_share)
    return HOST_OPTIMIZER_BYTES * f * most


def activation_budget(job: Job, layout: Layout) -> float:
    """Host bytes a GPU may pin for offloaded activations under the layout's ZeRO stage: the
    capacity less the offloaded optimizer's share (negative where that alone is over); what the
    one-kind search (`planner.search.variants`) holds each memory saver's `activation_bytes` to.
    On pools, where stages' budgets differ, the least of them (a bound: `estimate` judges)."""
    return min(
        usable_bytes(share_bytes(j)[0]) - optimizer_bytes(j, lay, only)
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
        acts, opt = activation_bytes(j, lay, only), optimizer_bytes(j, lay, only)
        gpu = j.cluster.gpu.name if name else ""
        out.append(HostMemory(acts, opt, share, assumed, name, gpu, j.cluster.gpus_per_node))
    return out


def estimate(job: Job, layout: Layout) -> HostMemory:
    """The plan's host memory per GPU against its budget; on pools the pool with the least
    headroom (module docstring)."""
    return max(by_pool(job, layout), key=lambda h: h.shortfall)
