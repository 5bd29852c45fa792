"""The `planner` command line: a thin typer app over the library.

Exit codes: 0 success, 1 the answer is "no", 2 bad input (one message on stderr, no traceback
unless --debug). With --json, stdout carries exactly one JSON document.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner import (
    __version__,
    advice,
    catalog,
    cost,
    memory,
    planfile,
    render,
    render_suggest,
    report,
    search,
)
from planner import megatron_args as megatron_args_mod
from planner import suggest as suggest_mod
from planner.errors import EXIT_BAD_INPUT, EXIT_NO, EXIT_OK, InputError, PlannerError
from planner.search import Bound, Space
from planner.spec import Plan, load_plan, parse_plan
from planner.suggest import JobArgs, merge_bound, parse_bound

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Parallelism auto-planner for large-model training.",
    pretty_exceptions_enable=False,
)
catalog_app = typer.Typer(no_args_is_help=True, help="The GPUs and models planner knows.")
app.add_typer(catalog_app, name="catalog")

out = Console(width=None if sys.stdout.isatty() else 160)
_state = {"debug": False}

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _print_version(value: bool) -> None:
    """Eager `--version`: runs while the options are parsed, so no command is needed."""
    if value:
        print(__version__)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version.", is_eager=True, callback=_print_version
        ),
    ] = False,
) -> None:
    _state["debug"] = debug


@catalog_app.command("list")
def catalog_list(
    kind: Annotated[str, typer.Argument(help="gpus, models, or all")] = "all",
    as_json: JsonOpt = False,
) -> None:
    """List the GPUs and/or models in the catalog."""
    if kind not in ("gpus", "models", "all"):
        raise InputError(f"catalog list: kind: expected gpus, models or all (got {kind!r})")
    gpus = list(catalog.gpus().values()) if kind in ("gpus", "all") else []
    models = list(catalog.models().values()) if kind in ("models", "all") else []
    if as_json:
        data: dict[str, Any] = {}
        if kind in ("gpus", "all"):
            data["gpus"] = [report.gpu_dict(g) for g in gpus]
        if kind in ("models", "all"):
            data["models"] = [report.model_dict(m, full=True) for m in models]
        emit_json(data)
        return
    if gpus:
        out.print(render.gpu_table(gpus))
    if models:
        out.print(render.model_table(models))


@catalog_app.command("show")
def catalog_show(
    name: Annotated[str, typer.Argument(help="a catalog name, a config.json or a model TOML")],
    as_json: JsonOpt = False,
) -> None:
    """Every field of one GPU or model (models also get params_total and params_active)."""
    data: dict[str, Any]
    if not catalog.looks_like_path(name) and name in catalog.gpus():
        data = report.gpu_dict(catalog.gpus()[name])
        kind = "GPU"
    elif catalog.looks_like_path(name) or name in catalog.models():
        data = report.model_dict(catalog.resolve_model(name), full=True)
        kind = "model"
    else:
        known = sorted(catalog.gpus()) + sorted(catalog.models())
        raise catalog.unknown_name("GPU or model", name, known)
    if as_json:
        emit_json(data)
    else:
        out.print(render.fields_table(f"{kind} {data['name']}", data))


def _need_layout(plan: Plan) -> None:
    if plan.layout is None:
        raise InputError(f"{plan.path}: parallel: the [parallel] table is missing")


def _plan_from_args(
    plan_path: Path | None, megatron_args: str | None, gpu: str | None, num_gpus: int | None
) -> Plan:
    """A plan file, or an existing Megatron-LM command line with --gpu and --num-gpus."""
    if megatron_args is None:
        if plan_path is None:
            raise InputError("check: PLAN: give a plan file, or --megatron-args FILE")
        return load_plan(plan_path)
    if plan_path is not None:
        raise InputError("check: give either PLAN or --megatron-args, not both")
    if gpu is None or num_gpus is None:
        raise InputError("--megatron-args: also needs --gpu NAME and --num-gpus N")
    where = "<stdin>" if megatron_args == "-" else megatron_args
    return parse_plan(megatron_args_mod.load(megatron_args, gpu, num_gpus), Path(where))


@app.command()
def check(
    plan_path: Annotated[
        Path | None, typer.Argument(metavar="[PLAN]", help="plan file (TOML)")
    ] = None,
    as_json: JsonOpt = False,
    headroom: Annotated[
        float, typer.Option("--headroom", help="percent of GPU memory kept free")
    ] = memory.DEFAULT_HEADROOM_PCT,
    megatron_args: Annotated[
        str | None,
        typer.Option(
            "--megatron-args", help="a Megatron-LM command line or launch script ('-' = stdin)"
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU (--megatron-args)")] = None,
    num_gpus: Annotated[
        int | None, typer.Option("--num-gpus", min=1, help="GPU count (--megatron-args)")
    ] = None,
) -> None:
    """Does the plan's layout fit in GPU memory? Exit 0 fits, 1 does not, 2 bad input."""
    if not 0 <= headroom < 100:
        raise InputError(f"--headroom: must be in [0, 100) percent (got {headroom})")
    plan = _plan_from_args(plan_path, megatron_args, gpu, num_gpus)
    _need_layout(plan)
    assert plan.layout is not None
    job, layout = plan.job, plan.layout
    rep = memory.estimate(job, layout, headroom)
    step_time = lambda lay: cost.estimate(job, lay).step_time_s  # noqa: E731
    changes = [] if rep.fits else advice.memory_changes(job, layout, headroom, step_time)
    if as_json:
        data = report.plan_dict(job.arch, layout, rep, cost.estimate(job, layout))
        data["changes"] = [
            {"change": c.describe(), "saves_gib": round(c.saves / 2**30, 2), "fits": c.fits}
            for c in changes
        ]
        emit_json(data)
    else:
        render.print_check(out, job, layout, rep, changes)
    raise typer.Exit(EXIT_OK if rep.fits else EXIT_NO)


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


