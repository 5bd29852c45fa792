"""Megatron-FSDP's buffer flags on a Megatron-LM line, as the plan's `fsdp_double_buffer`,
`fsdp_max_pool` and `suggested_communication_unit_size` (Megatron-LM d98e8a64 training/
arguments.py): --fsdp-double-buffer (:3202), and --use-nccl-ub and
--megatron-fsdp-max-pool-double-buffer (:3717), which validate_args turns into it under
--use-megatron-fsdp (:1172-1181); the max-pool flag alone selects the MaxPoolAllocator, the DDP
config taking it by name (training.py:2632-2634; param_and_grad_buffer.py:2528-2532), so
--use-nccl-ub keeps the fixed pool; --suggested-communication-unit-size (:3207), an int in
elements."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line

MAX_POOL = "--megatron-fsdp-max-pool-double-buffer"


def fsdp_fields(line: Line) -> dict[str, Any]:
    """The plan fields of the line's Megatron-FSDP buffer flags (none without
    --use-megatron-fsdp, which alone reads them); a unit size below 1 is refused: it leaves no
    gradient queue and no prefetch (megatron_fsdp.py:443-444), which is not a run to plan; so is
    the max pool under --megatron-fsdp-version 2, which raises "MFSDP v2 does not support
    megatron_fsdp_max_pool_double_buffer" (mcore_fsdp_adapter.py:702-703)."""
    if not line.has("--use-megatron-fsdp"):
        return {}
    out: dict[str, Any] = {}
    implied = ("--fsdp-double-buffer", "--use-nccl-ub", MAX_POOL)
    if any(line.has(flag) for flag in implied):
        out["fsdp_double_buffer"] = True
    if line.has(MAX_POOL):
        # checked, not read: v2 stays listed as ignored (its choices checked: megatron_choices)
        if (line.flags.get("--megatron-fsdp-version") or ["1"])[-1] == "2":
            raise InputError(
                f"{line.where}: {MAX_POOL} with --megatron-fsdp-version 2: Megatron-FSDP v2 "
                "raises 'MFSDP v2 does not support megatron_fsdp_max_pool_double_buffer' "
                "(mcore_fsdp_adapter.py:702-703 d98e8a64)"
            )
        out["fsdp_max_pool"] = True
    size = line.integer("--suggested-communication-unit-size")
    if size is not None:
        if size < 1:
            raise InputError(
                f"{line.where}: --suggested-communication-unit-size: {size}: expected a "
                "positive number of elements"
            )
        out["suggested_communication_unit_size"] = size
    return out
