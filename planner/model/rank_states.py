"""What a GPU of one pipeline rank keeps besides activations and fixed buffers: its weights,
gradient buffers and optimizer states under the layout's ZeRO stage (Megatron's distributed
optimizer, Megatron-FSDP, or torchtitan's FSDP2, `planner.model.fsdp2`; Megatron-LM's torch FSDP2
at ZeRO 3 with `planner.model.torch_fsdp2`'s transient buffers), its FP8 weight caches
and its transient buffers; the same at every micro-batch size, recompute policy, offloading,
dispatcher and TP overlap, so remembered per job and rank (`rank_state`).
`planner.model.memory` adds the activations and the fixed costs."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    adam_step,
    buffers,
    fsdp2,
    megatron_fsdp,
    muon_layout,
    muon_step,
    optimizer_offload,
    torch_fsdp2,
)
from planner.model.fp32 import adam_bytes, weight_bytes
from planner.model.job_memo import JobMemo
from planner.model.optimizer_states import muon_optimizer_bytes
from planner.model.schedule import Chunks, layer_count
from planner.model.stage_params import (
    decoder_params,
    quantised_params,
    stage_params,
)


def state_bytes_per_param(
    zero_stage: int,
    grad_bytes: float,
    shard_group: int,
    optimizer_bytes: float = 12.0,
    weight_bytes: float = 2.0,
) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per parameter: weight_bytes (2 in bf16, 4 in fp32),
    grad_bytes of
    gradient (4 fp32 main_grad, 2 bf16) and optimizer_bytes of fp32 master + Adam m, v (12; 8
    with bf16 moments); ZeRO stage z shards the optimizer (z >= 1), the gradients (z >= 2) and
    the weights (z = 3) over shard_group ranks."""
    weights = weight_bytes / shard_group if zero_stage >= 3 else weight_bytes
    grads = grad_bytes / shard_group if zero_stage >= 2 else grad_bytes
    optim = optimizer_bytes / shard_group if zero_stage >= 1 else optimizer_bytes
    return weights, grads, optim


_State = tuple[float, float, float, float, float]

_STATES: JobMemo[tuple[object, ...], _State] = JobMemo()
"""`rank_state` per job and per (degrees, split, ZeRO stage, rank): the search estimates the memory
of dozens of memory savers on each layout, all with the same states."""


def rank_state(job: Job, layout: Layout, rank: int, chunks: Chunks) -> _State:
    """(weights, grads, optimizer, FP8 weight caches and Megatron-FSDP's parameters kept
    gathered, transient buffers) bytes on one GPU of pipeline rank `rank`: all but the
    activations and fixed costs, so the same at every micro-batch size, recompute policy,
    offloading, dispatcher and TP overlap."""
    memo, key = _STATES.of(job), _key(job, layout, rank)
    if key not in memo:
        memo[key] = _state_of(job, layout, rank, chunks)
    return memo[key]


_PROFILES: JobMemo[tuple[object, ...], tuple[megatron_fsdp.Profile, float]] = JobMemo()
"""`profile_and_resident` per job and `rank_state`'s key."""


def profile_and_resident(
    job: Job, layout: Layout, rank: int, chunks: Chunks
) -> tuple[megatron_fsdp.Profile, float]:
    """Megatron-FSDP's unit buffers at each moment of a micro-batch's step on one GPU of pipeline
    rank `rank`, and its parameters kept gathered all step (`megatron_fsdp.profile_and_resident`;
    ((), 0) below ZeRO 2 and under torchtitan's or Megatron-LM's torch FSDP2), remembered:
    `rank_state`'s transient is the largest moment; `memory.stage_memory` couples the moments
    with the activations held then (`fsdp_coupling`)."""
    memo, key = _PROFILES.of(job), _key(job, layout, rank)
    if key not in memo:
        fsdp = _megatron_fsdp(job, layout)
        empty: tuple[megatron_fsdp.Profile, float] = ((), 0.0)
        memo[key] = megatron_fsdp.profile_and_resident(job, layout, rank, chunks) if fsdp else empty
    return memo[key]