def _ops_params(
    price: float | None,
    failure_rate: float | None,
    restart_min: float | None,
    storage: float | None,
    pue: float | None,
    node_w: float | None,
    gpu_w: float | None,
    async_checkpoint: bool,
    interval: float | None,
) -> Any:
    """planner.ops.OpsParams from the options; None keeps the default (validated there)."""
    from planner import ops

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
    return ops.OpsParams(async_checkpoint=async_checkpoint, **kwargs)


@app.command()
def explain(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="plan file (TOML)")],
    as_json: JsonOpt = False,
    headroom: Annotated[
        float, typer.Option("--headroom", help="percent of GPU memory kept free")
    ] = memory.DEFAULT_HEADROOM_PCT,
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
) -> None:
    """Where the memory and the time go, per pipeline stage; with --tokens (or any operations
    option) also days, GPU-hours, cost, energy, checkpoint interval and goodput."""
    from planner import ops

    if not 0 <= headroom < 100:
        raise InputError(f"--headroom: must be in [0, 100) percent (got {headroom})")
    opts = (price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w, gpu_power_w)
    params = _ops_params(*opts, async_checkpoint, checkpoint_interval_min)
    budget = ops.parse_tokens(tokens) if tokens is not None else None
    plan = load_plan(plan_path)
    _need_layout(plan)
    assert plan.layout is not None
    job, layout = plan.job, plan.layout
    rep = memory.estimate(job, layout, headroom)
    perf = cost.estimate(job, layout)
    wanted = budget is not None or async_checkpoint or checkpoint_interval_min is not None
    wanted = wanted or any(v is not None for v in opts)
    operations = ops.operations(job, layout, perf, budget, params) if wanted else None
    if as_json:
        data = report.plan_dict(job.arch, layout, rep, perf)
        if operations is not None:
            data["operations"] = report.operations_dict(operations)
        emit_json(data)
    else:
        render.print_explain(out, job, layout, rep, perf)
        if operations is not None:
            out.print(render.operations_table(operations))


