"""`planner explain` and `planner scale`: where the memory and time go, and the operations view
(days, cost, energy, goodput) for a plan or across GPU counts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner import cost, memory, ops, render, report, scaling
from planner import plot as plot_mod
from planner import suggest as suggest_mod
from planner import timeline as timeline_mod
from planner.cli_common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    check_headroom,
    emit_json,
    out,
)
from planner.cost import Performance
from planner.errors import EXIT_NO
from planner.layout import Layout
from planner.spec import Job, load_plan
from planner.suggest import JobArgs

# operations options (planner.ops): shared by explain and scale; None = the documented default
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


def _ops_inputs(
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
) -> tuple[ops.OpsParams, int | None, bool]:
    """planner.ops.OpsParams from the options (None keeps the default; validated there), the
    token budget, and whether any operations option was given."""
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
    params = ops.OpsParams(async_checkpoint=async_checkpoint, **kwargs)
    budget = ops.parse_tokens(tokens) if tokens is not None else None
    return params, budget, bool(kwargs) or async_checkpoint or budget is not None


def explain(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="plan file (TOML)")],
    as_json: JsonOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
    tokens: TokensOpt = None,
    price: PriceOpt = None,
    failure_rate: FailureRateOpt = None,
    restart_min: RestartOpt = None,
    storage_gb_per_s: StorageOpt = None,
    pue: PueOpt = None,
    node_overhead_w: NodeWOpt = None,
    gpu_power_w: GpuWOpt = None,
    async_checkpoint: AsyncOpt = False,
    checkpoint_interval_min: IntervalOpt = None,
    timeline: Annotated[
        Path | None,
        typer.Option("--timeline", help="write one step's pipeline schedule as SVG"),
    ] = None,
) -> None:
    """Where the memory and the time go, per pipeline stage; with --tokens (or any operations
    option) also days, GPU-hours, cost, energy, checkpoint interval and goodput."""
    check_headroom(headroom)
    if timeline is not None:
        plot_mod.check_svg_path(timeline, "--timeline")
    params, budget, wanted = _ops_inputs(
        tokens, price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w,
        gpu_power_w, async_checkpoint, checkpoint_interval_min,
    )  # fmt: skip
    plan = load_plan(plan_path)
    job, layout = plan.job, plan.require_layout()
    rep = memory.estimate(job, layout, headroom)
    perf = cost.estimate(job, layout)
    operations = ops.operations(job, perf, budget, params) if wanted else None
    if timeline is not None:
        svg = timeline_mod.pipeline_svg(job, layout, perf)
        plot_mod.write_svg(timeline, svg, "--timeline")
    if as_json:
        data = report.plan_dict(job.arch, layout, rep, perf)
        if operations is not None:
            data["operations"] = report.operations_dict(operations)
        if timeline is not None:
            data["timeline"] = str(timeline)
        emit_json(data)
    else:
        render.print_explain(out, job, layout, rep, perf)
        if operations is not None:
            out.print(render.operations_table(operations))
        if timeline is not None:
            out.print(f"wrote {timeline}")


def scale(
    job_path: Annotated[
        Path | None, typer.Argument(metavar="[JOB]", help="job file: a plan without [parallel]")
    ] = None,
    model: Annotated[str | None, typer.Option(help="zoo name, config.json or model TOML")] = None,
    gpu: Annotated[str | None, typer.Option(help="catalog GPU name")] = None,
    num_gpus: Annotated[
        str, typer.Option("--num-gpus", help="sizes: 64..16384 (doubling), 64..4096x4, 8,64,512")
    ] = "8..1024",
    seq_length: Annotated[int | None, typer.Option(min=1)] = None,
    global_batch_size: Annotated[int | None, typer.Option(min=1)] = None,
    precision: Annotated[str | None, typer.Option(help="bf16 or fp8")] = None,
    tokens: TokensOpt = None,
    price: PriceOpt = None,
    failure_rate: FailureRateOpt = None,
    restart_min: RestartOpt = None,
    storage_gb_per_s: StorageOpt = None,
    pue: PueOpt = None,
    node_overhead_w: NodeWOpt = None,
    gpu_power_w: GpuWOpt = None,
    async_checkpoint: AsyncOpt = False,
    checkpoint_interval_min: IntervalOpt = None,
    threshold: Annotated[
        float, typer.Option(help="marginal efficiency below which added GPUs stop paying")
    ] = scaling.STOPS_PAYING_THRESHOLD,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the curve as SVG")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Best layout at each GPU count: tokens/s, per-GPU efficiency, cost per token, days, and
    where adding GPUs stops paying. Exit 0, 1 when no size has a layout that fits."""
    sizes = scaling.parse_sizes(num_gpus)
    params, budget, _ = _ops_inputs(
        tokens, price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w,
        gpu_power_w, async_checkpoint, checkpoint_interval_min,
    )  # fmt: skip
    if plot is not None:
        plot_mod.check_svg_path(plot)
    args = JobArgs(model, gpu, sizes[0], None, seq_length, global_batch_size, precision)
    job, _, origin = suggest_mod.load_job(job_path, args)
    err = Console(stderr=True)
    best = scaling.search_best_layout()

    def planned(j: Job) -> tuple[Layout, Performance] | None:
        if not as_json:
            err.print(f"planning {j.cluster.num_gpus:,} GPUs")
        return best(j)

    if not as_json:
        err.print(f"scaling {job.arch.name} on {job.cluster.gpu.name} ({origin})")
    curve = scaling.scale(job, sizes, planned, budget, params, threshold)
    if plot is not None:
        plot_mod.write_svg(plot, plot_mod.scaling_svg(curve))
    if as_json:
        data = report.curve_dict(curve)
        data["plot"] = str(plot) if plot is not None else None
        emit_json(data)
    else:
        out.print(render.scale_table(curve))
        if curve.stops_paying_at is not None:
            out.print(
                f"adding GPUs stops paying at {curve.stops_paying_at:,}: marginal efficiency "
                f"below {curve.threshold:.0%}"
            )
        if plot is not None:
            out.print(f"wrote {plot}")
    if curve.baseline is None:
        raise typer.Exit(EXIT_NO)
