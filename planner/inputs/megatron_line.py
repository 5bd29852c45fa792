"""A Megatron-LM command line or launch script as flags and their values.

The text is split like a shell would (comments, quotes, `\\` continuations), simple
`NAME=value` assignments are substituted into `$NAME` / `${NAME}`, and each `--flag` collects the
words up to the next one (`--flag=value` too; a flag given twice keeps its last values, as
argparse does). `Line` hands the values to the reader (`megatron_args`), records which flags it
looked at, and refuses a value that is still a shell variable.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import TypeVar

from planner.inputs.errors import InputError
from planner.inputs.megatron_flags import READ

_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
T = TypeVar("T")


def tokens(text: str) -> list[str]:
    """Shell-like words of a script: comments dropped, `\\` continuations joined, simple
    `NAME=value` assignments substituted into later `$NAME` / `${NAME}`."""
    return _scan(text)[0]


def script(text: str) -> tuple[list[str], dict[str, str]]:
    """A script's words (`tokens`) and the variables it sets for the run: its `NAME=value` (or
    `export NAME=value`) lines and the `NAME=value` words before a command, the later setting
    winning."""
    words, env = _scan(text)
    for w in words:
        if w.startswith("--"):
            break
        m = _ASSIGN.match(w)
        if m:
            env[m.group(1)] = m.group(2).strip("\"'")
    return words, env


def _scan(text: str) -> tuple[list[str], dict[str, str]]:
    env: dict[str, str] = {}
    words: list[str] = []

    def sub(m: re.Match[str]) -> str:
        return env.get(m.group(1) or m.group(2), m.group(0))

    for line in re.sub(r"\\\r?\n", " ", text).splitlines():
        m = _ASSIGN.match(line)
        if m:
            env[m.group(1)] = m.group(2).strip("\"'")
            continue
        try:
            words += shlex.split(_VAR.sub(sub, line), comments=True)
        except ValueError as e:
            raise InputError(f"cannot split the line {line.strip()!r}: {e}") from None
    return words, env


def flags_of(words: list[str]) -> dict[str, list[str]]:
    """--flag -> the values that follow it (up to the next --flag); --a=b is split too. A flag
    given twice keeps its last values, as argparse does."""
    out: dict[str, list[str]] = {}
    current: str | None = None
    for w in words:
        if w.startswith("--"):
            name, _, value = w.partition("=")
            current = name
            out[current] = [value] if value else []
        elif current is not None:
            out[current].append(w)
    return out


class Line:
    """The flags of one command line; records which ones the reader looked at."""

    def __init__(self, flags: dict[str, list[str]], where: str) -> None:
        self.flags = flags
        self.where = where
        self.used: set[str] = set()

    def _use(self, flag: str) -> None:
        assert flag in READ, f"{flag} is read but not listed in megatron_flags.READ"
        self.used.add(flag)

    def has(self, flag: str) -> bool:
        self._use(flag)
        return flag in self.flags

    def words(self, flag: str) -> list[str] | None:
        """The values of a flag (None when absent); a value that is still a shell variable is
        an error: the reader cannot know it."""
        if not self.has(flag):
            return None
        values = self.flags[flag]
        for v in values:
            if "$" in v:
                raise InputError(
                    f"{self.where}: {flag}: {v!r} is a shell variable the file does not set"
                )
        return values

    def text(self, flag: str) -> str | None:
        values = self.words(flag)
        if values is None:
            return None
        if not values:
            raise InputError(f"{self.where}: {flag}: expected a value (got nothing)")
        return values[0]

    def integer(self, flag: str) -> int | None:
        return self._convert(flag, int, "an integer")

    def number(self, flag: str) -> float | None:
        return self._convert(flag, float, "a number")

    def _convert(self, flag: str, kind: Callable[[str], T], what: str) -> T | None:
        value = self.text(flag)
        if value is None:
            return None
        try:
            return kind(value)
        except ValueError:
            raise InputError(f"{self.where}: {flag}: expected {what} (got {value!r})") from None

    def raw(self, flag: str) -> str | None:
        """A value the reader only quotes in messages (a path; shell variables allowed)."""
        self._use(flag)
        values = self.flags.get(flag)
        return values[0] if values else None


def no_flags(words: list[str]) -> str:
    """Why a text with no --flag at all cannot be read."""
    if any(re.match(r"^[A-Za-z_]\w*(\.\w+)+(=|$)", w) for w in words):
        return (
            "no Megatron-LM flags: NeMo-style `key=value` overrides (trainer.*, model.*) are "
            "not Megatron-LM arguments"
        )
    return "no Megatron-LM flags (--num-layers, --hidden-size, ...) found"