def _bound(flag: str, text: str | None, max_value: int | None = None) -> Bound:
    bound = parse_bound(f"--{flag}", text) if text is not None else Bound()
    return merge_bound(flag, bound, max_value)


RangeOpt = Annotated[str | None, typer.Option(help="pin (8) or bound (1-16, 4-, -8)")]
MaxOpt = Annotated[int | None, typer.Option(help="upper bound")]


@app.command()
def suggest(
    job_path: Annotated[
        Path | None, typer.Argument(metavar="[JOB]", help="job file: a plan without [parallel]")
    ] = None,
    model: Annotated[str | None, typer.Option(help="zoo name, config.json or model TOML")] = None,
    gpu: Annotated[str | None, typer.Option(help="catalog GPU name")] = None,
    num_gpus: Annotated[int | None, typer.Option(min=1)] = None,
    nodes: Annotated[int | None, typer.Option(min=1)] = None,
    seq_length: Annotated[int | None, typer.Option(min=1)] = None,
    global_batch_size: Annotated[int | None, typer.Option(min=1)] = None,
    precision: Annotated[str | None, typer.Option(help="bf16 or fp8")] = None,
    tp: RangeOpt = None,
    pp: RangeOpt = None,
    cp: RangeOpt = None,
    ep: RangeOpt = None,
    dp: RangeOpt = None,
    vpp: RangeOpt = None,
    mbs: RangeOpt = None,
    max_tp: MaxOpt = None,
    max_pp: MaxOpt = None,
    max_cp: MaxOpt = None,
    max_ep: MaxOpt = None,
    no_cp: Annotated[bool, typer.Option("--no-cp", help="no context parallelism")] = False,
    no_uneven: Annotated[bool, typer.Option("--no-uneven", help="even splits only")] = False,
    zero: Annotated[str | None, typer.Option(help="ZeRO stages to allow, e.g. 1 or 1,2")] = None,
    recompute: Annotated[str | None, typer.Option(help="e.g. none or none,full")] = None,
    tp_across_nodes: Annotated[bool, typer.Option(help="TP beyond the NVLink domain")] = False,
    headroom: Annotated[
        float, typer.Option(help="percent of GPU memory kept free")
    ] = memory.DEFAULT_HEADROOM_PCT,
    top: Annotated[int, typer.Option(min=1, max=100, help="how many layouts to list")] = 5,
    as_json: JsonOpt = False,
    write_plan: Annotated[
        Path | None, typer.Option(help="write the top layout as a plan file")
    ] = None,
    force: Annotated[bool, typer.Option(help="overwrite --write-plan's file")] = False,
) -> None:
    """Search every layout and list the fastest that fit. Exit 0 found, 1 nothing fits."""
    if not 0 <= headroom < 100:
        raise InputError(f"--headroom: must be in [0, 100) percent (got {headroom})")
    args = JobArgs(model, gpu, num_gpus, nodes, seq_length, global_batch_size, precision)
    job, model_ref, origin = suggest_mod.load_job(job_path, args)
    space = Space(
        tp=_bound("tp", tp, max_tp),
        pp=_bound("pp", pp, max_pp),
        cp=Bound(1, 1) if no_cp else _bound("cp", cp, max_cp if max_cp else search.MAX_CP),
        ep=_bound("ep", ep, max_ep),
        dp=_bound("dp", dp),
        vpp=_bound("vpp", vpp),
        mbs=_bound("mbs", mbs, None if mbs else search.MAX_MICRO_BATCH),
        zero_stages=suggest_mod.zero_list(zero),
        recompute=suggest_mod.recompute_list(recompute),
        tp_across_nodes=tp_across_nodes,
        uneven=not no_uneven,
        headroom_pct=headroom,
    )
    suggest_mod.check_space(job, space)
    if write_plan is not None and write_plan.exists() and not force:
        raise InputError(f"--write-plan: {write_plan} exists (use --force to overwrite)")
    err = Console(stderr=True)
    if not as_json:
        err.print(
            f"planning {job.arch.name} on {job.cluster.num_gpus} x {job.cluster.gpu.name}"
            f" ({origin})"
        )
    res = search.search(job, space, top, progress=lambda msg: err.print(msg))
    if not res.candidates:
        why = suggest_mod.explain_infeasible(job, space, res)
        if as_json:
            emit_json(report.infeasible_dict(why, res))
        else:
            render_suggest.print_infeasible(out, why, res)
        raise typer.Exit(EXIT_NO)
    if write_plan is not None:
        best = res.candidates[0]
        header = [
            f"planner {__version__} suggest: {job.arch.name} on {job.cluster.num_gpus} x "
            f"{job.cluster.gpu.name}",
            f"predicted step {best.performance.step_time_s:.3f} s, "
            f"{best.performance.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
            f"peak {best.memory.peak / 2**30:.1f} GiB",
        ]
        table = planfile.model_table(job, model_ref, write_plan)
        try:
            write_plan.write_text(planfile.render(job, best.layout, table, header))
        except OSError as e:
            raise InputError(f"--write-plan: cannot write {write_plan}: {e}") from None
    if as_json:
        emit_json(report.suggest_dict(job, res))
    else:
        render_suggest.print_result(out, job, res, "step time")
        if write_plan is not None:
            out.print(f"wrote {write_plan}")


