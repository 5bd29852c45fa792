"""Every `--help` shows every help text as it is written: nothing read as rich markup (typer's rich
help used to eat "[parallel]" from "job file: a plan without [parallel]").

Oracle: the help strings declared in the code (the click parameters and commands typer builds from
planner.cli.app), each of which must appear in the rendered help of its command, compared with all
whitespace removed (the help formatter wraps lines, also at hyphens).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_run import run

from planner.cli.app import app


def commands(cmd: Any = None, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(argv path, click command) for the root and every command and sub-command below it."""
    cmd = typer.main.get_command(app) if cmd is None else cmd
    yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from commands(sub, (*path, name))


PATHS = [path for path, _ in commands()]


def squash(text: str) -> str:
    return "".join(text.split())


def test_every_command_is_covered() -> None:
    names = {" ".join(p) for p in PATHS}
    expected = {"", "catalog", "catalog list", "catalog show", "check", "explain", "suggest"}
    assert names == expected | {"scale", "launch", "calibrate"}


@pytest.mark.parametrize("path", PATHS, ids=[" ".join(p) or "planner" for p in PATHS])
def test_help_shows_every_help_text_intact(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    cmd = dict(commands())[path]
    code, out, err = run([*path, "--help"], capsys)
    assert code == 0, err
    shown = squash(out)
    texts = [p.help for p in cmd.params if getattr(p, "help", None)]
    texts.append(cmd.help.split("\n\n")[0])
    for text in texts:
        assert squash(text) in shown, (text, out)
    for p in cmd.params:  # every option and argument says what it is
        assert getattr(p, "help", None), p.name


def test_square_brackets_survive() -> None:
    """The texts above include some with square brackets (the case that was broken)."""
    bracketed = [
        p.help for _, cmd in commands() for p in cmd.params if "[" in (getattr(p, "help", "") or "")
    ]
    assert any("[parallel]" in h for h in bracketed)


@pytest.mark.parametrize("path", [("check",), ("suggest",)])
def test_help_names_exit_two(
    path: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A help that lists its exit codes names 2, which the command returns on bad input. Oracle:
    the command itself on a file that does not exist (exit 2, the file named)."""
    missing = tmp_path / "missing.toml"
    code, _, err = run([*path, str(missing)], capsys)
    assert code == 2 and str(missing) in err, err
    _, out, _ = run([*path, "--help"], capsys)
    assert "2 bad input" in " ".join(out.split()), out
