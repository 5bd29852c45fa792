"""`planner calibrate LOG...`: refit the model's constants to a cluster's own Megatron-LM logs
and write the profile every command can apply (`--calibration`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from planner.calibration import profile as profiles
from planner.calibration.measured import read_runs
from planner.cli.common import JsonOpt, emit_json, err, out, path_given, whole
from planner.inputs.errors import InputError
from planner.inputs.files import exists, is_dir
from planner.inputs.units import GIB
from planner.model.calibratable import BY_KEY, DEFAULTS

if TYPE_CHECKING:  # numpy loads only when calibrate runs, not at every command's start-up
    from planner.calibration.fit import Fit


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _determined(f: Fit, key: str) -> str:
    if f.determined[key]:
        return "yes"
    partner = f.inseparable.get(key)
    if partner is not None:
        return f"no: not separable from {partner} with these logs: kept default"
    return "no: kept default"


def constants_table(f: Fit) -> Table:
    t = Table(title="constants")
    for col in ("constant", "value", "default", "determined", "+/- (1 sd)", "what"):
        t.add_column(col, justify="right" if col in ("value", "default", "+/- (1 sd)") else "left")
    for key, value in f.values.items():
        t.add_row(
            key,
            f"{value:.4g}",
            f"{DEFAULTS[key]:.4g}",
            _determined(f, key),
            f"{f.relative_sd[key]:.1%}",
            BY_KEY[key].what,
        )
    return t


def runs_table(f: Fit) -> Table:
    t = Table(title="runs: step time and peak allocated memory, measured vs predicted")
    cols = ("run", "layout", "step s", "default", "calibrated", "left out", "alloc GiB", "default",
            "calibrated")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col in ("run", "layout") else "right")
    for r in f.runs:
        m = r.measured_allocated
        t.add_row(
            r.run.where,
            r.run.plan.require_layout().describe(),
            f"{r.run.step_time_s:.3f}",
            _pct(r.predicted_default_s / r.run.step_time_s - 1),
            _pct(r.predicted_s / r.run.step_time_s - 1),
            _pct(r.leave_one_out),
            "-" if m is None else f"{m / GIB:.2f}",
            "-" if m is None or r.predicted_allocated_default is None
            else _pct(r.predicted_allocated_default / m - 1),
            "-" if m is None or r.predicted_allocated is None
            else _pct(r.predicted_allocated / m - 1),
        )  # fmt: skip
    return t


def fit_dict(f: Fit, path: Path, gpu: str, logs: list[str]) -> dict[str, Any]:
    """`--json`: the profile written, as data (`profile.document`: the same keys, units and
    roundings as the TOML, every key present, null where the fit has no figure), with its
    path: `profile`; the `[calibration]` table's keys at the top (`runs` the count); then
    `constants` and `residuals`."""
    doc = profiles.document(f, gpu, logs)
    return {
        "profile": str(path),
        **doc["calibration"],
        "constants": doc["constants"],
        "residuals": doc["residuals"],
    }


def calibrate(
    logs: Annotated[
        list[Path], typer.Argument(metavar="LOG...", parser=path_given, help="Megatron-LM logs")
    ],
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="catalog GPU the logs ran on, where they do not name it"),
    ] = None,
    num_gpus: Annotated[
        int | None,
        typer.Option(
            "--num-gpus", min=1, parser=whole(1), help="GPU count (default: each log's world_size)"
        ),
    ] = None,
    plan_path: Annotated[
        Path | None,
        typer.Option(
            "--plan", parser=path_given, help="the plan of logs that print no arguments block"
        ),
    ] = None,
    vocab_size: Annotated[
        int | None,
        typer.Option(
            "--vocab-size",
            min=1,
            parser=whole(1),
            help="the tokenizer's vocabulary, if not implied",
        ),
    ] = None,
    out_path: Annotated[
        Path | None,
        typer.Option(
            "--out",
            parser=path_given,
            help=f"profile to write (default: {profiles.default_path()})",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Refit the model's constants to Megatron-LM logs of one cluster; write the profile."""
    from planner.calibration.fit import fit

    path = out_path or profiles.default_path()
    _check_out(path)  # before the logs are read and fitted
    notes: list[str] = []
    runs = read_runs(logs, gpu, num_gpus, plan_path, vocab_size, notes)
    for note in notes:
        err.print(f"note: {note}", soft_wrap=True)
    gpus = {r.plan.job.cluster.gpu.name for r in runs}
    if len(gpus) > 1:
        raise InputError(
            f"--gpu: the logs ran on {', '.join(sorted(gpus))}: calibrate one GPU kind at a time"
        )
    result = fit(runs)
    gpu_name, log_names = gpus.pop(), [str(p) for p in logs]
    text = profiles.render(result, gpu_name, log_names)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as e:
        raise InputError(f"--out: cannot write {path}: {e.strerror or e}") from None
    if as_json:
        emit_json(fit_dict(result, path, gpu_name, log_names))
        return
    out.print(constants_table(result))
    out.print(runs_table(result))
    out.print(
        f"expected step-time error after calibration: +/-{result.band:.1%} ({result.band_basis})"
    )
    err.print(f"wrote {path}", soft_wrap=True)


def _check_out(path: Path) -> None:
    """--out names a file whose folders are folders or are yet to be made: a directory, or a
    path under a file (FILE/x.toml, where making the folders says only "File exists"), is
    refused naming the option and that file."""
    if is_dir(path):
        raise InputError(f"--out: {path}: is a directory, expected a file")
    for folder in path.parents:
        if is_dir(folder):
            return
        if exists(folder):
            raise InputError(f"--out: {path}: {folder} is a file, not a directory")
