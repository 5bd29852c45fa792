"""Megatron-FSDP's buffer flags on a Megatron-LM line, as the plan's `fsdp_double_buffer` and
`suggested_communication_unit_size` (Megatron-LM d98e8a64 training/arguments.py):
--fsdp-double-buffer (:3202), and --use-nccl-ub and --megatron-fsdp-max-pool-double-buffer,
which validate_args turns into it under --use-megatron-fsdp (:1172-1181);
--suggested-communication-unit-size (:3207), an int in elements."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line


def fsdp_fields(line: Line) -> dict[str, Any]:
    """The plan fields of the line's Megatron-FSDP buffer flags (none without
    --use-megatron-fsdp, which alone reads them); a unit size below 1 is refused: it leaves no
    gradient queue and no prefetch (megatron_fsdp.py:443-444), which is not a run to plan."""
    if not line.has("--use-megatron-fsdp"):
        return {}
    out: dict[str, Any] = {}
    implied = ("--fsdp-double-buffer", "--use-nccl-ub", "--megatron-fsdp-max-pool-double-buffer")
    if any(line.has(flag) for flag in implied):
        out["fsdp_double_buffer"] = True
    size = line.integer("--suggested-communication-unit-size")
    if size is not None:
        if size < 1:
            raise InputError(
                f"{line.where}: --suggested-communication-unit-size: {size}: expected a "
                "positive number of elements"
            )
        out["suggested_communication_unit_size"] = size
    return out
