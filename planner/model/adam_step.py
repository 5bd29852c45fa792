"""Megatron's precision-aware optimizer (--use-precision-aware-optimizer,
`Job.precision_aware_optimizer`): what Transformer Engine's FusedAdam keeps of the master weight,
and the fp32 working copies of its 16-bit states at the step.

Megatron-LM d98e8a64, TransformerEngine 04912bf0 (transformer_engine/pytorch/optimizers/
fused_adam.py):
- Megatron hands TE's FusedAdam the master (master_weights=True, master_weight_dtype
  = --main-params-dtype, use_decoupled_grad) where use_precision_aware_optimizer_no_fp8_or_ds_fp8
  holds (optimizer/__init__.py:564-584; optimizer_config.py:407-414: an fp16 master, any
  precision but an FP8 recipe other than delayed scaling, or the CPU-offloaded optimizer), and
  not under Megatron-FSDP, whose own main weights the optimizer steps (master_weights set False,
  optimizer/__init__.py:1147-1161; ZeRO 2 and 3 here). The precision-aware optimizer runs only
  with the distributed optimizer or Megatron-FSDP (:1057-1060).
- TE keeps an fp16 master in 2 bytes (`_initialize_state`, dtype master_weight_dtype), and an fp32
  master of a bf16 parameter as its 16-bit remainder, an int16 tensor, where
  store_param_remainders holds (FusedAdam.__init__: "store_param_remainders and master_weights
  and master_weight_dtype == torch.float32"; `_initialize_state` `torch.zeros_like(...,
  dtype=torch.int16)`; the step reconstructs the fp32 value in its kernel,
  multi_tensor_adam_param_remainder); Megatron passes store_param_remainders, True by default
  (optimizer_config.py:192, False only before TE 2.1, :437-438; optimizer/__init__.py:587-588).
  `master_saving`: 2 bytes per parameter fewer than the 4 `Job.optimizer_bytes` counts.
- At each step FusedAdam unscales every state that is not fp32 into a fresh fp32 tensor
  (`get_unscaled_state`: `.float()` of a bf16, fp16 or FP8 state; the remainder is passed as it
  is), for every parameter of a parameter group before the group's kernels, and keeps them in its
  lists until the group's states are scaled back ("del unscaled_lists" at the group's end):
  4 bytes x the 16-bit states (`unscaled_states`) x the largest group's elements on the GPU
  (`unscaled_bytes`). Megatron's groups split dense from expert parameters (_get_param_groups,
  optimizer/__init__.py:350-356; the distributed optimizer builds an optimizer of each, :1178-1183
  and :1215-1220, stepped one after the other) and the weight-decayed parameters from the norms
  and biases (:113-120): the
  largest group is counted as the rank's whole dense (or expert) shard, the safe side by the
  norms and biases. The bf16 cast back (`_apply_scale`: `unscaled_state.bfloat16()`, one
  parameter at a time) is not counted.
- Time (`state_pass_bytes`, `weight_write_bytes`; `stage_sync.optimizer_time`): a bf16 moment
  is read into its fp32 copy (`.float()`, 2 + 4 bytes), which the kernel reads and writes (4 + 4,
  where `Job.optimizer_bytes` counts 2 + 2) and `_apply_scale` casts back
  (`scaled_state.copy_(unscaled_state.bfloat16())`, fused_adam.py:265: the cast 4 + 2 and the
  copy 2 + 2): 24 bytes, 20 more than counted. An fp16 master is unscaled (`.float()` and
  `mul_`, 6 + 8) and scaled back (`aminmax` 4, `mul_` 8, `copy_` 6): 32 more than its fp32
  4 + 4. The kernel writes the model's 16-bit weight itself (its fp32 master read and written
  in place, or the bf16 weight and int16 remainder read and written, 8 bytes as the fp32
  master's), so Megatron copies nothing back (distrib_optimizer.py:2820-2823: "main params are
  held by self.optimizer"). TransformerEngine from v2.14 (459e7cf49, "Fuse scaling and
  unscaling of bf16 momentums into kernels") reads bf16 moments in the kernel with no copies;
  planner follows 04912bf0, as the working copies' memory above does.
- The gradients: the decoupled gradient is the 16-bit buffer itself (distrib_optimizer.py
  :2783-2790), which the kernel reads as it is: no fp32 copy (`rank_states.copies_main_grads`).
"""

from __future__ import annotations

from planner.inputs.plan import Job

UNSCALED_BYTES = 4.0
"""Bytes per element of a 16-bit state's fp32 working copy at the step (`.float()`)."""

MASTER_SAVING_BYTES = 2.0
"""What a 16-bit master (fp16, or an fp32 master's int16 remainder) saves over the fp32 one
`Job.optimizer_bytes` counts."""


def on_gpu_fused_adam(job: Job) -> bool:
    """Whether Transformer Engine's FusedAdam steps Megatron's Adam with its 16-bit states: the
    precision-aware optimizer, not offloaded (the CPU-offloaded optimizer's GPU share keeps fp32
    states, `Job.optimizer_bytes`), under Megatron-LM."""
    return (
        job.precision_aware_optimizer
        and job.optimizer == "adam"
        and job.optimizer_offload_fraction == 0
        and job.framework == "megatron"
        and not job.frozen_model
    )


