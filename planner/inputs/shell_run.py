"""A launch script read as bash would run it, without running anything (`commands`): the words of
the commands it would launch, with its variables and arrays expanded, and the variables it sets.

What is evaluated: assignments (`NAME=value`, `NAME+=value`, arrays `NAME=( ... )` and
`NAME+=( ... )`, also after `export`, `declare`, `local`, `readonly`, `typeset`); expansions
`$NAME`, `${NAME}`, `${NAME:-word}` and the other default / alternative forms, `${#NAME}`,
`${NAME[@]}`, `"${NAME[@]}"` (one word per element), `${NAME[i]}`, `${NAME%suffix}` /
`${NAME#prefix}`, `$((arithmetic))` over known integers; word splitting of unquoted expansions;
`if` / `elif` on `[ ]`, `[[ ]]` and `test` of known values (string and integer comparisons,
`-z`, `-n`); `case` on a known word; `&&` / `||` after such tests; functions, called with their
arguments; `bash -c "..."` strings; `for` loops on their first item.

What cannot be known is kept as written, never guessed: an unset variable, a positional
parameter without a default, `$(command)` and backquotes stay literal `$...` text (the reader
then says which flag holds a value the file does not set); a condition on them takes its first
branch (`if`: the `then` branch; `case`: the `*` pattern where there is one); `while` / `until`
bodies run once.

Collected: every simple command's words but those of `echo`, `printf` and the shell's and
coreutils' own commands (`NOT_LAUNCHES`): `torchrun ...`, `python pretrain_gpt.py ...`,
`srun ...`, and a file that is nothing but `--flag value` lines, alike.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from dataclasses import dataclass, field

from planner.inputs.shell_lex import (
    DECLARES,
    Case,
    Chain,
    Function,
    Group,
    If,
    Loop,
    Node,
    Simple,
    parse,
)

Value = str | list[str]

NOT_LAUNCHES = frozenset(
    {"echo", "printf", "cd", "pushd", "popd", "mkdir", "rm", "cp", "mv", "ln", "touch", "cat"}
    | {"ls", "unset", "set", "shift", "source", ".", "exit", "return", "wait", "sleep", "trap"}
    | {"read", "true", "false", "test", "[", "[[", "chmod", "tee", "date", "hostname", "export"}
    | {"local", "declare", "readonly", "typeset", "sed", "grep", "awk", "head", "tail", "sort"}
    | {"wc", "find", "basename", "dirname", "realpath", "readlink", "ulimit", "umask", "alias"}
    | {"shopt", "let", "nvidia-smi", "scontrol", "sinfo", "squeue", "wget", "curl", "git", "pip"}
    | {"pip3", "tar", "kill", "pkill", "ps", "which", "type", "command", "getopts", "mapfile"}
)
"""Commands that launch no training: their words are not collected."""

WRAPPERS = frozenset({"exec", "time", "nohup", "builtin"})
"""Words that run the rest of the command as the command."""

MAX_CALL_DEPTH = 16
"""Nested function calls followed (a recursive script stops there)."""

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PARAM = re.compile(rf"^(#?)({_NAME}|[0-9]+|[@*#?$!])(\[[^]]*\])?(.*)$", re.S)
_ARITH = re.compile(r"^[0-9+\-*/%() ]*$")


@dataclass
class Run:
    """What reading a script found: the launched commands' words and the variables set."""

    commands: list[list[str]] = field(default_factory=list)
    env: dict[str, Value] = field(default_factory=dict)
    command_env: dict[str, str] = field(default_factory=dict)
    """`NAME=value` words before a collected command (its environment)."""
    functions: dict[str, list[Node]] = field(default_factory=dict)
    args: list[str] | None = None
    """The positional parameters inside a function call (None: the script's own, unknown)."""
    depth: int = 0
    blank_unset: bool = False
    """Expand an unset variable as bash does, to nothing (a condition's operands, a case word:
    the branch the script takes when run as it is), rather than keep its text."""


