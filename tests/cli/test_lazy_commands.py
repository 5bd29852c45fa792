"""A command imports its own module and what that needs, not every command's
(`planner.cli.app.build_app`): `planner check` does not pay for `planner calibrate`'s imports.

Oracles: `sys.modules` of a fresh interpreter after each call; the command named by hand-written
argument lists.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from planner.cli.app import COMMANDS, command_named


def modules_after(code: str) -> set[str]:
    """The planner.cli modules a fresh interpreter has imported after running `code`."""
    listing = "print(' '.join(m for m in sys.modules if m.startswith('planner.cli.')))"
    probe = f"{code}\nimport sys\n{listing}"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize("name", ["check", "suggest"])
def test_one_command_imports_no_other_command_module(name: str) -> None:
    loaded = modules_after(f"from planner.cli.app import build_app\nbuild_app({name!r})")
    assert f"planner.cli.{name}" in loaded
    others = {f"planner.cli.{c}" for c in COMMANDS if c != name}
    assert not loaded & others, loaded & others


def test_the_whole_app_imports_every_command() -> None:
    loaded = modules_after("from planner.cli.app import app")
    assert {f"planner.cli.{c}" for c in COMMANDS} <= loaded


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["suggest", "--model", "llama3.1-8b"], "suggest"),
        (["--debug", "check", "plan.toml"], "check"),  # root flags come first
        (["catalog", "list"], "catalog"),
        (["--help"], None),  # the root's help lists every command
        (["-h", "check"], None),
        (["--version"], None),
        ([], None),
        (["nonsense", "check"], None),  # click reports the unknown command
    ],
)
def test_the_command_named_by_the_arguments(args: list[str], named: str | None) -> None:
    assert command_named(args) == named
