"""Bytes per parameter of a training checkpoint (`planner.ops.resilience` times the save).

Megatron-LM (d98e8a64), `--ckpt-format torch_dist`, the distributed optimizer's default sharding
dp_reshardable (training/checkpointing.py:558):
- the model's 16-bit weights (2; 4 for fp32 parameters), the fp32 master (4) and Adam's two
  moments at their dtype (4 + 4, or 2 + 2): 14 or 10;
- Transformer Engine's FusedAdam holding the master (`adam_step.te_master`: the precision-aware
  optimizer on the decoupled path, ZeRO 0 / 1): the distributed optimizer asks TE for each state
  (distrib_optimizer.py:1098-1109, `get_unscaled_state`), which returns a 16-bit moment as fp32
  (TE d0067d0d fused_adam.py:344-349) and the master's int16 remainder as it is (:335-339; where
  `adam_step.master_saving` says TE keeps one): 2 + 2 + 4 + 4 = 12 whatever the moments' dtype;
- Megatron-FSDP (ZeRO 2 / 3, `--ckpt-format fsdp_dtensor`): the model part is the fp32 main
  weights swapped in for the parameters (megatron_fsdp.py:1403
  `_replace_param_with_distributed_if_needed`; param_and_grad_buffer.py:3250-3261, :1414-1424),
  the optimizer part its state alone (distrib_optimizer.py:1635-1657, `self.state`): 4 + the
  moments, no 16-bit copy: 12 (fp32 moments).
torchtitan: the fp32 parameters FSDP2 shards (4) + m and v (4 + 4): 12. Gradients are never
saved. Muon's one momentum buffer is counted as Adam's two (the safe side)."""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.inputs.plan_types import MOMENT_BYTES
from planner.model import adam_step


def _moments(job: Job) -> float:
    return sum(MOMENT_BYTES[d] for d in job.moment_dtypes)


def checkpoint_bytes_per_param(job: Job, zero_stage: int = 0) -> float:
    """Bytes per parameter of a checkpoint under the layout's ZeRO stage (module docstring); a
    frozen model's parameters have no optimizer state to save (Megatron's DDP and optimizer
    skip parameters without requires_grad: distributed_data_parallel.py:180-181,
    optimizer/__init__.py:332 d98e8a64): its weights alone."""
    if job.frozen_model:
        return 4.0 if job.params_dtype == "fp32" or job.framework == "torchtitan" else 2.0
    if job.framework == "torchtitan":
        return 4.0 + _moments(job)
    if zero_stage >= 2:  # Megatron-FSDP's fsdp_dtensor: fp32 main weights + the state
        return 4.0 + _moments(job)
    weights = 4.0 if job.params_dtype == "fp32" else 2.0
    if adam_step.te_master(job, zero_stage):  # TE's get_unscaled_state: fp32 moments
        remainder = job.main_params_dtype == "fp32" and adam_step.master_saving(job, zero_stage) > 0
        return weights + (2.0 if remainder else 4.0) + 8.0
    return weights + 4.0 + _moments(job)
