"""Megatron-LM's Megatron-FSDP arguments for a plan at ZeRO 2 / 3 (`planner.emit.megatron`):
the sharding strategy, which asserts `--ckpt-format fsdp_dtensor`; the distributed optimizer,
which Megatron-FSDP turns on itself with a warning; the gradients' dtypes; and the unit buffers'
settings, read back by `planner.inputs.megatron_fsdp_flags` (Megatron-LM d98e8a64
training/arguments.py)."""

from __future__ import annotations

from planner.emit.megatron_model import Arg
from planner.inputs.layout import FSDP_STRATEGY
from planner.inputs.megatron_fsdp_flags import MAX_POOL
from planner.inputs.plan import Plan


def megatron_fsdp_args(plan: Plan) -> list[Arg]:
    """Megatron-FSDP's flags: `--megatron-fsdp-main-grads-dtype fp32` for fp32 gradients (its
    default is the parameters' dtype), the communication dtype of its unsharded gradient buckets,
    the double buffer with the max pool's flag where the plan takes that allocator (the flag
    alone selects it, param_and_grad_buffer.py:2528-2532), and the unit size."""
    lay = plan.require_layout()
    a: list[Arg] = [
        ("--use-distributed-optimizer",),
        ("--use-megatron-fsdp",),
        ("--data-parallel-sharding-strategy", FSDP_STRATEGY[lay.zero_stage]),
        ("--ckpt-format", "fsdp_dtensor"),
        ("--init-model-with-meta-device",),
    ]
    if plan.job.main_grad_dtype == "fp32":
        a.append(("--megatron-fsdp-main-grads-dtype", "fp32"))
    if plan.job.fsdp_grad_comm_dtype is not None:
        a.append(("--megatron-fsdp-grad-comm-dtype", plan.job.fsdp_grad_comm_dtype))
    if lay.fsdp_double_buffer:
        a.append(("--fsdp-double-buffer",))
        if lay.fsdp_max_pool:
            a.append((MAX_POOL,))
    if lay.suggested_communication_unit_size is not None:
        a.append(
            ("--suggested-communication-unit-size", str(lay.suggested_communication_unit_size))
        )
    return a