def decoupled(job: Job) -> bool:
    """Megatron's use_precision_aware_optimizer_no_fp8_or_ds_fp8 (optimizer_config.py:407-414)
    less its CPU-offload clause: the precision-aware optimizer with an fp16 master, or with
    OptimizerConfig's fp8_recipe None or delayed scaling. Megatron-LM's --fp8-recipe default
    "delayed" stands without FP8 too (training.py:2612-2616); Megatron-Bridge's bf16 presets set
    "tensorwise" (`Job.optimizer_fp8_recipe`), and there Megatron-Core keeps its own fp32
    master and copies the gradients at the step."""
    if not job.precision_aware_optimizer:
        return False
    recipe = job.optimizer_fp8_recipe or (job.fp8_recipe if job.precision == "fp8" else "delayed")
    return job.main_params_dtype != "fp32" or recipe == "delayed"


def te_master(job: Job, zero_stage: int) -> bool:
    """Whether TE's FusedAdam keeps the master weights (module docstring): with the distributed
    optimizer (ZeRO 0 and 1 here) and the decoupled path."""
    return on_gpu_fused_adam(job) and zero_stage < 2 and decoupled(job)


def master_saving(job: Job, zero_stage: int) -> float:
    """Bytes per parameter the master takes less than `Job.optimizer_bytes`' 4: an fp16 master,
    or the remainder of an fp32 one of bf16 parameters (bf16 training, and FP8 / NVFP4 training
    whose decoder weights stay bf16 parameters). fp32 and FP8 / NVFP4 parameters keep the whole
    fp32 master, and so do fp16 ones: TE stores the remainder only for a bfloat16 parameter
    (TransformerEngine 04912bf0 optimizers/fused_adam.py `set_scaled_state`: `param.dtype ==
    torch.bfloat16`), as Megatron-Core's checkpoint of it reads (d98e8a64
    distrib_optimizer.py:1008, `store_param_remainders and self.config.bf16`)."""
    if not te_master(job, zero_stage):
        return 0.0
    if job.main_params_dtype == "fp16":
        return MASTER_SAVING_BYTES
    bf16_params = job.params_dtype == "bf16" and not job.low_precision_params
    return MASTER_SAVING_BYTES if bf16_params else 0.0


def unscaled_states(job: Job, zero_stage: int) -> int:
    """How many of a parameter's states FusedAdam unscales into fp32 at the step: each moment not
    in fp32 (`Job.moment_dtypes`: bf16, fp16 or FP8, `get_unscaled_state`), and an fp16 master
    (the remainder is read as it is)."""
    if not on_gpu_fused_adam(job):
        return 0
    moments = 2 - job.moment_dtypes.count("fp32")
    master = te_master(job, zero_stage) and job.main_params_dtype == "fp16"
    return moments + (1 if master else 0)


def unscaled_bytes(job: Job, zero_stage: int, updated: tuple[float, float]) -> float:
    """Bytes of the fp32 working copies at the step on a GPU that updates `updated` (dense,
    expert) parameters: UNSCALED_BYTES x `unscaled_states` x the larger of the two (the largest
    parameter group, module docstring)."""
    return UNSCALED_BYTES * unscaled_states(job, zero_stage) * max(updated)


BF16_STATE_PASS_BYTES = (2.0 + 4.0) + (4.0 - 2.0) * 2 + (4.0 + 2.0) + (2.0 + 2.0)
"""Per bf16 moment and update, beyond the 2 + 2 `Job.optimizer_bytes` counts: its fp32 copy
(read 2, write 4), the kernel's fp32 read and write (2 more each way) and the cast back (read 4,
write 2, then the copy into the state, read 2, write 2): 20 (module docstring)."""

FP16_MASTER_PASS_BYTES = (2.0 + 4.0) + (4.0 + 4.0) + 4.0 + (4.0 + 4.0) + (4.0 + 2.0)
"""Per fp16 master and update, beyond the fp32 master's 4 + 4: unscaled (`.float()` 2 + 4,
`mul_` 4 + 4) and scaled back (`aminmax` 4, `mul_` 4 + 4, `copy_` 4 + 2): 32."""

WEIGHT_WRITE_BYTES = 2.0
"""The fused kernel's write of a 16-bit model weight, where no remainder is read and written in
the master's place (module docstring)."""


def state_pass_bytes(job: Job, zero_stage: int) -> float:
    """HBM bytes per updated parameter FusedAdam's unscaling and scaling passes add to the
    update `Job.optimizer_bytes` counts (module docstring): BF16_STATE_PASS_BYTES per moment not
    in fp32 (an fp16 or FP8 moment's scaling, aminmax and mul_, is counted as bf16's cast),
    FP16_MASTER_PASS_BYTES for an fp16 master."""
    if not on_gpu_fused_adam(job):
        return 0.0
    moments = (2 - job.moment_dtypes.count("fp32")) * BF16_STATE_PASS_BYTES
    fp16_master = te_master(job, zero_stage) and job.main_params_dtype == "fp16"
    return moments + (FP16_MASTER_PASS_BYTES if fp16_master else 0.0)


def weight_write_bytes(job: Job) -> float:
    """Where TE keeps the master (`te_master`), the bytes per updated parameter of its kernel's
    write of the model weight in place of Megatron's copy back: none where the bf16 weight is
    read and written with its int16 remainder (counted as the fp32 master), none for an fp32
    weight (updated in place), else WEIGHT_WRITE_BYTES."""
    remainder = job.main_params_dtype == "fp32" and master_saving(job, 0) > 0
    return 0.0 if remainder or job.params_dtype == "fp32" else WEIGHT_WRITE_BYTES
