"""A launch script read as bash would run it, without running anything (`commands`): the words of
the commands it would launch, with its variables and arrays expanded
(`planner.inputs.shell_expand`), and the variables it sets.

What is run: assignments (`NAME=value`, `NAME+=value`, arrays `NAME=( ... )` and
`NAME+=( ... )`, also after `export`, `declare`, `local`, `readonly`, `typeset`); `if` / `elif`
on `[ ]`, `[[ ]]` and `test` (string and integer comparisons, `-z`, `-n`), with unset variables
empty as bash has them, so that the script's own defaults decide; `case` likewise; `&&` / `||`
after such tests; functions, called with their arguments; `bash -c "..."` strings; `source` /
`.` of a file that `Run.files` reads (the CLI: the local disk), in this scope; `for` loops on
every item, the commands launched from their first item's pass alone; a name the file assigns
on a path it does not take expands to nothing, as in bash (`Scope.assigned`). A condition on
what cannot be known (`$(command)`, a file test) takes its first branch (`if`: the `then`
branch; `case`: the `*` pattern where there is one); `while` / `until` bodies run once.

Collected: every simple command's words but those of `echo`, `printf` and the shell's and
coreutils' own commands (`NOT_LAUNCHES`): `torchrun ...`, `python pretrain_gpt.py ...`,
`srun ...`, and a file that is nothing but `--flag value` lines, alike.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.inputs.shell_expand import Scope, Value, expand_all, one
from planner.inputs.shell_parse import (
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


@dataclass
class Run(Scope):
    """What reading a script found: the launched commands' words and the variables set (its
    `Scope`), and what a command and a function call need besides."""

    commands: list[list[str]] = field(default_factory=list)
    command_env: dict[str, str] = field(default_factory=dict)
    """`NAME=value` words before a collected command (its environment)."""
    functions: dict[str, list[Node]] = field(default_factory=dict)
    depth: int = 0
    passes: int = 0
    """Loop-body passes run so far (MAX_LOOP_PASSES)."""
    files: Files | None = None
    """Reads a file `source` / `.` names (its text, None where there is none to read); None:
    sourced files are not followed."""


Files = Callable[[str], str | None]
"""A path -> the file's text, or None where there is no file to read."""


def commands(text: str, script: str | None = None, files: Files | None = None) -> Run:
    """The script's launched commands and variables (module docstring); `script` its path
    (`$0`), `files` what reads the files it sources."""
    nodes = parse(text)
    run = Run(script=script, files=files, assigned=assigned_names(nodes))
    _block(nodes, run)
    return run


def assigned_names(nodes: list[Node]) -> frozenset[str]:
    """The names the nodes assign a value anywhere (`NAME=value`, `NAME+=( ... )`, after
    `export` / `local` too; a `for` loop's variable), on any path, in functions too
    (`Scope.assigned`). `read` and `mapfile` targets are not among them: what they hold is not
    known, not empty."""
    out: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, Simple):
            out.update(name for name, _, _ in node.assigns)
        elif isinstance(node, Chain):
            stack += node.parts
        elif isinstance(node, If):
            stack += [n for cond, body in node.branches for n in (*cond, *body)]
            stack += node.otherwise
        elif isinstance(node, Case):
            stack += [n for _, body in node.items for n in body]
        elif isinstance(node, Loop):
            if node.kind in ("for", "select"):
                out.add(node.var)
            stack += [*node.cond, *node.body]
        elif isinstance(node, Group | Function):
            stack += node.body
    return frozenset(out)


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
        return expand_all(raws, run)
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
        if any(fnmatch.fnmatchcase(word, one(a, run)) for a in alternatives):
            return _block(body, run)
    return True


MAX_LOOP_ITEMS = 1024
"""The most items of a `for` loop whose body is run (a longer list: its first ones)."""

MAX_LOOP_PASSES = 1 << 14
"""The most loop-body passes a read runs over all its loops (nested loops multiply): past it, a
loop runs its first item only, as every loop did before."""


