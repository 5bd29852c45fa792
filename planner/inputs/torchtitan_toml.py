"""The fields of a torchtitan job config TOML as torchtitan e347b1e5 takes them
(torchtitan/config/job_config.py at planner.inputs.torchtitan.TORCHTITAN_COMMIT; every section
and field in torchtitan_job_config_schema.json beside this module, read from that file with
Python's ast), for `planner.inputs.torchtitan_config`:

- a name JobConfig lacks is refused (`check_fields`), as torchtitan refuses the file
  (config/manager.py `_dict_to_dataclass`: "Invalid field names"); read as the defaults it
  described another job: an older TOML's `training.tensor_parallel_degree = 8` was tp 1. In the
  sections that decide no memory or time (`LENIENT`: logging, checkpointing, the data loader,
  ...) an older torchtitan's field (`job.print_args`, `checkpoint.enable_checkpoint`) is let
  be;
- a field that moves memory, time or the stages in a way planner does not model is taken at
  its default only (`UNMODELLED`: FSDP's CPU offload, bf16 or fp32 parameters, the stages by
  layer count, a schedule from a CSV, forced load balance), as the Python configuration reader
  takes them (`planner.inputs.torchtitan_baselines.UNMODELLED`);
- `model.converters` names the converters of e347b1e5's registry (`FLOAT8`: its float8 linear
  converter, and the name torchtitan registered it under before 8a2686c4).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan import TORCHTITAN_COMMIT

SCHEMA = Path(__file__).with_name("torchtitan_job_config_schema.json")

FLOAT8 = ("quantize.linear.float8", "float8")
"""The float8 linear converter: e347b1e5's registered name
(torchtitan/components/quantization/float8.py `register_model_converter`), and its name before
pytorch/torchtitan 8a2686c4 (2025-09-30), which torchtitan's own TOMLs kept. Its grouped-GEMM and
MX converters are not modelled."""

UNMODELLED: dict[tuple[str, str], Any] = {
    ("training", "enable_cpu_offload"): False,
    ("training", "dtype"): "float32",
    ("training", "mixed_precision_param"): "bfloat16",
    ("parallelism", "pipeline_parallel_layers_per_stage"): None,
    ("parallelism", "pipeline_parallel_first_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_last_stage_less_layers"): 1,
    ("parallelism", "pipeline_parallel_schedule_csv"): "",
    ("debug", "moe_force_load_balance"): False,
}
"""The fields planner takes at e347b1e5's defaults only (job_config.py), with those defaults."""


LENIENT = frozenset(
    {
        "job",
        "profiling",
        "metrics",
        "lr_scheduler",
        "checkpoint",
        "comm",
        "memory_estimation",
        "fault_tolerance",
        "validation",
        "validation.dataloader",
        "training.dataloader",
    }
)
"""The sections whose fields change no memory or step time the plan holds: a name JobConfig
lacks there is not refused (torchtitan e347b1e5 would; an older torchtitan, whose TOML it is,
may not)."""


@cache
def sections() -> dict[str, frozenset[str]]:
    """Each section's dotted name (`training.dataloader`, `quantize.linear.float8`) -> its
    fields."""
    data = json.loads(SCHEMA.read_text())
    return {name: frozenset(fields) for name, fields in data["sections"].items()}


def check_fields(doc: dict[str, Any], where: str) -> None:
    """Refuse a name the TOML's tables hold that JobConfig lacks, and an UNMODELLED field off
    its default; `where` the file."""
    _walk(doc, "", where)
    for (table, key), default in UNMODELLED.items():
        section = doc.get(table)
        if isinstance(section, dict) and key in section and section[key] != default:
            shown = "unset" if default is None else spelled(default)
            raise InputError(
                f"{where}: {table}.{key}: {spelled(section[key])}: planner models torchtitan at "
                f"its default here ({shown})"
            )


def _walk(table: dict[str, Any], prefix: str, where: str) -> None:
    known = sections()
    for key, value in table.items():
        path = f"{prefix}.{key}" if prefix else key
        if prefix in known and (key in known[prefix] or prefix in LENIENT):
            continue
        nested = path in known or any(name.startswith(path + ".") for name in known)
        if nested and isinstance(value, dict):
            _walk(value, path, where)
            continue
        what = "field" if prefix in known else "section"
        raise InputError(
            f"{where}: {path}: torchtitan {TORCHTITAN_COMMIT[:8]} has no such {what} "
            "(torchtitan/config/job_config.py), and refuses the file"
        )


def precision(converters: list[Any], where: str) -> str:
    """fp8 where `model.converters` holds the float8 linear converter, else bf16; another
    converter is refused."""
    other = [c for c in converters if c not in FLOAT8]
    if other:
        raise InputError(
            f"{where}: model.converters: {spelled(other[0])}: planner models torchtitan's float8 "
            f"linear converter ({', '.join(FLOAT8)}) only"
        )
    return "fp8" if converters else "bf16"
