"""The `planner` command line: a thin typer app over the library.

Exit codes: 0 success, 1 the answer is "no", 2 bad input (one message on stderr, no traceback
unless --debug). With --json, stdout carries exactly one JSON document.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from planner import __version__, advice, catalog, cli_ops, cli_suggest, cost, memory, render, report
from planner import megatron_args as megatron_args_mod
from planner.cli_common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    check_headroom,
    emit_json,
    out,
)
from planner.errors import EXIT_BAD_INPUT, EXIT_NO, EXIT_OK, InputError, PlannerError
from planner.spec import Plan, load_plan, parse_plan
from planner.suggest import JobArgs, name_flags

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Parallelism auto-planner for large-model training.",
    pretty_exceptions_enable=False,
)
catalog_app = typer.Typer(no_args_is_help=True, help="The GPUs and models planner knows.")
app.add_typer(catalog_app, name="catalog")


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
    """Options for every command; `main` reads --debug itself, before any parsing can fail."""


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
    doc, where = megatron_args_mod.load(megatron_args, gpu, num_gpus)
    try:
        return parse_plan(doc, Path(where))
    except InputError as e:  # --gpu / --num-gpus are flags, not lines of the script
        flags = JobArgs(gpu=gpu, num_gpus=num_gpus)
        raise InputError(name_flags(str(e), Path(where), flags)) from None


@app.command()
def check(
    plan_path: Annotated[
        Path | None, typer.Argument(metavar="[PLAN]", help="plan file (TOML)")
    ] = None,
    as_json: JsonOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
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
    check_headroom(headroom)
    plan = _plan_from_args(plan_path, megatron_args, gpu, num_gpus)
    job, layout = plan.job, plan.require_layout()
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


app.command()(cli_ops.explain)
app.command()(cli_suggest.suggest)
app.command()(cli_ops.scale)
app.command()(cli_suggest.launch)


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
