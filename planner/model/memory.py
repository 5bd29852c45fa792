"""Peak memory per GPU, per pipeline stage: weights, gradients, optimizer states, activations and
buffers. The worst stage decides whether a layout fits.

Model states (Rajbhandari et al. 2020, "ZeRO", arXiv:1910.02054, and Megatron's distributed
optimizer, docs/user-guide/features/dist_optimizer.md), bytes per parameter held by a GPU:

    weights     2 (bf16; FP8 / NVFP4 weights: buffers.quantised_weight_bytes)  / N_d at ZeRO 3
    gradients   4 (fp32 main_grad) or 2 (bf16)                                   / N_d at ZeRO >= 2
    optimizer   12 (fp32 master, Adam m and v)                                   / N_d at ZeRO >= 1

so zero_stage 1 with fp32 grads is Megatron's 6 + 12/d, with bf16 grads the ZeRO paper's
4 + 12/N_d. N_d is the data-parallel group the optimizer is sharded over: dp x cp for dense
parameters and the expert-data-parallel size world / (etp x ep x pp) for expert parameters, each
divided by Megatron's --num-distributed-optimizer-instances (`Job.optimizer_instances`: instance i
is the i-th slice of dp x cp / N ranks of every data-parallel group and of every expert one,
Megatron-LM d98e8a64 megatron/core/parallel_state.py, intra_partial_data_parallel_size and
intra_partial_expert_data_parallel_size); under Megatron-FSDP with --outer-dp-sharding-strategy
optim (HFSDP, `Job.outer_dp_sharding_strategy`) the optimizer states shard over all N_d x N
(megatron_fsdp fully_shard.py: outer sharding of the optimizer state on top of FSDP).

Activations: `planner.model.activations` per layer and micro-batch; what a pipeline rank holds at
its peak (the micro-batches in flight in Megatron's schedule, chunk by chunk, and the working set
on top): `planner.model.stage_activations`.

The optimizer step: after the last backward, when the activations are freed, Megatron's optimizer
copies each 16-bit gradient it updates into fp32, Muon orthogonalises one matrix at a time and the
precision-aware optimizer unscales its 16-bit states into fp32 (`rank_states.step_bytes`); a
stage's peak is the larger of the two (`StageMemory.total`).

Megatron-FSDP's unit buffers: what they add to the activations' peak at the moment the two
peak together (`planner.model.fsdp_coupling`). Buffers, fixed costs and what the allocator
counts: `planner.model.buffers`. Allocator
fragmentation (FRAGMENTATION) is on activations and transient buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields, replace
from operator import itemgetter

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    buffers,
    fsdp2,
    fsdp_coupling,
    graph_pool,
    pools,
    stage_activations,
    titan_accumulation,
    titan_validation,
)
from planner.model.bf16_layers import bf16_ranges
from planner.model.job_memo import JobMemo, ModelMemo
from planner.model.memory_report import MemoryReport, StageMemory, new_stage
from planner.model.rank_states import fsdp_profile, fsdp_step, rank_state, step_bytes
from planner.model.schedule import Chunks, layer_count
from planner.model.shard import Shard
from planner.model.stage_activations import PerLayer, per_layer, shard

CUDA_CONTEXT_BYTES = buffers.CUDA_CONTEXT_BYTES
NCCL_BYTES_PER_GROUP = buffers.NCCL_BYTES_PER_GROUP

FRAGMENTATION = 1.10
"""PyTorch caching-allocator overhead on activation and transient memory: reserved / allocated,
typically 1.05-1.15 in long training runs (Megatron's own estimator multiplies by 1.05)."""

FRAGMENTATION_EXPANDABLE = 1.02
"""The same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (`Job.expandable_segments`):
the allocator grows one segment per stream by mapping 2 MiB pages into a reserved range, so
blocks freed between the forward and backward coalesce instead of stranding space; what remains
is page rounding and the small-block pool. An allowance, not a fit: no public measurement of
reserved / allocated under expandable segments was found. The Megatron-Bridge recipes (which set
it, and ran) bound it from above: at 1.03 two more of them (Llama 3.1 405B on 256 GB200 in
MXFP8, GPT-OSS 120B on 64 B200) are judged out of memory (benchmarks/recipes.py), so 1.02 is
the largest round value they allow; the gate's 3% default headroom sits on top."""


def fragmentation(job: Job) -> float:
    """The caching allocator's reserved / allocated on activations and transient buffers."""
    return FRAGMENTATION_EXPANDABLE if job.expandable_segments else FRAGMENTATION


ACTIVATION_SCALE = 1.0
"""Multiplies the activations and transient buffers the model estimates (weights, gradients and
optimizer states are counted exactly and are not scaled). 1.0 is the model as derived; a
calibration profile fitted to a cluster's own logs (`planner calibrate`) may refit it to what
that cluster's training code allocates."""


DEFAULT_HEADROOM_PCT = 3.0
"""Capacity kept free by default: the allocator's reserve and run-to-run variation."""


def stage_memory(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    sh: Shard | None = None,
    per: PerLayer | None = None,
    fixed: tuple[float, float] | None = None,
    shards: Callable[[], tuple[Shard, PerLayer]] | None = None,
) -> StageMemory:
    """Bytes on one GPU of pipeline rank `rank`, whose decoder layers are `chunks` (one range per
    virtual chunk, `Layout.chunk_layers`). `sh`, `per` (`shard` and `per_layer` of the layout)
    and `fixed` (`buffers.fixed_bytes`, the same on every rank) where the caller has them
    already; `shards`, where it makes `sh` and `per` once for every rank when first asked."""
    weights, grads, optimizer, cache, transient = rank_state(job, layout, rank, chunks)
    acts = _activations(job, layout, rank, chunks, (sh, per), shards) * ACTIVATION_SCALE
    copy = step_bytes(job, layout, rank, chunks)  # exact bytes: not scaled
    if copy:  # per-layer CUDA graphs' pool stays reserved beside the step's copies
        copy += graph_pool.step_pool_bytes(job, layout, rank, chunks, acts, ACTIVATION_SCALE)
    # Megatron-FSDP's unit buffers: in the backward what they add to the activations' peak at
    # the moment they peak together (`fsdp_coupling`), at the step those alive then (`fsdp_step`;
    # torchtitan's FSDP2 buffers, `fsdp2.states`, have no profile: counted whole)
    added = at_step = transient
    profile = fsdp_profile(job, layout, rank, chunks) if transient else ()
    if profile:
        added = fsdp_coupling.coupled(profile, _freed(job, layout, rank, chunks, (sh, per), shards))
    if profile or layout.use_torch_fsdp2:  # Megatron's torch FSDP2: none (fsdp_step)
        at_step = fsdp_step(job, layout, rank, chunks)
    if copy:  # what the step holds beyond `other`: less where the transient outgrows it (the
        # peak is the same either way, the activations being at least 0)
        copy = max(copy + (at_step - added) * ACTIVATION_SCALE, 0.0)
    transient = added * ACTIVATION_SCALE
    counted, outside = fixed or buffers.fixed_bytes(job, layout)
    counted += fsdp2.pipeline_buffers(job, layout, rank)  # torch pipelining's (torchtitan)
    counted += buffers.dataloader_mask_bytes(job, layout, rank)  # Megatron-LM's default
    frag = fragmentation(job)
    last = rank == layout.output_rank  # the loss's rank
    val = titan_validation.validation_bytes(job, layout, last) * ACTIVATION_SCALE
    return new_stage(
        stage=rank,
        layers=layer_count(chunks),
        weights=weights,
        grads=grads,
        optimizer=optimizer,
        activations=acts * frag,
        other=cache + transient * frag + counted + outside,
        unallocated=outside + (max(acts, copy, val) + transient) * (frag - 1),
        grad_copy=copy * frag,
        validation=val * frag,
    )


_ACTIVATIONS: JobMemo[tuple[object, ...], float] = JobMemo()
"""`stage_activations` per job, layout (`_ACTIVATIONS_VALUES`) and rank: the search estimates the
memory of each ZeRO stage, and of each rung with and without the TP overlap, on the same
activations. Cleared with its parts (`stage_activations.ACTIVATION_PARTS`)."""
_ACTIVATIONS.clears(stage_activations.ACTIVATION_PARTS)

_ACTIVATIONS_READ = tuple(
    f.name for f in fields(Layout) if f.name not in ("zero_stage", "tp_comm_overlap")
)
"""The layout fields the activations read: neither `shard` (with `per_layer`) nor
`stage_activations` reads the ZeRO stage or the TP overlap (the states and the userbuffers are
`rank_states.rank_state`'s and `buffers.fixed_bytes`')."""

_ACTIVATIONS_VALUES = itemgetter(*_ACTIVATIONS_READ)
"""A layout's `__dict__` to its `_ACTIVATIONS_READ` values, as a tuple (one C call): with the
rank, `_ACTIVATIONS`' key. Two layouts have equal keys exactly when they differ at most in the
fields not read; a flat tuple of plain values (no layout object: the memo holds thousands, which
the garbage collector then need not walk)."""


def _activations(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    known: tuple[Shard | None, PerLayer | None],
    shards: Callable[[], tuple[Shard, PerLayer]] | None,
) -> float:
    """`stage_activations` of rank `rank` (`chunks`), with 16-bit linear inputs where its chunks
    hold the job's bf16 layers, remembered (`_ACTIVATIONS`: the rank's chunks are the layout's
    split's, in the key; its parts `stage_activations.remembered_parts`). `known`: the layout's
    `shard` and `per_layer` where the caller has them, else `shards` makes them (once for the
    caller's ranks), else they are made here."""
    memo = _ACTIVATIONS.of(job)
    key = (*_ACTIVATIONS_VALUES(layout.__dict__), rank)
    acts = memo.get(key)
    if acts is None:
        sh, per, quantised = _layer_bytes(job, layout, chunks, known, shards)
        parts = stage_activations.remembered_parts(job, layout, rank, chunks, sh, per, quantised)
        acts = memo[key] = stage_activations.peak_bytes(job, layout, rank, sh, per, parts)
    return acts


def _layer_bytes(
    job: Job,
    layout: Layout,
    chunks: Chunks,
    known: tuple[Shard | None, PerLayer | None],
    shards: Callable[[], tuple[Shard, PerLayer]] | None,
) -> tuple[Shard, PerLayer, PerLayer | None]:
    """The layout's `shard` and `per_layer` (`known` where the caller has them, else from
    `shards`, else made here), and where the rank's `chunks` hold bf16 layers among quantised
    ones, those of the unquantised layers with the quantised ones' third (else None)."""
    sh, per = known
    if sh is None and shards is not None:
        sh, per = shards()
    sh = sh or shard(job, layout)
    per = per or per_layer(job.arch, sh)
    quantised = None
    if sh.quantised and bf16_ranges(job, chunks):  # unquantised inputs (bf16_layers)
        quantised, sh = per, replace(sh, linear_bytes=sh.value_bytes)
        per = per_layer(job.arch, sh)
    return sh, per, quantised


_FREED: JobMemo[tuple[object, ...], tuple[fsdp_coupling.Freed, ...]] = JobMemo()
"""`_freed` per job and `_ACTIVATIONS`' key (what it reads, the layer bytes and the split, is
among what the activations read)."""
_ACTIVATIONS.clears(_FREED)


def _freed(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    known: tuple[Shard | None, PerLayer | None],
    shards: Callable[[], tuple[Shard, PerLayer]] | None,
) -> tuple[fsdp_coupling.Freed, ...]:
    """Each chunk's activations freed by count of its layers holding
    (`fsdp_coupling.chunk_freed`), remembered (`_FREED`)."""
    memo = _FREED.of(job)
    key = (*_ACTIVATIONS_VALUES(layout.__dict__), rank)
    hit = memo.get(key)
    if hit is None:
        sh, per, quantised = _layer_bytes(job, layout, chunks, known, shards)
        index = {kind: j for j, kind in enumerate(job.arch.kinds)}
        kinds = [index[k] for k in job.arch.layer_kinds]
        blended = quantised is not None
        hit = memo[key] = fsdp_coupling.chunk_freed(kinds, layout, chunks, sh, per, blended)
    return hit


_PEAK_RANKS: ModelMemo[tuple[object, ...], tuple[int, ...]] = ModelMemo()


def _peak_candidates(job: Job, layout: Layout, ranks: tuple[Chunks, ...]) -> tuple[int, ...]:
    """The ranks that can hold the peak: among ranks with the same layers (each chunk's count of
    each kind of layer) and the same role (first, holding the last stage, the MTP layers or bf16
    layers, or none), the lowest rank has the most micro-batches in flight and everything else
    equal. Under the V placement (`Layout.v_stages`) every rank: what a rank holds there is its
    order walked with each pending W's stash (`in_flight`, `v_schedule.held_peak`), and no rule
    picks the rank: DualPipeV's step 6 turns whole backwards into Is at the rank's middle,
    (r + 1) // 2, and its step 7 frees the oldest stash (chunk 1's or chunk 0's by the parity)
    as it adds a chunk-0 one, so that a middle rank can hold more than both ends of any run of
    ranks alike (tests/model/test_v_pending.py). `ranks` is
    `layout.chunk_layers(job.arch.num_layers)`: with the MTP rank a function of the model and
    the split alone, remembered per both."""
    make = lambda: _peak_ranks_of(job, layout, ranks)  # noqa: E731
    key = (layout.split_key(), job.quantised, job.bf16_layers_at_start, job.bf16_layers_at_end)
    return _PEAK_RANKS.get(job.arch, key, make)


def _peak_ranks_of(job: Job, layout: Layout, ranks: tuple[Chunks, ...]) -> tuple[int, ...]:
    if layout.v_stages:
        return tuple(range(len(ranks)))
    arch = job.arch
    mtp = layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    seen: dict[tuple[object, ...], int] = {}
    for r, chunks in enumerate(ranks):
        shape = tuple(arch.kind_counts((c,)) for c in chunks)
        bf16 = bool(bf16_ranges(job, chunks))  # its activations counted at 16 bits
        role: tuple[object, ...] = (shape, r == 0, r == layout.output_rank, r == mtp, bf16)
        seen.setdefault(role, r)
    return tuple(sorted(seen.values()))


def state_floor(job: Job, layout: Layout, above: float = math.inf) -> float:
    """The most a stage that can hold the peak (`_peak_candidates`) keeps besides activations:
    a lower bound on `estimate(...).peak` that holds for every micro-batch size and recompute
    policy of the layout, with its TP overlap or without (the search rejects a ZeRO stage on it
    before trying any of them; the overlap's userbuffers and workspaces are left out). Once
    the most so far exceeds `above` it is returned, the other stages not asked: more than
    `above`, as the whole maximum is (the search asks whether it is over the capacity)."""
    ranks = layout.chunk_layers(job.arch.num_layers)
    lean = layout.with_(tp_comm_overlap=False)
    fixed = buffers.workspace_bytes(job, lean) + buffers.context_bytes(lean)
    most = None
    for r in _peak_candidates(job, layout, ranks):
        one = sum(rank_state(job, layout, r, ranks[r])) + fixed
        most = one if most is None else max(most, one)
        if most > above:
            break
    return 0.0 if most is None else most


def usable_bytes(physical: float, headroom_pct: float) -> float:
    """The memory a layout may use: the GPU's capacity less the headroom."""
    return physical * (1 - headroom_pct / 100)


def estimate(
    job: Job,
    layout: Layout,
    headroom_pct: float = DEFAULT_HEADROOM_PCT,
    all_stages: bool = True,
    known: StageMemory | None = None,
    fixed: tuple[float, float] | None = None,
) -> MemoryReport:
    """Per-stage memory of a layout that passed `planner.search.rules`. With all_stages=False
    only the stages that can hold the peak are computed (the search's fast path; the peak is the
    same). `known`: one rank's `stage_memory` of the layout, `fixed` its `buffers.fixed_bytes`
    (on one GPU kind), where the caller has them."""
    job = titan_accumulation.sub_job(job)  # torchtitan: one of its k pipeline schedules
    if job.pools:
        return _pooled(job, layout, headroom_pct)
    return _one_kind(job, layout, headroom_pct, all_stages, known, fixed)


def _one_kind(
    job: Job,
    layout: Layout,
    headroom_pct: float,
    all_stages: bool,
    known: StageMemory | None,
    fixed: tuple[float, float] | None = None,
) -> MemoryReport:
    chunks = layout.chunk_layers(job.arch.num_layers)
    ranks = range(len(chunks)) if all_stages else _peak_candidates(job, layout, chunks)
    fixed = fixed or buffers.fixed_bytes(job, layout)  # rank-independent: once for every stage
    made: list[tuple[Shard, PerLayer]] = []

    def shards() -> tuple[Shard, PerLayer]:  # once, where some rank's activations are not known
        if not made:
            sh = shard(job, layout)
            made.append((sh, per_layer(job.arch, sh)))
        return made[0]

    rest = (None, None, fixed, shards)  # `known` where it is that rank's
    stages = tuple(
        known if known and known.stage == r else stage_memory(job, layout, r, chunks[r], *rest)
        for r in ranks
    )
    physical = job.cluster.capacity_bytes
    return MemoryReport(
        stages=stages,
        capacity=usable_bytes(physical, headroom_pct),
        physical=physical,
        headroom_pct=headroom_pct,
    )


def _pooled(job: Job, layout: Layout, headroom_pct: float) -> MemoryReport:
    """Every stage on its own pool's GPU (`planner.model.pools`), checked against that GPU; with
    the data-parallel replicas across the pools, every stage on every pool's GPU (each pool's
    replicas as their own job), the pool where it is furthest over (or nearest) reported."""
    views = pools.replica_views(job, layout)
    out = _replica_stages(job, views, headroom_pct) if views else []
    jobs = () if views else pools.rank_jobs(job, layout)
    owners = pools.rank_pools(job, layout) if jobs else ()
    chunks = layout.chunk_layers(job.arch.num_layers)
    for r, (j, k) in enumerate(zip(jobs, owners, strict=True)):
        st = stage_memory(j, layout, r, chunks[r])
        room = usable_bytes(j.cluster.capacity_bytes, headroom_pct)
        out.append(replace(st, pool=job.pools[k].name, gpu=j.cluster.gpu.name, capacity=room))
    worst = max(out, key=lambda st: st.total - st.capacity)
    return MemoryReport(
        stages=tuple(out),
        capacity=worst.capacity,
        physical=worst.capacity / (1 - headroom_pct / 100),
        headroom_pct=headroom_pct,
    )


def _replica_stages(
    job: Job, views: tuple[tuple[Job, Layout], ...], headroom_pct: float
) -> list[StageMemory]:
    """Each stage on the pool where it is furthest over its GPU (or nearest): every pool runs
    every stage (the data-parallel replicas across pools; equal pools computed once)."""
    out: list[StageMemory] = []
    seen: set[int] = set()
    for (j, lay), pool in zip(views, job.pools, strict=True):
        if id(j) in seen:
            continue
        seen.add(id(j))
        room = usable_bytes(j.cluster.capacity_bytes, headroom_pct)
        own = [
            replace(st, pool=pool.name, gpu=j.cluster.gpu.name, capacity=room)
            for st in _one_kind(j, lay, headroom_pct, True, None).stages
        ]
        if out:
            own = [
                max(a, b, key=lambda st: st.total - st.capacity)
                for a, b in zip(out, own, strict=True)
            ]
        out = own
    return out
