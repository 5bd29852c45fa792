"""The PlannerError family and how bad input is reported.

Every error a user can cause is an `InputError`: the CLI prints its one-line message (naming the
file, the field and the value) on stderr and exits 2. Nothing below the CLI prints or exits.
"""

from __future__ import annotations

import datetime
import json
import math
import re
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


def spelled(value: Any, json_syntax: bool = False) -> str:
    """A parsed value as the user wrote it: in TOML (`true`, `"fp16"`, `inf`, `[1, 2]`,
    `{ a = 1 }`), or in JSON for a config.json (`true`, `null`, `"fp16"`, `{"a": 1}`), not in
    Python's spelling (`True`, `'fp16'`)."""
    if json_syntax:
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string escapes as JSON does
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list | tuple):
        return "[" + ", ".join(spelled(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {spelled(v)}" for k, v in value.items()) + " }"
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return repr(value)


def abbreviated(text: str) -> str:
    """A figure as a message quotes it: whole, or where long (a fuzzer's 5,000 digits) its first
    digits and its length."""
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text):,} characters)"


def spelled_json(value: Any) -> str:
    """`spelled` for a value read from a config.json."""
    return spelled(value, json_syntax=True)


def is_json(path: Path | str | None) -> bool:
    """Whether a file is read as JSON (a Hugging Face config.json) rather than TOML."""
    return path is not None and str(path).lower().endswith(".json")


_UNION_MEMBER = re.compile(r"[a-z]+(-[a-z]+)+|[a-z-]+\[.*\]")
"""How pydantic names the member of a union an error is about (`constrained-int`,
`tuple[function-before[_integer(), literal[0,1]], ...]`): no field's name, left out of `_loc`."""


def _loc(loc: tuple[int | str, ...], unknown_key: bool = False) -> str:
    """The field path: names and indices, without pydantic's union members (but an unknown key
    as the user spelled it)."""
    parts = [
        str(p)
        for p in loc
        if unknown_key or not (isinstance(p, str) and _UNION_MEMBER.fullmatch(p))
    ]
    return ".".join(parts) if parts else "(top level)"


def from_validation(err: ValidationError, path: Path | str | None, prefix: str = "") -> InputError:
    """Turn a pydantic error into one InputError: `file: field: message (got value)` per line."""
    lines = []
    for e in err.errors():
        field = _loc(tuple(e["loc"]), e["type"] == "extra_forbidden")
        if prefix:
            field = f"{prefix}.{field}" if field != "(top level)" else prefix
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # a validator's own message
        elif e["type"] == "literal_error":
            msg = msg.replace("'", '"')  # "Input should be 'bf16' or 'fp8'": the choices as TOML
        value: Any = e.get("input")
        shown = "" if e["type"] == "missing" else f" (got {spelled(value, is_json(path))})"
        if isinstance(value, dict):
            shown = ""
        lines.append(f"{where(path)}: {field}: {msg}{shown}")
    return InputError("\n".join(lines))
