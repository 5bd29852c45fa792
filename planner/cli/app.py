"""The `planner` typer app: the root options, one sub-command per module of this package, and
`main`, which turns every PlannerError into its exit code and one line on stderr.

Exit codes: 0 success, 1 the answer is "no", 2 bad input (one message on stderr, no traceback
unless --debug). With --json, stdout carries exactly one JSON document.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from planner import __version__
from planner.cli import calibrate, catalog, check, explain, launch, scale, suggest
from planner.inputs.errors import EXIT_BAD_INPUT, EXIT_OK, PlannerError
from planner.model import calibratable

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Parallelism auto-planner for large-model training.",
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.add_typer(catalog.app, name="catalog")
app.command()(check.check)
app.command()(explain.explain)
app.command()(suggest.suggest)
app.command()(scale.scale)
app.command()(launch.launch)
app.command()(calibrate.calibrate)


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


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: maps PlannerError to its exit code and one stderr line.
    A calibration profile a command applied is undone when it returns (in-process callers)."""
    args = sys.argv[1:] if argv is None else argv
    try:
        _main(args)
    finally:
        calibratable.reset()


def _main(args: list[str]) -> None:
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
