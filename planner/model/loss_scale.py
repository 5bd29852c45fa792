"""fp16 training's loss scaling at the optimizer step (`unscale_bytes`).

Megatron-LM d98e8a64 builds a grad scaler for fp16 (optimizer/__init__.py:644-654: a
DynamicGradScaler, or a ConstantGradScaler with --loss-scale), and before the step
MixedPrecisionOptimizer.prepare_grads (optimizer.py:757-764) unscales the main gradients the
optimizer updates and checks them for inf / nan in one pass
(`_unscale_main_grads_and_check_for_nan`, :713-724, torch._amp_foreach_non_finite_check_and_unscale_
reads and writes each): the distributed optimizer's shard (distrib_optimizer.py:2600-2616,
`_collect_main_grad_data_for_unscaling`), the fp32 main gradients, or under the precision-aware
optimizer's decoupled path the gradient buffer itself. bf16 training has no scaler unless
--loss-scale is given, which plans do not carry.
"""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.model.rank_states import copies_main_grads

FP32_GRAD_BYTES = 4.0
"""Bytes of an fp32 main gradient (the step's copy, or an fp32 gradient buffer)."""


def unscale_bytes(job: Job, zero_stage: int) -> float:
    """HBM bytes per updated parameter of fp16's unscaling pass (module docstring): its main
    gradient read and written, 4 + 4 in fp32 (`rank_states.copies_main_grads`' copy, or an fp32
    buffer), the 16-bit buffer's 2 + 2 where the step reads it in place; 0 without fp16."""
    if job.params_dtype != "fp16" or job.framework != "megatron" or job.frozen_model:
        return 0.0
    width = FP32_GRAD_BYTES if copies_main_grads(job, zero_stage) else job.grad_bytes
    return 2 * width
