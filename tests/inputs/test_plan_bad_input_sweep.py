"""planner.inputs.plan: a sweep that sets every scalar of tests/data/plans/every-field.toml to each
kind of wrong value; each exits 0, 1 or 2 and, at 2, names the field.

Oracles: the contract itself (exit codes and the message's file, field and value) and TOML's own
types (tomllib decides what type a literal is).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import typer
from plan_text import PLANS, write

from planner.cli import check as check_command
from planner.inputs.errors import PlannerError

EVERY_FIELD = PLANS / "every-field.toml"
EVERY_FIELD_LINES = EVERY_FIELD.read_text().splitlines()
SCALAR = re.compile(r"^(\w+) = (.+)$")
WRONG = ("true", "2.5", "inf", "nan", "-1", "0", str(10**30), '"x"', "[]")


def _scalar_lines() -> list[tuple[int, str, str]]:
    return [
        (i, m[1], m[2]) for i, line in enumerate(EVERY_FIELD_LINES) if (m := SCALAR.match(line))
    ]


def _toml_type(literal: str) -> type:
    return type(tomllib.loads(f"v = {literal}")["v"])


def _check_exit(path: Path) -> tuple[int, str]:
    """`planner check PATH` in-process, called as the command function itself: its exit code,
    and for a PlannerError the message `main` would print after "planner: error: ". Building the
    typer app around it on every call took 80% of this sweep's time and proves nothing about the
    plan's fields (tests/cli/test_cli.py checks that `main` maps these to the same exit codes and
    lines). Any other exception propagates and fails the test, where `main` would have hidden it
    as an "internal error" exit 2."""
    try:
        check_command.check(path)
    except PlannerError as e:
        return e.exit_code, str(e)
    except typer.Exit as e:
        return e.exit_code, ""
    raise AssertionError(f"check {path} returned without raising its exit code")


def test_the_sweep_starts_from_a_plan_that_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unmodified plan is clean and fits (exit 0), so every 2 below is the wrong value's."""
    path = write(tmp_path, "\n".join(EVERY_FIELD_LINES) + "\n")
    assert _check_exit(path) == (0, "")
    # every setting of the file is one of the scalars swept (no line the pattern misses)
    settings = [x for x in EVERY_FIELD_LINES if x.strip() and not x.startswith(("#", "["))]
    assert len(settings) == len(_scalar_lines())


@pytest.mark.parametrize(("index", "key", "literal"), _scalar_lines())
def test_every_field_set_wrong_exits_0_1_or_2_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], index: int, key: str, literal: str
) -> None:
    """Each scalar of a plan that sets every field (a MoE model inline, tiers overridden), set in
    turn to each of WRONG: `check` answers 0 / 1 / 2 and never raises (DESIGN.md's exit codes); a
    2 names the file and the field; and a value of another TOML type than the field's (a boolean
    for a count, a number for a switch, inf or nan for anything) is always a 2, never coerced."""
    lines = list(EVERY_FIELD_LINES)
    kind = _toml_type(literal)
    for wrong in WRONG:
        lines[index] = f"{key} = {wrong}"
        path = write(tmp_path, "\n".join(lines) + "\n")
        code, err = _check_exit(path)
        capsys.readouterr()  # the report of a plan that still fits (0) or does not (1)
        assert code in (0, 1, 2), (key, wrong, err)
        if code == 2:
            assert str(path) in err and key in err, (key, wrong, err)
        other_type = _toml_type(wrong) is not kind and not (
            kind is float and _toml_type(wrong) is int
        )
        if other_type or wrong in ("inf", "nan"):
            assert code == 2, (key, wrong, err)
