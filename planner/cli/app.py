"""The `planner` typer app: the root options, one sub-command per module of this package, and
`main`, which turns every PlannerError into its exit code and one line on stderr.

`main` builds the app with the one command its arguments name (`build_app`), so that a command
imports only its own module and what that needs (`planner.cli.calibrate` alone costs `planner
suggest` a tenth of a second of start-up); `--help`, no command or an unknown one get them all.
`app` (the module attribute) is the whole app.

Exit codes: 0 success, 1 the answer is "no", 2 bad input (one message on stderr, no traceback
unless --debug, which prints it and keeps the exit code). With --json, an answer (exit 0 or 1) is
exactly one JSON document on stdout; bad input leaves stdout empty (DESIGN.md section 2: its
message goes to stderr).
"""

from __future__ import annotations

import importlib
import sys
import traceback
from typing import Annotated

import typer

from planner import __version__
from planner.inputs.errors import EXIT_BAD_INPUT, EXIT_OK, PlannerError
from planner.model import calibratable

COMMANDS = ("catalog", "check", "explain", "suggest", "scale", "launch", "calibrate")
"""The commands, in help order; each is the function of that name in planner.cli.<name>, except
catalog, a sub-app (that module's `app`)."""


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with `only` (one of COMMANDS) alone, whose module is
    then the only command module imported."""
    out = typer.Typer(
        add_completion=False,
        no_args_is_help=True,
        help="Parallelism auto-planner for large-model training.",
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    out.callback()(_root)
    for name in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"planner.cli.{name}")
        if name == "catalog":
            out.add_typer(module.app, name=name)
        else:
            out.command()(getattr(module, name))
    return out


def command_named(args: list[str]) -> str | None:
    """The command `args` run: their first argument that is not an option (the root takes only
    flags), if it is one of COMMANDS and no --help precedes it; else None."""
    for a in args:
        if a in ("--help", "-h"):
            return None
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def __getattr__(name: str) -> typer.Typer:
    """`app`: the whole app, built when first asked for (tests/cli/test_help.py reads it)."""
    if name == "app":
        return build_app()
    raise AttributeError(name)


def _print_version(value: bool) -> None:
    """Eager `--version`: runs while the options are parsed, so no command is needed."""
    if value:
        print(__version__)
        raise typer.Exit(EXIT_OK)


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
    # --debug is the root's flag, and read here: after the command too (`planner suggest ...
    # --debug`), where the command's parser would refuse it
    command = command_named(args)
    if command is not None:
        at = args.index(command) + 1
        args = args[:at] + [a for a in args[at:] if a != "--debug"]
    try:
        rc = build_app(command)(args=args, prog_name="planner", standalone_mode=False)
    except PlannerError as e:
        if debug:  # the traceback, and still the error's exit code (1 would read "no")
            traceback.print_exc()
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
            traceback.print_exc()
        sys.stderr.write(f"planner: internal error: {type(e).__name__}: {e}\n")
        sys.exit(EXIT_BAD_INPUT)
    sys.exit(rc if isinstance(rc, int) else EXIT_OK)