def commands(text: str) -> Run:
    """The script's launched commands and variables (module docstring)."""
    run = Run()
    _block(parse(text), run)
    return run


def _block(nodes: list[Node], run: Run) -> bool | None:
    """Run the nodes in order; the last one's status (True success, False failure, None
    unknown)."""
    status: bool | None = True
    for node in nodes:
        status = _node(node, run)
    return status


def _node(node: Node, run: Run) -> bool | None:
    if isinstance(node, Simple):
        return _simple(node, run)
    if isinstance(node, Chain):
        status = _node(node.parts[0], run)
        for op, part in zip(node.ops, node.parts[1:], strict=False):
            if (op == "&&" and status is False) or (op == "||" and status is True):
                continue
            status = _node(part, run)
        return status
    if isinstance(node, If):
        for cond, body in node.branches:
            taken = _block(cond, run)
            if taken is not False:  # true, or undecidable: the first such branch
                return _block(body, run)
        return _block(node.otherwise, run)
    if isinstance(node, Case):
        return _case(node, run)
    if isinstance(node, Loop):
        return _loop(node, run)
    if isinstance(node, Group):
        return _block(node.body, run)
    if isinstance(node, Function):
        run.functions[node.name] = node.body
        return True
    return None


def _blank(raws: list[str], run: Run) -> list[str]:
    """Words expanded with unset variables as nothing (`Run.blank_unset`)."""
    run.blank_unset = True
    try:
        return _expand_all(raws, run)
    finally:
        run.blank_unset = False


def _case(node: Case, run: Run) -> bool | None:
    word = " ".join(_blank([node.word], run))
    items = node.items
    if "$" in word or "`" in word:  # not known: the default pattern, else the first item
        chosen = next((b for p, b in items if "*" in p), items[0][1] if items else [])
        return _block(chosen, run)
    for patterns, body in items:
        alternatives = [a for p in patterns for a in p.split("|")]  # fp8|mxfp8)
        if any(fnmatch.fnmatchcase(word, _one(a, run)) for a in alternatives):
            return _block(body, run)
    return True


def _loop(node: Loop, run: Run) -> bool | None:
    if node.kind in ("for", "select"):
        items = _expand_all(node.items, run) if node.items is not None else list(run.args or [])
        if not items:
            return True
        run.env[node.var] = items[0]
    elif _block(node.cond, run) is False:
        return True
    return _block(node.body, run)


def _simple(node: Simple, run: Run) -> bool | None:
    if node.words and node.words[0] in ("[", "[[", "test"):
        return _test(_blank(node.words[1:], run))
    words = _expand_all(node.words, run)
    while words and words[0] in WRAPPERS:
        words = words[1:]
    if words and words[0] == "env":
        words = words[1:]
        while words and re.match(rf"^{_NAME}=", words[0]):
            key, _, setting = words[0].partition("=")
            run.command_env[key] = setting
            words = words[1:]
    if not words or os.path.basename(words[0]) in DECLARES:
        for name, append, value in node.assigns:
            _assign(run, name, append, value)
        return True
    for name, _, value in node.assigns:  # the command's own environment
        if isinstance(value, str):
            run.command_env[name] = _one(value, run)
    return _command(words, run)


def _command(words: list[str], run: Run) -> bool | None:
    name = os.path.basename(words[0])
    if name == "true":
        return True
    if name == "false":
        return False
    if words[0] in run.functions and run.depth < MAX_CALL_DEPTH:
        saved, run.args = run.args, words[1:]
        run.depth += 1
        try:
            return _block(run.functions[words[0]], run)
        finally:
            run.args, run.depth = saved, run.depth - 1
    if name == "eval":
        nested = commands(" ".join(words[1:]))
        run.commands += nested.commands
        return None
    if name in NOT_LAUNCHES:
        return None
    for i, w in enumerate(words[:-1]):  # bash -c "...": the string is the script
        if os.path.basename(w) in ("bash", "sh") and words[i + 1] == "-c" and i + 2 < len(words):
            if i:
                run.commands.append(words[:i])
            inner = Run(env=dict(run.env), functions=run.functions, args=run.args)
            _block(parse(words[i + 2]), inner)
            run.commands += inner.commands
            run.command_env.update(inner.command_env)
            return None
    run.commands.append(words)
    return None


