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
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

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


def named(message: str, where: str, names: dict[str, str]) -> str:
    """An error about a plan read from another file (a command line, a torchtitan TOML), naming
    the file's own word beside each plan field it names: `FILE: --global-batch-size
    (training.global_batch_size): ...`; `names` plan field -> the file's word."""
    for field, word in names.items():
        message = message.replace(f"{where}: {field}: ", f"{where}: {word} ({field}): ")
    return message


SPELLED_ITEMS = 16
"""The most items of an array or table a message quotes (then "..." and the count): a fuzzer's
2,000-item list is named, not reprinted."""

SPELLED_DIGITS = 64
"""The most digits of an integer a message quotes whole (more: `abbreviated`)."""

SPELLED_CHARS = 200
"""The most characters of a string a message quotes (then "..." and the length)."""

SPELLED_DEPTH = 8
"""The most levels of nested arrays or tables a message quotes (deeper ones are "[...]")."""


def spelled(value: Any, json_syntax: bool = False, depth: int = 0) -> str:
    """A parsed value as the user wrote it: in TOML (`true`, `"fp16"`, `inf`, `[1, 2]`,
    `{ a = 1 }`), or in JSON for a config.json (`true`, `null`, `"fp16"`, `{"a": 1}`), not in
    Python's spelling (`True`, `'fp16'`); long or deeply nested arrays and tables cut short
    (SPELLED_ITEMS, SPELLED_DEPTH)."""
    if isinstance(value, list | tuple | dict) and depth >= SPELLED_DEPTH:
        return "{...}" if isinstance(value, dict) else "[...]"
    if isinstance(value, list | tuple):
        items = [spelled(v, json_syntax, depth + 1) for v in value[:SPELLED_ITEMS]]
        return "[" + ", ".join(items + _more(len(value))) + "]"
    if isinstance(value, dict):
        pairs = list(value.items())[:SPELLED_ITEMS]
        if json_syntax:
            inner = [f"{json.dumps(str(k))}: {spelled(v, True, depth + 1)}" for k, v in pairs]
            return "{" + ", ".join(inner + _more(len(value))) + "}"
        inner = [f"{k} = {spelled(v, False, depth + 1)}" for k, v in pairs]
        return "{ " + ", ".join(inner + _more(len(value))) + " }" if inner else "{}"
    if isinstance(value, str) and len(value) > SPELLED_CHARS:  # a fuzzer's 30,000 characters
        head = json.dumps(value[:SPELLED_CHARS], ensure_ascii=False)
        return f"{head}... ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)  # a fuzzer's 400 digits: the first ones and the count
        return text if len(text) <= SPELLED_DIGITS else abbreviated(text)
    if json_syntax:
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a TOML basic string escapes as JSON does
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return repr(value)


def _more(count: int) -> list[str]:
    """The tail of a cut-short array or table: "... (N items)", or nothing."""
    return [f"... ({count:,} items)"] if count > SPELLED_ITEMS else []


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


def _inner(tp: Any) -> Any:
    """An annotation without Annotated and None: its first member that is a table or an array
    where it is a union (`X | None`, `tuple[...] | None`), else its first member."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, UnionType):
        members = [_inner(a) for a in get_args(tp) if a is not type(None)]
        nested = [m for m in members if _is_model(m) or get_origin(m) in (tuple, list, dict)]
        return (nested or members or [None])[0]
    return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def is_section(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> bool:
    """Whether an error's location is a table of `model`'s file (the file itself, a section
    such as `[training]`, a `[[cluster.pools]]` entry, a free table), not a value: where a
    table is the value, the message does not quote it (its fields are named on their own)."""
    tp: Any = model
    for part in loc:
        tp = _inner(tp)
        if isinstance(part, int) and get_origin(tp) in (tuple, list):
            args = [a for a in get_args(tp) if a is not Ellipsis]
            tp = args[min(part, len(args) - 1)] if args else None
        elif _is_model(tp) and isinstance(part, str) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        elif not _UNION_MEMBER.fullmatch(str(part)):
            return False
    tp = _inner(tp)
    return _is_model(tp) or get_origin(tp) is dict or tp is dict


def from_validation(
    err: ValidationError,
    path: Path | str | None,
    prefix: str = "",
    model: type[BaseModel] | None = None,
) -> InputError:
    """Turn a pydantic error into one InputError: `file: field: message (got value)` per line;
    a table's value is quoted only where a value was expected (`is_section`; with no `model`,
    a table at the top level alone is a section)."""
    lines: list[tuple[str, str, str]] = []
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
        if isinstance(value, dict) and (not e["loc"] or is_section(model, tuple(e["loc"]))):
            shown = ""
        lines.append((field, f"{where(path)}: {field}: {msg}{shown}", msg))
    return InputError("\n".join(_collapsed(lines, where(path))))


SAME_ERRORS_SHOWN = 3
"""The most lines one message takes for the items of one array (a 61-entry moe_layer_freq of 2s
gets three, then a count)."""

_INDEX = re.compile(r"\.\d+(?=\.|$)")


def _collapsed(lines: list[tuple[str, str, str]], name: str) -> list[str]:
    """The error lines, each (field, line, message), with those that differ only in an array
    index beyond the first SAME_ERRORS_SHOWN folded into one "... N more" line."""
    count: dict[tuple[str, str], int] = {}
    for field, _, msg in lines:
        key = (_INDEX.sub(".*", field), msg)
        count[key] = count.get(key, 0) + 1
    out, seen = [], dict.fromkeys(count, 0)
    for field, line, msg in lines:
        key = (_INDEX.sub(".*", field), msg)
        seen[key] += 1
        if seen[key] <= SAME_ERRORS_SHOWN:
            out.append(line)
        elif seen[key] == SAME_ERRORS_SHOWN + 1:
            more = count[key] - SAME_ERRORS_SHOWN
            out.append(f"{name}: {key[0]}: {msg} ({more:,} more items)")
    return out
