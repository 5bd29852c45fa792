"""The operations options `planner explain` and `planner scale` share (`--tokens`, `--price`,
`--failure-rate`, ...), read into `planner.ops.assumptions.OpsParams` and a token budget; an
assumption out of range is reported under the option that set it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from planner.inputs.errors import InputError
from planner.inputs.plan import Job
from planner.inputs.units import MAX_TOKENS, format_tokens, parse_tokens
from planner.ops import operations as ops
from planner.ops.assumptions import (
    MAX_CHECKPOINT_INTERVAL_MIN,
    MAX_NODE_OVERHEAD_W,
    MAX_PUE,
    MIN_FAILURE_RATE_PER_GPU_DAY,
    AssumptionError,
    OpsParams,
)
from planner.ops.resilience import NoProgress

TokensOpt = Annotated[
    str | None,
    typer.Option(
        "--tokens",
        help=f"token budget, e.g. 15T, 300B, 2.5e12; at most {format_tokens(MAX_TOKENS)} (600x "
        "Llama 3's 15T, and below 2^53 so that JSON holds it and its steps exactly)",
    ),
]
PriceOpt = Annotated[
    float | None, typer.Option("--price", help="$ per GPU-hour (default: the catalog's)")
]
FailureRateOpt = Annotated[
    float | None,
    typer.Option(
        "--failure-rate",
        help="interruptions per GPU per day (default: Llama 3's); at least "
        f"{MIN_FAILURE_RATE_PER_GPU_DAY:g}, one per GPU in 2.7 billion years: no failures "
        "(below it the checkpoint interval ran to hundreds of digits)",
    ),
]
RestartOpt = Annotated[
    float | None, typer.Option("--restart-min", help="minutes to restart after a failure")
]
StorageOpt = Annotated[
    float | None,
    typer.Option("--storage-gb-per-s", help="checkpoint write GB/s per node (default 1.0)"),
]
PueOpt = Annotated[
    float | None,
    typer.Option(
        "--pue",
        help=f"data-centre PUE, 1 to {MAX_PUE:g} (default 1.1; at 10, 9 W of cooling and power "
        "delivery per IT watt)",
    ),
]
NodeWOpt = Annotated[
    float | None,
    typer.Option(
        "--node-overhead-w",
        help=f"non-GPU watts per node, at most {MAX_NODE_OVERHEAD_W:g} (over 200x a DGX H100's "
        "4.6 kW)",
    ),
]
GpuWOpt = Annotated[
    float | None, typer.Option("--gpu-power-w", help="watts per GPU (default: TDP)")
]
AsyncOpt = Annotated[
    bool,
    typer.Option(
        "--async-checkpoint",
        help="asynchronous checkpoint save in the figures (blocks for the host copy alone); a "
        "Megatron plan or job with training.async_save = true saves so without it. On one that "
        "saves synchronously a what-if: its launch files still save synchronously (set "
        "training.async_save for that)",
    ),
]
IntervalOpt = Annotated[
    float | None,
    typer.Option(
        "--checkpoint-interval-min",
        help="minutes between checkpoints (default: Daly); at most "
        f"{MAX_CHECKPOINT_INTERVAL_MIN:g} (694 days: a run shorter than its interval saves "
        "once, at its end)",
    ),
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
    """Re-raise an AssumptionError under the name of the option that set the value; settings
    under which the job makes no progress (`resilience.NoProgress`) under the first of the
    settings behind it that the user gave, each of them named with its value after."""
    try:
        yield
    except NoProgress as e:
        raise InputError(no_progress_text(e)) from None
    except AssumptionError as e:
        raise InputError(f"{OPTION_NAMES.get(e.field, e.field)}: {e.problem}") from None


def no_progress_text(e: NoProgress) -> str:
    """'--failure-rate: the job would make no progress ... (--restart-min 10, the default;
    --failure-rate 0.3)': the message under the first setting behind it that is not at its
    default (the one that decides it where none is), then every setting behind it, the deciding
    one first, default or given."""
    given = [f for f in e.involved if f in _OWN_OPTION and not e.params.is_default(f)]
    lead = OPTION_NAMES.get(given[0] if given else e.field, e.field)
    return f"{lead}: {e.problem} ({'; '.join(setting_text(e.params, f) for f in e.involved)})"


_OWN_OPTION = frozenset(OPTION_NAMES) - {"host_copy_gb_per_s", "step_time", "tokens", "objective"}
"""The OpsParams fields an option sets directly."""


def setting_text(params: OpsParams, field: str) -> str:
    """'--restart-min 10, the default', '--failure-rate 0.3', or the host copy's assumed rate."""
    value = getattr(params, field)
    if field not in _OWN_OPTION:
        return f"the device-to-host copy at {value:g} GB/s per GPU (assumed)"
    default = ", the default" if params.is_default(field) else ""
    return f"{OPTION_NAMES[field]} {value:g}{default}"


def check_ops(job: Job, params: OpsParams, budget: int | None, text: str | None) -> None:
    """Before any search: a budget below one optimizer step exits 2 naming --tokens as the user
    wrote it (`text`), a --gpu-power-w above the GPU's TDP (or power_limit_w) naming both."""
    with named_options():
        ops.power_w(job, params)
        if budget is not None:
            ops.training_steps(job, budget, text)


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
    and whether any operations option was given. The plan's own asynchronous save is not read
    here: the figures take it with these (`planner.ops.assumptions.for_job`)."""
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