def _assign(run: Run, name: str, append: bool, value: Value) -> None:
    if isinstance(value, list):
        elements = _expand_all(value, run)
        old = run.env.get(name)
        base = (old if isinstance(old, list) else [old]) if append and old is not None else []
        run.env[name] = base + elements
        return
    text = _one(value, run)
    old = run.env.get(name)
    if append and isinstance(old, list):
        run.env[name] = [*old, text]
    elif append and isinstance(old, str):
        run.env[name] = old + text
    else:
        run.env[name] = text


# --- tests ([ ], [[ ]], test)


def _test(args: list[str]) -> bool | None:
    """A test of known values; None where any operand is not known."""
    args = [a for a in args if a not in ("]", "]]")]
    if any("$" in a or "`" in a for a in args):
        return None
    for op in ("||", "-o"):
        if op in args:
            i = args.index(op)
            a, b = _test(args[:i]), _test(args[i + 1 :])
            return True if a or b else None if a is None or b is None else False
    for op in ("&&", "-a"):
        if op in args and args.index(op) > 0:
            i = args.index(op)
            a, b = _test(args[:i]), _test(args[i + 1 :])
            return False if a is False or b is False else None if a is None or b is None else True
    if args and args[0] == "!":
        inner = _test(args[1:])
        return None if inner is None else not inner
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2 and args[0] in ("-z", "-n"):
        return (args[1] == "") == (args[0] == "-z")
    if len(args) == 3:
        return _binary(*args)
    return None


def _binary(a: str, op: str, b: str) -> bool | None:
    if op in ("=", "=="):
        return fnmatch.fnmatchcase(a, b)
    if op == "!=":
        return not fnmatch.fnmatchcase(a, b)
    ints = {"-eq": int.__eq__, "-ne": int.__ne__, "-lt": int.__lt__, "-le": int.__le__}
    ints |= {"-gt": int.__gt__, "-ge": int.__ge__}
    if op in ints:
        try:
            return bool(ints[op](int(a), int(b)))
        except ValueError:
            return None
    return None


# --- expansion


def _expand_all(raws: list[str], run: Run) -> list[str]:
    out: list[str] = []
    for raw in raws:
        out += expand(raw, run)
    return out


def _one(raw: str, run: Run) -> str:
    """A word expanded without splitting (an assignment's value, a case word)."""
    return " ".join(expand(raw, run, split=False))


def expand(raw: str, run: Run, split: bool = True) -> list[str]:
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
        parts = text.split()
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
        nonlocal cur
        for k, e in enumerate(elements):
            if k:
                fields.append("".join(cur))
                cur = []
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
            value, i = _dollar(raw, i, run)
            push_split(" ".join(value) if isinstance(value, list) else value)
        else:
            cur.append(c)
            i += 1
    if cur or quoted:
        fields.append("".join(cur))
    return fields


def _double(raw: str, i: int, run: Run, cur: list[str], many: object) -> int:
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
                many(value)  # type: ignore[operator]
            else:
                cur.append(value)
        else:
            cur.append(c)
            i += 1
    return i + 1


def _dollar(raw: str, i: int, run: Run) -> tuple[Value, int]:
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
        return raw[i:end], end
    if raw.startswith("${", i):
        end = _close(raw, i + 1, "{", "}")
        return _brace(raw[i + 2 : end - 1], run, raw[i:end]), end
    m = re.match(rf"\$({_NAME}|[0-9]|[@*#?$!])", raw[i:])
    if m is None:
        return "$", i + 1
    name = m.group(1)
    value = _lookup(name, run)
    if isinstance(value, list) and name not in "@*":  # $A is ${A[0]}
        value = value[0] if value else ""
    return (_unknown(run, raw[i : i + m.end()]) if value is None else value), i + m.end()


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