def fsdp_profile(job: Job, layout: Layout, rank: int, chunks: Chunks) -> megatron_fsdp.Profile:
    """`profile_and_resident`'s moments."""
    return profile_and_resident(job, layout, rank, chunks)[0]


_AT_STEP: JobMemo[tuple[object, ...], float] = JobMemo()
"""`fsdp_step` per job and `rank_state`'s key."""


def fsdp_step(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """Megatron-FSDP's unit buffers alive at the optimizer step on one GPU of pipeline rank
    `rank` (`megatron_fsdp.step_bytes`; 0 below ZeRO 2 and under torchtitan; 0 under
    Megatron-LM's torch FSDP2, whose units are all resharded and reduced by then:
    `planner.model.torch_fsdp2`)."""
    memo, key = _AT_STEP.of(job), _key(job, layout, rank)
    if key not in memo:
        fsdp = _megatron_fsdp(job, layout)
        memo[key] = megatron_fsdp.step_bytes(job, layout, rank, chunks) if fsdp else 0.0
    return memo[key]


def _megatron_fsdp(job: Job, layout: Layout) -> bool:
    """Whether the layout's buffers are Megatron-FSDP's (ZeRO 2, 3 on Megatron-LM, not torch
    FSDP2)."""
    fsdp = job.framework != "torchtitan" and layout.zero_stage >= 2
    return fsdp and not torch_fsdp2.applies(job, layout)


def _key(job: Job, layout: Layout, rank: int) -> tuple[object, ...]:
    """What `rank_state` reads of a layout, with the rank."""
    lay = layout
    # under Muon, with the buffers' bucketing (muon_layout)
    buckets = (lay.overlap_grad_reduce, lay.ddp_bucket_size, lay.ddp_num_buckets)
    key: tuple[object, ...] = (lay.tp, lay.dp, lay.cp, lay.ep, lay.expert_tp, lay.zero_stage)
    fsdp: tuple[object, ...] = (lay.fsdp_double_buffer, lay.fsdp_max_pool)
    fsdp += (lay.suggested_communication_unit_size,)
    fsdp += (*buckets, lay.use_torch_fsdp2, lay.torch_fsdp2_reshard_after_forward)
    key += (lay.split_key(), rank, *(buckets if job.optimizer == "muon" else ()))
    return key + (fsdp if lay.zero_stage >= 2 else ())  # Megatron-FSDP's buffers (megatron_fsdp)


def _state_of(job: Job, layout: Layout, rank: int, chunks: Chunks) -> _State:
    dense, expert = stage_params(job, layout, rank, chunks)
    fp8_dense, fp8_expert = quantised_params(job, layout, rank, chunks)
    if job.framework == "torchtitan":  # FSDP2's states in place of ZeRO's (planner.model.fsdp2)
        out = fsdp2.output_share(job, layout, rank)
        fp8 = (fp8_dense, fp8_expert)
        return fsdp2.states(job, layout, (dense, expert), fp8, layer_count(chunks), out)
    w8, cache8 = buffers.quantised_weight_bytes(job, layout)
    z, g = layout.zero_stage, job.grad_bytes
    opt, w = adam_bytes(job, z), weight_bytes(job)  # fp32 training: 4-byte weights, no master
    opt -= adam_step.master_saving(job, z)  # TE's 16-bit master or fp32 master's remainder
    opt += optimizer_offload.gpu_extra_bytes(job, z)  # what the CPU offload leaves on the GPU
    # each of Megatron's distributed-optimizer instances shards over its slice of the groups
    n = job.optimizer_instances
    dense_dp, expert_dp = max(layout.dense_dp // n, 1), max(layout.expert_dp // n, 1)
    w_d, g_d, o_d = state_bytes_per_param(z, g, dense_dp, opt, w)
    w_e, g_e, o_e = state_bytes_per_param(z, g, expert_dp, opt, w)
    if n > 1 and z == 3 and job.outer_dp_sharding_strategy == "optim":
        # Megatron-FSDP's HFSDP: the optimizer states shard over the instances too
        o_d = state_bytes_per_param(z, g, layout.dense_dp, opt)[2]
        o_e = state_bytes_per_param(z, g, layout.expert_dp, opt)[2]
    w8_d = state_bytes_per_param(z, g, dense_dp, opt, w8)[0]
    w8_e = state_bytes_per_param(z, g, expert_dp, opt, w8)[0]
    weights = (dense - fp8_dense) * w_d + fp8_dense * w8_d
    weights += (expert - fp8_expert) * w_e + fp8_expert * w8_e
    cache = cache8 * (fp8_dense + fp8_expert)
    if rank == layout.output_rank:
        cache += buffers.output_proj_cache_bytes(job, layout)
    # Megatron-FSDP's unit buffers, and at ZeRO 3 the parameters outside units kept gathered;
    # under torch FSDP2 its own (the root's final norm, outside every unit, not counted)
    if torch_fsdp2.applies(job, layout):
        transient = torch_fsdp2.transient(job, layout, rank, chunks)
    else:
        profile, gathered = profile_and_resident(job, layout, rank, chunks)
        transient = megatron_fsdp.largest(profile)
        cache += gathered
    optimizer = dense * o_d + expert * o_e
    if job.frozen_model:  # Megatron's gradient buffers and optimizer hold trainable params only
        return (weights, 0.0, 0.0, cache, transient)
    if job.optimizer == "muon":
        decoder = decoder_params(job, layout, chunks)
        largest = _largest_adam(job, layout, dense, decoder[0])
        shards = (dense_dp, expert_dp)
        optimizer = muon_optimizer_bytes(
            job, layout, (dense, expert), decoder, largest, shards, (rank, chunks)
        )
        # the layer-wise layout's shard padding, in the gradient and parameter buffers alike
        pad_d, pad_e = muon_layout.padding(job, layout, rank, chunks)
        weights += pad_d * w_d + pad_e * w_e
        dense, expert = dense + pad_d, expert + pad_e
    return (weights, dense * g_d + expert * g_e, optimizer, cache, transient)


def _largest_adam(job: Job, layout: Layout, dense: float, decoder: float) -> float:
    """Under Muon, the stage's largest Adam parameter on one GPU (`muon_optimizer_bytes`): its
    word embedding or output layer, if any (0 without one); `dense` the stage's dense parameters,
    `decoder` those of its decoder layers."""
    words = job.arch.padded_vocab(layout.tp) * job.arch.hidden_size / layout.tp
    return min(dense - decoder, words)


MAIN_GRAD_COPY_BYTES = 4.0
"""Per updated parameter: the fp32 copy of its 16-bit reduced gradient that Megatron's optimizer
step makes (`copies_main_grads`)."""


def copies_main_grads(job: Job, zero_stage: int) -> bool:
    """Whether Megatron's optimizer step copies the reduced gradients into fp32 tensors of their
    own: with 16-bit gradient buffers (`Job.main_grad_dtype`; with fp32 ones the casts below
    return the buffer itself), unless the precision-aware optimizer reads the buffer in place.
    Megatron-LM d98e8a64:
    - ZeRO 0 and 1: `.float()` of each updated parameter's gradient (optimizer.py:1093-1096,
      Float16OptimizerWithFloat16Params._copy_model_grads_to_main_grads, every parameter;
      distrib_optimizer.py:2792, the shard's range); the precision-aware optimizer reads the
      buffer (`.decoupled_grad`, :2783-2790) where use_precision_aware_optimizer_no_fp8_or_ds_fp8
      holds (optimizer_config.py:407-414, with fp8_recipe from --fp8-recipe, whose default
      "delayed" stands without FP8 too, training.py:2612-2616): every precision but an FP8
      recipe other than delayed scaling, an fp16 master (`adam_step.decoupled`), or with the
      CPU-offloaded optimizer.
    - Megatron-FSDP (ZeRO 2, 3): `optimizer_grad.to(param.dtype)` of the gradient shard into the
      fp32 main weights' dtype (megatron_fsdp/param_and_grad_buffer.py:3377-3381, "a persistent
      casted-copy", :3200-3204, freed at the next zero_grad_buffer), unless the gradient is
      decoupled, which --use-precision-aware-optimizer makes it (training.py:2650).
    torchtitan's FSDP2 reduces into fp32 shards: no copy."""
    if job.main_grad_dtype != "bf16" or job.frozen_model or job.framework == "torchtitan":
        return False
    if not job.precision_aware_optimizer:
        return True
    if zero_stage >= 2:
        return False
    return not (adam_step.decoupled(job) or job.optimizer_offload_fraction > 0)


def updated_params(
    job: Job, layout: Layout, rank: int, chunks: Chunks, states: bool = False
) -> tuple[float, float]:
    """(dense, expert) parameters one GPU of pipeline rank `rank` updates at the step: all of
    the stage's at ZeRO 0, its shard from ZeRO 1 (over each distributed-optimizer instance's
    slice of the groups, as `_state_of`); with `states`, the shard of their optimizer states
    (under HFSDP's optim strategy over every instance too, as `_state_of`)."""
    dense, expert = stage_params(job, layout, rank, chunks)
    if layout.zero_stage >= 1:
        n = job.optimizer_instances
        if states and layout.zero_stage == 3 and job.outer_dp_sharding_strategy == "optim":
            n = 1
        dense /= max(layout.dense_dp // n, 1)
        expert /= max(layout.expert_dp // n, 1)
    return dense, expert


def step_grad_copy(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """Bytes of the fp32 gradient copies on one GPU of pipeline rank `rank` at the optimizer step
    (`copies_main_grads`): MAIN_GRAD_COPY_BYTES per parameter it updates (`updated_params`);
    under Muon from ZeRO 1 on the rank that updates the most, as `muon_optimizer_bytes` counts its
    states (the layer-wise layout's fullest shard, or the whole-parameter deal's fullest rank),
    at MAIN_GRAD_COPY_BYTES a parameter. They are made after the last backward, when the
    activations are freed, and freed at the next step's optimizer.zero_grad (training.py:3044,
    set_to_none; the next zero_grad_buffer under Megatron-FSDP), so they coexist with the model
    states but not the activations (`memory.StageMemory`)."""
    if not copies_main_grads(job, layout.zero_stage):
        return 0.0
    if job.optimizer == "muon" and layout.zero_stage >= 1:
        n = job.optimizer_instances
        shards = (max(layout.dense_dp // n, 1), max(layout.expert_dp // n, 1))
        stage = stage_params(job, layout, rank, chunks)
        decoder = decoder_params(job, layout, chunks)
        largest = _largest_adam(job, layout, stage[0], decoder[0])
        per = (MAIN_GRAD_COPY_BYTES, MAIN_GRAD_COPY_BYTES)
        return muon_optimizer_bytes(
            job, layout, stage, decoder, largest, shards, (rank, chunks), per
        )
    dense, expert = updated_params(job, layout, rank, chunks)
    return MAIN_GRAD_COPY_BYTES * (dense + expert)


def step_bytes(job: Job, layout: Layout, rank: int, chunks: Chunks) -> float:
    """Bytes the optimizer step holds on one GPU of pipeline rank `rank` beside the model states,
    after the activations are freed: the fp32 gradient copies (`step_grad_copy`), and on top of
    them Muon's orthogonalisation of its largest matrix (`muon_step.working_set`) or the
    precision-aware optimizer's fp32 working copies of its 16-bit states
    (`adam_step.unscaled_bytes`)."""
    held = step_grad_copy(job, layout, rank, chunks) + muon_step.working_set(job, layout, chunks)
    if adam_step.unscaled_states(job, layout.zero_stage):
        updated = updated_params(job, layout, rank, chunks, states=True)
        held += adam_step.unscaled_bytes(job, layout.zero_stage, updated)
    return held


def persistent_bytes(job: Job, layout: Layout, rank: int) -> float:
    """What stays allocated on a GPU of pipeline rank `rank` between steps (what
    torch.cuda.memory_allocated() reads after one): weights, gradient buffers, optimizer states,
    FP8 weight caches and the persistent workspaces."""
    chunks = layout.chunk_layers(job.arch.num_layers)[rank]
    weights, grads, optimizer, cache, _ = rank_state(job, layout, rank, chunks)
    return weights + grads + optimizer + cache + buffers.workspace_bytes(job, layout)
