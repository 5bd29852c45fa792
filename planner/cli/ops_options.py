"""The operations options `planner explain` and `planner scale` share (`--tokens`, `--price`,
`--failure-rate`, ...), read into `planner.ops.assumptions.OpsParams` and a token budget; an
assumption out of range is reported under the option that set it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from planner.inputs.errors import InputError
from planner.inputs.units import parse_tokens
from planner.ops.assumptions import AssumptionError, OpsParams

TokensOpt = Annotated[
    str | None, typer.Option("--tokens", help="token budget, e.g. 15T, 300B, 2.5e12")
]
PriceOpt = Annotated[
    float | None, typer.Option("--price", help="$ per GPU-hour (default: the catalog's)")
]
FailureRateOpt = Annotated[
    float | None,
    typer.Option("--failure-rate", help="interruptions per GPU per day (default: Llama 3's)"),
]
RestartOpt = Annotated[
    float | None, typer.Option("--restart-min", help="minutes to restart after a failure")
]
StorageOpt = Annotated[
    float | None,
    typer.Option("--storage-gb-per-s", help="checkpoint write GB/s per node (default 1.0)"),
]
PueOpt = Annotated[float | None, typer.Option("--pue", help="data-centre PUE (default 1.1)")]
NodeWOpt = Annotated[float | None, typer.Option("--node-overhead-w", help="non-GPU watts per node")]
GpuWOpt = Annotated[
    float | None, typer.Option("--gpu-power-w", help="watts per GPU (default: TDP)")
]
AsyncOpt = Annotated[bool, typer.Option("--async-checkpoint", help="asynchronous checkpoint save")]
IntervalOpt = Annotated[
    float | None,
    typer.Option("--checkpoint-interval-min", help="minutes between checkpoints (default: Daly)"),
]

OPTION_NAMES = {
    "tokens": "--tokens",
    "objective": "--objective",
    "price_usd_per_gpu_hour": "--price",
    "failure_rate_per_gpu_day": "--failure-rate",
    "restart_min": "--restart-min",
    "storage_gb_per_s_per_node": "--storage-gb-per-s",
    "pue": "--pue",
    "node_overhead_w": "--node-overhead-w",
    "gpu_power_w": "--gpu-power-w",
    "host_copy_gb_per_s": "--async-checkpoint",
    "checkpoint_interval_min": "--checkpoint-interval-min",
    "step_time": "--failure-rate",
}
"""The option that sets each assumption (`AssumptionError.field`), so errors name the option: the
host copy's rate has no option of its own (the copy blocks under --async-checkpoint), and a step
longer than the time between interruptions is named under the rate of interruptions."""


@contextmanager
def named_options() -> Iterator[None]:
    """Re-raise an AssumptionError under the name of the option that set the value."""
    try:
        yield
    except AssumptionError as e:
        raise InputError(f"{OPTION_NAMES.get(e.field, e.field)}: {e.problem}") from None


def ops_inputs(
    tokens: str | None,
    price: float | None,
    failure_rate: float | None,
    restart_min: float | None,
    storage: float | None,
    pue: float | None,
    node_w: float | None,
    gpu_w: float | None,
    async_checkpoint: bool,
    interval: float | None,
) -> tuple[OpsParams, int | None, bool]:
    """OpsParams from the options (None keeps the default; validated there), the token budget,
    and whether any operations option was given."""
    given: dict[str, Any] = {
        "price_usd_per_gpu_hour": price,
        "failure_rate_per_gpu_day": failure_rate,
        "restart_min": restart_min,
        "storage_gb_per_s_per_node": storage,
        "pue": pue,
        "node_overhead_w": node_w,
        "gpu_power_w": gpu_w,
        "checkpoint_interval_min": interval,
    }
    kwargs = {k: v for k, v in given.items() if v is not None}
    with named_options():
        params = OpsParams(async_checkpoint=async_checkpoint, **kwargs)
    budget = parse_tokens(tokens, "--tokens") if tokens is not None else None
    return params, budget, bool(kwargs) or async_checkpoint or budget is not None
