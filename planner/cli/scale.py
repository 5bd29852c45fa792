"""`planner scale`: the best layout at each GPU count (`planner.search.scaling`, suggest's search:
a torchtitan job's `[torchtitan]` settings too): tokens/s, per-GPU efficiency, cost per token, days
to the token budget, where adding GPUs stops paying, and `--plot` the curve as SVG. A size at
which the job makes no progress under the failure settings is a row with a note, as is one whose
GPU count a setting must divide and does not (optimizer_instances, torchtitan's dp_replicate:
the note names it). Exit 1 when no size has a layout that fits; 2 for bad input (a rule the job
breaks on its own, such a setting at every size), and when no size makes progress (the options
behind it named, `ops_options.no_progress_text`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from planner.cli import calibration, plot, render_scale
from planner.cli.common import (
    BatchOpt,
    GpuOpt,
    JsonOpt,
    ModelOpt,
    PrecisionOpt,
    SeqOpt,
    emit_json,
    err,
    out,
    path_given,
)
from planner.cli.job_text import print_job
from planner.cli.ops_options import (
    AsyncOpt,
    FailureRateOpt,
    GpuWOpt,
    IntervalOpt,
    NodeWOpt,
    PriceOpt,
    PueOpt,
    RestartOpt,
    StorageOpt,
    TokensOpt,
    check_ops,
    named_options,
    ops_inputs,
)
from planner.inputs.errors import EXIT_NO, InputError, abbreviated
from planner.inputs.files import load_toml
from planner.inputs.hardware import MAX_GPUS
from planner.inputs.job_request import JobArgs, request_job
from planner.inputs.plan import Job
from planner.search import scaling
from planner.search.job_checks import check_job, check_sizes
from planner.search.suggest import check_found

MAX_SIZES = 64
"""GPU counts one `--num-gpus` may list."""


def _count(digits: str, option: str, factor: bool = False) -> int:
    """One GPU count (or, `factor`, the step factor) of the sizes, at most hardware.MAX_GPUS (a
    count with more digits than any size could have is refused before int() reads it: Python
    refuses 4,300 digits, and a valid one has eight)."""
    value = int(digits) if len(digits) <= len(str(MAX_GPUS)) else MAX_GPUS + 1
    if value > MAX_GPUS:
        what = f"step factor {abbreviated(digits)}: at most {MAX_GPUS:,}"
        if not factor:
            what = f"{abbreviated(digits)}: at most {MAX_GPUS:,} GPUs"
        raise InputError(f"{option}: {what}")
    return value


def parse_sizes(text: str, option: str = "--num-gpus") -> list[int]:
    """'64..16384' (doubling), '64..1024x4' (times 4), '64,256,1024', or one number."""
    s = text.replace(" ", "")
    m = re.fullmatch(r"(\d+)\.\.(\d+)(?:[x*](\d+))?", s)
    if m:
        lo, hi = _count(m[1], option), _count(m[2], option)
        factor = _count(m[3] or "2", option, factor=True)
        if lo < 1 or hi < lo:
            raise InputError(f"{option}: expected LO..HI with 1 <= LO <= HI (got {text!r})")
        if factor < 2:
            raise InputError(f"{option}: the step factor must be at least 2 (got {text!r})")
        sizes = [lo]
        while sizes[-1] * factor <= hi and len(sizes) < MAX_SIZES:
            sizes.append(sizes[-1] * factor)
        if sizes[-1] != hi and len(sizes) < MAX_SIZES:
            sizes.append(hi)
        return sizes
    if re.fullmatch(r"\d+(,\d+)*", s):
        sizes = sorted({_count(x, option) for x in s.split(",")})
        if sizes[0] < 1:
            raise InputError(f"{option}: GPU counts must be positive (got {text!r})")
        if len(sizes) > MAX_SIZES:
            raise InputError(f"{option}: at most {MAX_SIZES} sizes (got {len(sizes)})")
        return sizes
    raise InputError(f"{option}: expected N, LO..HI, LO..HIxF or N1,N2,... (got {text!r})")


DEFAULT_SIZES = "8..1024"


def scale(
    job_path: Annotated[
        Path | None,
        typer.Argument(
            metavar="JOB", parser=path_given, help="job file: a plan without [parallel]"
        ),
    ] = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: Annotated[
        str | None,
        typer.Option(
            "--num-gpus",
            help="sizes: 64..16384 (doubling), 64..4096x4, 8,64,512 (default "
            f"{DEFAULT_SIZES}, also with a job file)",
        ),
    ] = None,
    seq_length: SeqOpt = None,
    global_batch_size: BatchOpt = None,
    precision: PrecisionOpt = None,
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
    plot_path: Annotated[
        Path | None, typer.Option("--plot", parser=path_given, help="write the curve as SVG")
    ] = None,
    as_json: JsonOpt = False,
    calibration_opt: calibration.CalibrationOpt = None,
) -> None:
    """Best layout at each GPU count: tokens/s, per-GPU efficiency, cost per token, days, and
    where adding GPUs stops paying. Exit 0; 1 when no size has a layout that fits; 2 for bad
    input, and when no size makes progress under the failure settings."""
    sizes = parse_sizes(num_gpus if num_gpus is not None else DEFAULT_SIZES)
    scaling.check_threshold(threshold, "--threshold")
    params, budget, _ = ops_inputs(
        tokens, price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w,
        gpu_power_w, async_checkpoint, checkpoint_interval_min,
    )  # fmt: skip
    if plot_path is not None:
        plot.check_svg_path(plot_path)
    _one_kind(job_path)
    args = JobArgs(model, gpu, sizes[0], None, seq_length, global_batch_size, precision)
    req = request_job(job_path, args)
    job = req.job
    check_job(job, job_path)  # a rule no layout at any size runs: bad input, as `check` says
    check_sizes(job, sizes, job_path)  # a setting that divides none of the sizes, the same
    prof = calibration.use(calibration_opt, job)
    # the sizes replace the job's num_gpus; they default when --num-gpus is not given
    defaulted = tuple(f for f in req.defaulted if f != "num_gpus")
    if num_gpus is None:
        defaulted = ("num_gpus", *defaulted)
    values = req.values() | {"num_gpus": num_gpus if num_gpus is not None else DEFAULT_SIZES}
    check_ops(job, params, budget, tokens)  # --tokens as the user wrote it, --gpu-power-w
    best = scaling.search_best_layout()  # suggest's search (torchtitan: its settings too)

    def planned(j: Job) -> scaling.Found | None:
        if not as_json:
            err.print(f"planning {j.cluster.num_gpus:,} GPUs")
        got = best(j)
        if got is not None:  # a job setting no layout runs is bad input, as `check` says
            runs, lay, _ = scaling.resolved(j, got)
            check_found(runs, [(runs, lay)], job_path)
        return got

    if not as_json:
        print_job(err, "scaling", req, values, tuple(f for f in values if f in defaulted))
    elif req.unread is not None:  # the job line says it otherwise
        err.print(f"note: {req.unread}", markup=False, highlight=False)
    with named_options():
        curve = scaling.scale(job, sizes, planned, budget, params, threshold)
    if plot_path is not None:
        plot.write_svg(plot_path, plot.scaling_svg(curve))
    if as_json:
        data = render_scale.curve_dict(curve)
        data["defaulted"] = [f for f in req.values() if f in defaulted]
        data["plot"] = str(plot_path) if plot_path is not None else None
        calibration.add_json(data, prof)
        emit_json(data)
    else:
        out.print(render_scale.scale_table(curve))
        if curve.stops_paying_at is not None:
            out.print(
                f"adding GPUs stops paying at {curve.stops_paying_at:,}: marginal efficiency "
                f"below {curve.threshold:.0%}"
            )
        if plot_path is not None:
            out.print(f"wrote {plot_path}")
    if curve.baseline is None:
        raise typer.Exit(EXIT_NO)


def _one_kind(job_path: Path | None) -> None:
    """A job over pools is refused by name: scale plans one GPU kind at many sizes (the pools
    were refused as given beside the size scale put in, "--num-gpus ... 8 with 2 pools")."""
    if job_path is None:
        return
    cluster = load_toml(job_path).get("cluster")
    if isinstance(cluster, dict) and cluster.get("pools") is not None:
        raise InputError(
            f"{job_path}: cluster.pools: scale plans one GPU kind at many sizes; plan a job "
            "over pools with suggest"
        )