def _unknown(run: Run, whole: str) -> str:
    """What an unset variable's expansion `whole` gives: nothing under `Run.blank_unset`, else
    its own text."""
    return "" if run.blank_unset else whole


def _lookup(name: str, run: Run) -> Value | None:
    if name.isdigit():
        k = int(name)
        if run.args is None or k == 0:
            return None
        return run.args[k - 1] if k <= len(run.args) else ""
    if name in ("@", "*"):
        return None if run.args is None else list(run.args)
    if name == "#":
        return None if run.args is None else str(len(run.args))
    return run.env.get(name)


def _brace(body: str, run: Run, whole: str) -> Value:
    """${body}: the parameter forms of the module docstring; `whole` where not known."""
    m = _PARAM.match(body)
    if m is None:
        return whole
    length, name, index, rest = m.groups()
    value = _lookup(name, run)
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
        return ("0" if run.blank_unset else whole) if value is None else str(len(value))
    return _operator(rest, value, name, run, whole)


def _operator(rest: str, value: Value | None, name: str, run: Run, whole: str) -> Value:
    if rest == "":
        return _unknown(run, whole) if value is None else value
    part = re.match(r"^:(\d+|\s+-?\d+)(?::\s*(\d+))?$", rest)  # ${V:-2} is a default
    if part is not None:  # ${V:offset:length}, ${@:offset}, ${A[@]:offset}
        if value is None:
            return _unknown(run, whole)
        start = int(part.group(1))
        if name in "@*" and isinstance(value, list):  # $0 is not among them: offset 1 is $1
            start -= 1 if start > 0 else 0
        stop = None if part.group(2) is None else start + int(part.group(2))
        return value[start:stop]
    op = re.match(r"^(:?[-=+?])(.*)$", rest, re.S)
    if op is not None:
        kind, word = op.groups()
        empty = value is None or (kind.startswith(":") and value in ("", []))
        if kind.endswith("+"):
            return "" if empty else _one(word, run)
        if empty:
            if kind.endswith("?"):
                return whole
            text = _one(word, run)
            if kind.endswith("="):
                run.env[name] = text
            return text
        return value if value is not None else whole
    if value is None or isinstance(value, list):
        return whole
    trim = re.match(r"^(%%|%|##|#)(.*)$", rest, re.S)
    if trim is not None:
        how, pattern = trim.group(1), _one(trim.group(2), run)
        return _trim(value, how, pattern)
    return whole


def _trim(value: str, how: str, pattern: str) -> str:
    """${V%p}, ${V%%p}, ${V#p}, ${V##p}: the shortest / longest matching suffix or prefix off."""
    cuts = range(len(value) + 1)
    if how.startswith("%"):
        order = reversed(cuts) if how == "%" else cuts
        for k in order:
            if fnmatch.fnmatchcase(value[k:], pattern):
                return value[:k]
        return value
    order = cuts if how == "#" else reversed(cuts)
    for k in order:
        if fnmatch.fnmatchcase(value[:k], pattern):
            return value[k:]
    return value


def _arith(expr: str, run: Run, whole: str) -> str:
    """$((expr)) over known integers (bash's integer arithmetic: + - * / %, parentheses);
    `whole` where not known."""

    def value(m: re.Match[str]) -> str:
        v = _lookup(m.group(1) or m.group(2), run)
        return v if isinstance(v, str) else m.group(0)

    text = re.sub(rf"\$\{{({_NAME})\}}|\$?({_NAME})", value, expr)
    if not _ARITH.match(text) or not text.strip():
        return whole
    try:
        return str(_integer(ast.parse(text.strip(), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return whole


_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: int(a / b) if b else a // b,
    ast.Mod: lambda a, b: a % b,
}


def _integer(node: ast.expr) -> int:
    """An integer expression's value; ValueError for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _integer(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return int(_BINARY[type(node.op)](_integer(node.left), _integer(node.right)))
    raise ValueError("not an integer expression")