def _loop(node: Loop, run: Run) -> bool | None:
    """A `for` loop's body run for each item (up to MAX_LOOP_ITEMS: what it assigns accumulates
    as bash has it, `ARGS="$ARGS --$kv"`), the commands it launches collected from its first
    item's pass alone (a sweep that launches a run per item is read as its first run); a `while`
    / `until` body once, where its condition is not false."""
    if node.kind not in ("for", "select"):
        return True if _block(node.cond, run) is False else _block(node.body, run)
    items = expand_all(node.items, run) if node.items is not None else list(run.args or [])
    status: bool | None = True
    for k, item in enumerate(items[:MAX_LOOP_ITEMS]):
        if k and run.passes >= MAX_LOOP_PASSES:
            break
        run.passes += 1
        run.env[node.var] = item
        launched, env = len(run.commands), dict(run.command_env)
        status = _block(node.body, run)
        if k:  # the first pass's commands alone
            del run.commands[launched:]
            run.command_env = env
    return status


def _simple(node: Simple, run: Run) -> bool | None:
    if node.words and node.words[0] in ("[", "[[", "test"):
        return _test(_blank(node.words[1:], run))
    words = expand_all(node.words, run)
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
            run.command_env[name] = one(value, run)
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
    if name in ("source", ".") and len(words) > 1:
        return _source(words[1], words[2:], run)
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
            nodes = parse(words[i + 2])
            # bash -c 'STRING' NAME ARGS...: NAME is its $0 (else the shell's own), ARGS its
            # positional parameters ("$@", $1, ...; none without), as bash binds them
            inner = Run(
                env=dict(run.env),
                functions=run.functions,
                args=words[i + 4 :],
                files=run.files,
                script=words[i + 3] if i + 3 < len(words) else w,
            )
            inner.assigned = run.assigned | assigned_names(nodes)
            _block(nodes, inner)
            run.commands += inner.commands
            run.command_env.update(inner.command_env)
            return None
    run.commands.append(words)
    return None


def _source(path: str, args: list[str], run: Run) -> bool | None:
    """`source PATH ARGS`: the file's commands run here, in this scope (its `$0` / BASH_SOURCE
    its own path, its positional parameters ARGS where given), where `Run.files` reads it."""
    if run.files is None or "$" in path or "`" in path or run.depth >= MAX_CALL_DEPTH:
        return None
    text = run.files(path)
    if text is None:
        return None
    saved = run.script, run.args
    run.script, run.args = path, (args or run.args)
    run.depth += 1
    nodes = parse(text)
    run.assigned |= assigned_names(nodes)
    try:
        return _block(nodes, run)
    finally:
        (run.script, run.args), run.depth = saved, run.depth - 1


MAX_VALUE_CHARS = 1 << 16
"""The most characters a variable's value (an array's, all its elements) holds: past it the
value is not known, kept as the variable's own `${NAME}` text as an unset one is. No Megatron
setting is that long, and a value that keeps its unset parts' text can double with each line
(`a=${a}${a}`: a fuzzer's 30 lines took 25 s and gigabytes)."""


def _assign(run: Run, name: str, append: bool, value: Value) -> None:
    if isinstance(value, list):
        elements = expand_all(value, run)
        old = run.env.get(name)
        base = (old if isinstance(old, list) else [old]) if append and old is not None else []
        _set(run, name, base + elements)
        return
    text = one(value, run)
    old = run.env.get(name)
    if append and isinstance(old, list):
        _set(run, name, [*old, text])
    elif append and isinstance(old, str):
        _set(run, name, old + text)
    else:
        _set(run, name, text)


def _set(run: Run, name: str, value: Value) -> None:
    """The variable set, or not known where its value passes MAX_VALUE_CHARS."""
    size = len(value) if isinstance(value, str) else sum(map(len, value))
    run.env[name] = value if size <= MAX_VALUE_CHARS else f"${{{name}}}"


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
