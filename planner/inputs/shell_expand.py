"""A shell word's expansion (`expand`), as bash makes it, for `planner.inputs.shell_run`:
quotes removed; `$NAME`, `${NAME}`, `${NAME:-word}` and the other default / alternative forms,
`${#NAME}`, `${NAME[@]}`, `"${NAME[@]}"` (one word per element), `${NAME[*]}`, `${NAME[i]}`,
`${NAME:offset:length}` (and of `$@` and arrays), `${NAME%suffix}` / `${NAME#prefix}`,
`${NAME,,}` / `${NAME^^}` (and `,` / `^`: the first letter), `$((arithmetic))` over known
integers (`**` too), `$0` / `${BASH_SOURCE[0]}` (the script's path, where known), and `$(...)`
of the commands that only rewrite a path (`dirname`, `basename`, `realpath`, `readlink -f`,
`cd DIR && pwd`); unquoted expansions split on whitespace.

What is not known stays as written (`Scope.blank_unset` aside), one word however many spaces it
holds: an unset variable, a positional parameter outside a function call, `$(command)`, backquotes
and arithmetic planner does not evaluate (`planner.inputs.shell_arith`) keep their `$...` text, so
that the reader of the words can say which value the file does not set. `${NAME:?message}` on a name
the file sets empty (or unsets) raises `shell_stop.Stops`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.inputs import shell_arith, shell_stop
from planner.inputs.shell_lex import lex
from planner.inputs.shell_pattern import first, trim

Value = str | list[str]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PARAM = re.compile(rf"^(#?)({_NAME}|[0-9]+|[@*#?$!])(\[[^]]*\])?(.*)$", re.S)


@dataclass
class Scope:
    """What expansion reads: the variables set so far and the positional parameters."""

    env: dict[str, Value] = field(default_factory=dict)
    args: list[str] | None = None
    """The positional parameters inside a function call (None: the script's own, unknown)."""
    blank_unset: bool = False
    """Expand an unset variable as bash does, to nothing (a condition's operands, a case word:
    the branch the script takes when run as it is), rather than keep its text."""
    script: str | None = None
    """The path of the script being read, where known: `$0`, `${BASH_SOURCE[0]}`."""
    assigned: frozenset[str] = frozenset()
    """The names the file assigns somewhere (`planner.inputs.shell_run.assigned_names`): one of
    them unset where it is expanded was assigned only on a path the script did not take, and
    expands as bash expands it, to nothing (an unset name the file never assigns comes from the
    environment, and stays not known)."""
    gone: set[str] = field(default_factory=set)
    """The names `unset` unset: unset whatever the environment held, until set again."""
    guesses: int = 0
    """Expansions that took as unset a name the environment may set (`blank_unset`, a default),
    or read one set from such (`tainted`): a condition that made one is decided by a guess."""
    tainted: set[str] = field(default_factory=set)  # planner.inputs.shell_vars.assign


def expand_all(raws: list[str], run: Scope) -> list[str]:
    out: list[str] = []
    for raw in raws:
        out += expand(raw, run)
    return out


def one(raw: str, run: Scope) -> str:
    """A word expanded without splitting (an assignment's value, a case word)."""
    return " ".join(expand(raw, run, split=False))


def expand(raw: str, run: Scope, split: bool = True) -> list[str]:
    """The words one raw word becomes: quotes removed, expansions made (module docstring),
    unquoted expansions split on whitespace where `split`."""
    fields: list[str] = []
    cur: list[str] = []
    quoted = False  # the current field holds quoted text (kept even if empty)
    i, n = 0, len(raw)

    def push_split(text: str) -> None:
        nonlocal cur, quoted
        if not split:
            cur.append(text)
            return
        parts = _split(text)
        if not parts:
            return
        if text[:1].isspace() and (cur or quoted):
            fields.append("".join(cur))
            cur, quoted = [], False
        cur.append(parts[0])
        for p in parts[1:]:
            fields.append("".join(cur))
            cur, quoted = [p], False
        if text[-1:].isspace():
            fields.append("".join(cur))
            cur, quoted = [], False

    def push_many(elements: list[str]) -> None:  # "${A[@]}": one field per element
        for k, e in enumerate(elements):  # `cur` kept, not rebound: `_double` holds it
            if k:
                fields.append("".join(cur))
                cur.clear()
            cur.append(e)

    while i < n:
        c = raw[i]
        if c == "\\" and i + 1 < n:
            cur.append(raw[i + 1])
            i += 2
        elif c == "'":
            j = raw.find("'", i + 1)
            j = n if j < 0 else j
            cur.append(raw[i + 1 : j])
            quoted = True
            i = j + 1
        elif c == '"':
            quoted = True
            i = _double(raw, i + 1, run, cur, push_many)
        elif c == "$" or c == "`":
            value, j = _dollar(raw, i, run)
            if value == raw[i:j]:  # not known: its text kept whole, for the message to quote
                cur.append(value)
            else:
                push_split(" ".join(value) if isinstance(value, list) else value)
            i = j
        else:
            cur.append(c)
            i += 1
    if cur or quoted:
        fields.append("".join(cur))
    return fields


def _split(text: str) -> list[str]:
    """`text` split on whitespace, as bash splits an unquoted expansion's value, except inside
    an expansion planner kept as written (`$(...)`, `$((...))`, `${...}`, backquotes: a value
    that holds one is not known, and stays one word for the message that names it)."""
    if "$" not in text and "`" not in text:
        return text.split()
    out: list[str] = []
    cur: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            if cur:
                out.append("".join(cur))
                cur = []
            i += 1
            continue
        if c == "`":
            j = text.find("`", i + 1)
            j = n if j < 0 else j + 1
        elif text.startswith("$(", i) or text.startswith("${", i):
            j = _close(text, i + 1, text[i + 1], ")" if text[i + 1] == "(" else "}")
        else:
            j = i + 1
        cur.append(text[i:j])
        i = j
    if cur:
        out.append("".join(cur))
    return out


def _double(raw: str, i: int, run: Scope, cur: list[str], many: Callable[[list[str]], None]) -> int:
    """A double-quoted string from i (after its `"`) into `cur`; the index after it."""
    n = len(raw)
    while i < n and raw[i] != '"':
        c = raw[i]
        if c == "\\" and i + 1 < n and raw[i + 1] in '$`"\\\n':
            cur.append(raw[i + 1])
            i += 2
        elif c == "$" or c == "`":
            value, i = _dollar(raw, i, run)
            if isinstance(value, list):
                many(value)
            else:
                cur.append(value)
        else:
            cur.append(c)
            i += 1
    return i + 1


def _dollar(raw: str, i: int, run: Scope) -> tuple[Value, int]:
    """The expansion at i (`$...` or a backquote) and the index after it: its value, a list for
    `${A[@]}` / `$@`, or its own text where it is not known."""
    n = len(raw)
    if raw[i] == "`":
        j = raw.find("`", i + 1)
        j = n if j < 0 else j + 1
        return raw[i:j], j
    if raw.startswith("$((", i):
        end = _close(raw, i + 1, "(", ")")
        return _arith(raw[i + 3 : end - 2], run, raw[i:end]), end
    if raw.startswith("$(", i):
        end = _close(raw, i + 1, "(", ")")
        return _substitute(raw[i + 2 : end - 1], run, raw[i:end]), end
    if raw.startswith("${", i):
        end = _close(raw, i + 1, "{", "}")
        return _brace(raw[i + 2 : end - 1], run, raw[i:end]), end
    m = re.match(rf"\$({_NAME}|[0-9]|[@*#?$!])", raw[i:])
    if m is None:
        return "$", i + 1
    name = m.group(1)
    value = lookup(name, run)
    if isinstance(value, list) and name not in "@*":  # $A is ${A[0]}
        value = value[0] if value else ""
    return (_unknown(run, raw[i : i + m.end()], name) if value is None else value), i + m.end()


def not_known(word: str) -> str:
    """What the first expansion left as written in `word` (a `$` or a backquote) is, for a
    message: `'WORD' is ...`."""
    at = [k for k in (word.find("$"), word.find("`")) if k >= 0]
    i = min(at) if at else 0
    if word.startswith("$((", i):
        end = _close(word, i + 1, "(", ")")
        why = shell_arith.why(word[i + 3 : end - 2]) or "over values the file does not set"
        return f"shell arithmetic planner does not evaluate ({why})"
    if word.startswith("$(", i) or word[i : i + 1] == "`":
        return "a command's output, which planner does not run"
    return "a shell variable the file does not set"


def _close(raw: str, i: int, open_: str, close: str) -> int:
    depth, n = 0, len(raw)
    while i < n:
        if raw[i] == open_:
            depth += 1
        elif raw[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _unknown(run: Scope, whole: str, name: str) -> str:
    """An unset variable's expansion `whole`: nothing where it is taken as unset (`_unset`)."""
    return "" if _unset(run, name) else whole


def _unset(run: Scope, name: str) -> bool:
    """Whether an unset name is empty: after `unset`; a guess under `blank_unset` or where the
    file assigns it elsewhere (`Scope.assigned`). Else the environment may set it."""
    guess = name not in run.gone and (run.blank_unset or name in run.assigned)
    run.guesses += guess
    return guess or name in run.gone


def lookup(name: str, run: Scope) -> Value | None:
    if name == "0" or (name == "BASH_SOURCE" and name not in run.env):
        if run.script is None:
            return None
        return run.script if name == "0" else [run.script]
    if name.isdecimal():
        k = int(name)
        if run.args is None:
            return None
        return run.args[k - 1] if k <= len(run.args) else ""
    if name in ("@", "*"):
        return None if run.args is None else list(run.args)
    if name == "#":
        return None if run.args is None else str(len(run.args))
    run.guesses += name in run.tainted
    return run.env.get(name)


def _brace(body: str, run: Scope, whole: str) -> Value:
    """${body}: the parameter forms of the module docstring; `whole` where not known."""
    m = _PARAM.match(body)
    if m is None:
        return whole
    length, name, index, rest = m.groups()
    value = lookup(name, run)
    if index is not None and index not in ("[@]", "[*]"):
        if not isinstance(value, list):
            value = [value] if isinstance(value, str) else None
        if value is not None:
            try:
                k = int(index[1:-1])
                value = value[k] if -len(value) <= k < len(value) else ""
            except ValueError:
                return whole
    elif index is None and isinstance(value, list) and name not in "@*":
        value = value[0] if value else ""  # $A is ${A[0]}
    elif index == "[*]" and isinstance(value, list):
        value = " ".join(value)  # one word, where quoted
    if length:
        return ("0" if _unset(run, name) else whole) if value is None else str(len(value))
    return _operator(rest, value, name, run, whole)


def _operator(rest: str, value: Value | None, name: str, run: Scope, whole: str) -> Value:
    if rest == "":
        return _unknown(run, whole, name) if value is None else value
    part = re.match(r"^:(\d+|\s+-?\d+)(?::\s*(\d+))?$", rest)  # ${V:-2} is a default
    if part is not None:  # ${V:offset:length}, ${@:offset}, ${A[@]:offset}
        if value is None:
            return _unknown(run, whole, name)
        start = int(part.group(1))
        if name in "@*" and isinstance(value, list):  # $0 is not among them: offset 1 is $1
            start -= 1 if start > 0 else 0
        stop = None if part.group(2) is None else start + int(part.group(2))
        return value[start:stop]
    op = re.match(r"^(:?[-=+?])(.*)$", rest, re.S)
    if op is not None:
        kind, word = op.groups()
        empty = value is None or (kind.startswith(":") and value in ("", []))
        if value is None and name not in run.gone:
            run.guesses += 1  # the environment may set it
        if kind.endswith("+"):
            return "" if empty else one(word, run)
        if empty:
            if kind.endswith("?"):  # bash exits where the file sets the name empty (shell_stop)
                if value is not None or name in run.gone:
                    raise shell_stop.required(whole, name, one(word, run), value is not None)
                return whole
            text = one(word, run)
            if kind.endswith("="):
                run.env[name] = text
                run.tainted.add(name)  # the environment may set it
            return text
        return value if value is not None else whole
    if value is None or isinstance(value, list):
        return whole
    case = {",,": str.lower, "^^": str.upper, ",": first(str.lower), "^": first(str.upper)}
    if rest in case:  # ${V,,} ${V^^} ${V,} ${V^}: the case changed (all, or the first letter)
        return case[rest](value)
    cut = re.match(r"^(%%|%|##|#)(.*)$", rest, re.S)
    if cut is not None:
        how, pattern = cut.group(1), one(cut.group(2), run)
        return trim(value, how, pattern)
    return whole


def _arith(expr: str, run: Scope, whole: str) -> str:
    """$((expr)) over known integers, as bash computes it (`planner.inputs.shell_arith`);
    `whole` where not known. `$NAME` is the variable's text, a bare NAME its value as an
    expression of its own (bash: `X=2+3; $((X*2))` is 10, `$(($X*2))` 8)."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        v = lookup(name, run)
        if not isinstance(v, str):
            return m.group(0)
        return v if m.group(3) is None else f"({v})"

    dollar = rf"\$\{{({_NAME}|[0-9]+|#)\}}|\$({_NAME}|[0-9]|#)"  # $1, $#: a call's arguments
    text = re.sub(rf"{dollar}|(?<![0-9#])\b({_NAME})", value, expr)
    try:
        return str(shell_arith.evaluate(text))
    except shell_arith.Unknown:
        return whole


_PATH_COMMANDS = ("dirname", "basename", "realpath", "readlink", "pwd", "cd")


def _substitute(inner: str, run: Scope, whole: str) -> str:
    """$(command) where the command only rewrites a path it is given (`dirname`, `basename`,
    `realpath`, `readlink -f`, `cd DIR && pwd`): what it prints, the path kept relative as given
    (the same file from the same working directory); `whole` for anything else."""
    words = [t.text for t in lex(inner) if t.text != "\n"]
    if not words or words[0] not in _PATH_COMMANDS:
        return whole
    if words[0] == "cd" and words[-2:] == ["&&", "pwd"] and len(words) == 4:
        words = ["realpath", words[1]]
    elif any(w in ("&&", "||", ";", "|", "&") for w in words):
        return whole
    args = [one(w, run) for w in words[1:] if not w.startswith("-")]
    if len(args) != 1 or "$" in args[0] or "`" in args[0]:
        return whole
    path = args[0]
    if words[0] == "dirname":
        return os.path.dirname(path.rstrip("/")) or "."
    if words[0] == "basename":
        return os.path.basename(path.rstrip("/"))
    return os.path.normpath(path)