@app.command()
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
    ] = 0.5,
    plot: Annotated[Path | None, typer.Option("--plot", help="write the curve as SVG")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Best layout at each GPU count: tokens/s, per-GPU efficiency, cost per token, days, and
    where adding GPUs stops paying. Exit 0, 1 when no size has a layout that fits."""
    from planner import ops, scaling
    from planner import plot as plot_mod

    sizes = scaling.parse_sizes(num_gpus)
    opts = (price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w, gpu_power_w)
    params = _ops_params(*opts, async_checkpoint, checkpoint_interval_min)
    budget = ops.parse_tokens(tokens) if tokens is not None else None
    if plot is not None and plot.suffix.lower() != ".svg":
        raise InputError(f"--plot: only SVG is drawn; give a path ending in .svg (got {plot})")
    args = JobArgs(model, gpu, sizes[0], None, seq_length, global_batch_size, precision)
    job, _, origin = suggest_mod.load_job(job_path, args)
    err = Console(stderr=True)
    best = scaling.search_best_layout()

    def planned(j: Any) -> Any:
        if not as_json:
            err.print(f"planning {j.cluster.num_gpus:,} GPUs")
        return best(j)

    if not as_json:
        err.print(f"scaling {job.arch.name} on {job.cluster.gpu.name} ({origin})")
    curve = scaling.scale(job, sizes, planned, budget, params, threshold)
    if plot is not None:
        plot_mod.write_svg(plot, plot_mod.scaling_svg(curve))
    if as_json:
        data = scaling.curve_dict(curve)
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


@app.command()
def launch(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="plan file (TOML)")],
    target: Annotated[str, typer.Option("--target", help="megatron-args, torchrun, slurm or k8s")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="write into this directory (default: stdout)")
    ] = None,
    job_name: Annotated[
        str | None, typer.Option("--job-name", help="job name (default: the plan file's stem)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write the plan's launch file: Megatron-LM arguments, torchrun, Slurm or Kubernetes."""
    from planner import launch as launch_mod

    done = launch_mod.launch(plan_path, target, out_dir, job_name, force)
    if done.path is None:
        sys.stdout.write(done.text)
    else:
        print(done.path)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: maps PlannerError to its exit code and one stderr line."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        rc = app(args=args, prog_name="planner", standalone_mode=False)
    except PlannerError as e:
        if debug:
            raise
        sys.stderr.write(f"planner: error: {e}\n")
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:  # click usage errors carry their own exit code
        code = getattr(e, "exit_code", None)
        if code is not None and hasattr(e, "show"):
            e.show()
            sys.exit(code)
        if debug:
            raise
        sys.stderr.write(f"planner: internal error: {type(e).__name__}: {e}\n")
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)
