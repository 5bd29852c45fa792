"""What the commands share about calibration: the `--calibration` option and applying a profile,
`--megatron-log` (a past run as a plan, with what it measured), and how both are shown.

rich's tables are imported by `measured_table`, the one function that draws one: a command that
only applies a profile does not load them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from planner.calibration import profile as profiles
from planner.calibration.profile import Profile
from planner.cli.common import err, path_given, text_given, whole
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.inputs.units import GIB, shown
from planner.model import calibratable, cost, memory

if TYPE_CHECKING:
    from rich.table import Table

    from planner.calibration.measured import MeasuredRun
    from planner.inputs.job import Job

CalibrationOpt = Annotated[
    str | None,
    typer.Option(
        "--calibration",
        parser=text_given,
        help=f"calibration profile from `planner calibrate` ('none': the shipped constants; "
        f"default: ${profiles.ENV}, else {profiles.default_path()} if it exists)",
    ),
]
MegatronLogOpt = Annotated[
    Path | None,
    typer.Option(
        "--megatron-log",
        parser=path_given,
        help="a Megatron-LM training log: its printed arguments are the plan, and what it "
        "measured is shown beside the prediction",
    ),
]
LogGpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu", help="catalog GPU (--megatron-args / --megatron-log / --torchtitan-config)"
    ),
]
LogGpusOpt = Annotated[
    int | None,
    typer.Option(
        "--num-gpus",
        min=1,
        parser=whole(1),
        help="GPU count (--megatron-args: default its torchrun's; --megatron-log: its world_size; "
        "--torchtitan-config: its degrees' product, needed where a degree is -1, the rest)",
    ),
]


def use(option: str | None, job: Job) -> Profile | None:
    """Apply the profile the command is given (or the default one) for the rest of the process;
    one line on stderr says which. A profile of another GPU than the job's is bad input, and so
    is any profile for a job over pools of more than one GPU kind: a profile holds one GPU's
    constants, and they are module constants of the model (`calibratable.apply`) that every
    pool's time reads alike, so an H100's would be applied to an A100 pool too."""
    prof = profiles.resolve(option)
    if prof is None:
        return None
    gpus = [p.cluster.gpu.name for p in job.pools] or [job.cluster.gpu.name]
    kinds = sorted(set(gpus))
    if len(kinds) > 1:
        raise InputError(
            f"{prof.path}: calibration.gpu: {prof.gpu!r}, but the plan's pools run on "
            f"{', '.join(map(repr, kinds))}: a profile holds one GPU kind's constants and would "
            "apply to every pool alike; calibrate each kind on its own logs, and plan a job over "
            "pools of several kinds without a profile (--calibration none)"
        )
    if prof.gpu != kinds[0]:
        raise InputError(
            f"{prof.path}: calibration.gpu: {prof.gpu!r}, but the plan runs on {kinds[0]!r}: a "
            "profile holds one cluster's constants (--calibration none to plan without it)"
        )
    calibratable.apply(prof.values)
    err.print(f"calibrated: {prof.path} ({prof.runs} runs on {prof.gpu})", soft_wrap=True)
    return prof


def log_run(
    path: Path, gpu: str | None, num_gpus: int | None, vocab_size: int | None
) -> MeasuredRun:
    """The last run of a Megatron-LM log, with its plan and measurements; what the reader left
    out or could not measure cleanly (`read_runs`' notes) on stderr (the log reader imported
    here: the commands that take no --log do without it)."""
    from planner.calibration.measured import read_runs

    notes: list[str] = []
    runs = read_runs([path], gpu, num_gpus, None, vocab_size, notes)
    for note in notes:
        err.print(f"note: {note}", soft_wrap=True)
    return runs[-1]


def profile_dict(prof: Profile) -> dict[str, Any]:
    return {
        "profile": str(prof.path),
        "gpu": prof.gpu,
        "runs": prof.runs,
        "constants": {
            k: {"value": v, "default": calibratable.DEFAULTS[k], "determined": prof.determined[k]}
            for k, v in prof.values.items()
        },
        "error_band_pct": None if prof.error_band is None else round(100 * prof.error_band, 2),
        "error_basis": prof.error_basis,
        "residuals": list(prof.residuals),
    }


def add_json(data: dict[str, Any], prof: Profile | None, run: MeasuredRun | None = None) -> None:
    """A --json document's `measured` (a --megatron-log run's) and `calibration` (the profile
    applied), each where there is one."""
    if run is not None:
        data["measured"] = measured_dict(run, prof)
    if prof is not None:
        data["calibration"] = profile_dict(prof)


def profile_lines(prof: Profile | None) -> list[str]:
    """What `explain` and `suggest` say of the calibration they used (nothing without one)."""
    if prof is None:
        return []
    moved = [  # every constant applied unlike the default: fitted, or edited by hand
        f"{k} {v:.4g} (default {calibratable.DEFAULTS[k]:.4g}"
        + ("" if prof.determined.get(k, True) else "; set by hand, not determined by the logs")
        + ")"
        for k, v in prof.values.items()
        if v != calibratable.DEFAULTS[k]
    ]
    lines = [f"calibrated: {prof.path}, {prof.runs} runs on {prof.gpu}"]
    lines.append("  constants: " + ("; ".join(moved) if moved else "all at their defaults"))
    if prof.error_band is not None:
        lines.append(
            f"  expected step-time error: +/-{100 * prof.error_band:.1f}% ({prof.error_basis})"
        )
    for r in prof.residuals:
        if "predicted_s" in r and "measured_step_s" in r:
            err = r["predicted_s"] / r["measured_step_s"] - 1
            lines.append(f"  residual {r.get('run', '?')}: {shown(err, 3):+.1%}")
    return lines


def _prediction(plan: Plan, stage: int | None) -> tuple[float, float, float | None]:
    job, layout = plan.job, plan.require_layout()
    perf = cost.estimate(job, layout)
    alloc = None
    if stage is not None:
        alloc = memory.estimate(job, layout).stages[stage].allocated
    return perf.step_time_s, perf.tokens_per_s_per_gpu, alloc


def measured_dict(run: MeasuredRun, prof: Profile | None) -> dict[str, Any]:
    """`measured` for --json: the log's figures, and the uncalibrated prediction where a
    profile is applied (the document's `performance` and `memory` are the calibrated one)."""
    peak = run.peak()
    out: dict[str, Any] = {
        "log": run.where,
        "step_time_s": round(run.step_time_s, 6),
        "tokens_per_s_per_gpu": round(run.tokens_per_s_per_gpu, 2),
        "iterations_used": run.iterations_used,
        "max_allocated_gib": None if peak is None else round(peak.max_allocated_bytes / GIB, 3),
        "rank": None if peak is None else peak.rank,
        "stage": None if peak is None else peak.stage,
    }
    if prof is not None:
        with calibratable.calibrated(calibratable.DEFAULTS):
            step, tok, alloc = _prediction(run.plan, None if peak is None else peak.stage)
        out["uncalibrated"] = {
            "step_time_s": round(step, 6),
            "tokens_per_s_per_gpu": round(tok, 2),
            "allocated_gib": None if alloc is None else round(alloc / GIB, 3),
        }
    return out


def measured_table(run: MeasuredRun, prof: Profile | None) -> Table:
    """The log's measurements beside the prediction (and the uncalibrated one, if calibrated)."""
    from rich.table import Table

    peak = run.peak()
    stage = None if peak is None else peak.stage
    columns = [("predicted", _prediction(run.plan, stage))]
    if prof is not None:
        with calibratable.calibrated(calibratable.DEFAULTS):
            columns.append(("uncalibrated", _prediction(run.plan, stage)))
    t = Table(title=f"measured in {run.where} vs predicted")
    t.add_column("")
    t.add_column("measured", justify="right")
    for name, _ in columns:
        t.add_column(name, justify="right")
    t.add_row(
        f"step time s (median of {run.iterations_used} lines)",
        f"{run.step_time_s:.3f}",
        *(f"{p[0]:.3f} ({shown(p[0] / run.step_time_s - 1, 3):+.1%})" for _, p in columns),
    )
    t.add_row(
        "tokens/s/GPU",
        f"{run.tokens_per_s_per_gpu:,.0f}",
        *(f"{p[1]:,.0f}" for _, p in columns),
    )
    if peak is not None:
        m = peak.max_allocated_bytes
        t.add_row(
            f"max allocated GiB (rank {peak.rank}, stage {peak.stage})",
            f"{m / GIB:.2f}",
            *(
                f"{p[2] / GIB:.2f} ({shown(p[2] / m - 1, 3):+.1%})"
                for _, p in columns
                if p[2] is not None
            ),
        )
    return t
