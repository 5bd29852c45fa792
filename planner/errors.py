"""The PlannerError family and how bad input is reported.

Every error a user can cause is an `InputError`: the CLI prints its one-line message (naming the
file, the field and the value) on stderr and exits 2. Nothing below the CLI prints or exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

EXIT_OK = 0
EXIT_NO = 1
EXIT_BAD_INPUT = 2


class PlannerError(Exception):
    """Base class of every error planner raises on purpose."""

    exit_code = EXIT_BAD_INPUT


class InputError(PlannerError):
    """Bad input: a file, a field or a value the user gave is wrong (exit 2)."""


def where(path: Path | str | None) -> str:
    """How a file is named in messages ("<inline>" when there is no file)."""
    return str(path) if path is not None else "<inline>"


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) if loc else "(top level)"


def from_validation(err: ValidationError, path: Path | str | None, prefix: str = "") -> InputError:
    """Turn a pydantic error into one InputError: `file: field: message (got value)` per line."""
    lines = []
    for e in err.errors():
        field = _loc(tuple(e["loc"]))
        if prefix:
            field = f"{prefix}.{field}" if field != "(top level)" else prefix
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        value: Any = e.get("input")
        shown = "" if e["type"] == "missing" else f" (got {value!r})"
        if isinstance(value, dict):
            shown = ""
        lines.append(f"{where(path)}: {field}: {msg}{shown}")
    return InputError("\n".join(lines))
