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
branch; `case`: the `*` pattern where there is one); `while` / `until` loops run while their
condition is known to hold (`shift` and `unset` followed), once where it is not known or a
`break` / `return` is in them. Where bash stops before the file's end (a syntax error, `${X:?}`
on a name the file sets empty, a loop or a recursion planner cannot see end:
`planner.inputs.shell_stop`), the read stops there too (`Run.stopped`), with what ran before.

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

from planner.inputs import shell_stop
from planner.inputs.shell_cond import evaluate
from planner.inputs.shell_expand import Scope, expand_all, one
from planner.inputs.shell_expand import Value as Value
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
    Unparsed,
    parse,
    walk,
)
from planner.inputs.shell_stop import Stopped, Stops
from planner.inputs.shell_vars import MAX_VALUE_CHARS as MAX_VALUE_CHARS
from planner.inputs.shell_vars import assign, shift, unset

NOT_LAUNCHES = frozenset(
    {"echo", "printf", "cd", "pushd", "popd", "mkdir", "rm", "cp", "mv", "ln", "touch", "cat"}
    | {"ls", "unset", "set", "shift", "source", ".", "exit", "return", "wait", "sleep", "trap"}
    | {"read", "true", "false", "test", "[", "[[", "chmod", "tee", "date", "hostname", "export"}
    | {"local", "declare", "readonly", "typeset", "sed", "grep", "awk", "head", "tail", "sort"}
    | {"wc", "find", "basename", "dirname", "realpath", "readlink", "ulimit", "umask", "alias"}
    | {"shopt", "let", "nvidia-smi", "scontrol", "sinfo", "squeue", "wget", "curl", "git", "pip"}
    | {"pip3", "tar", "kill", "pkill", "ps", "which", "type", "command", "getopts", "mapfile"}
    | {"break", "continue"}
)
"""Commands that launch no training: their words are not collected."""

WRAPPERS = frozenset({"exec", "time", "nohup", "builtin"})
"""Words that run the rest of the command as the command."""

MAX_CALL_DEPTH = 16
"""Nested function calls followed (a recursive script stops there: `shell_stop.recursion`)."""

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
    stopped: Stopped | None = None
    """Where bash stops before the file's end, and what it does there (`shell_stop`)."""


Files = Callable[[str], str | None]
"""A path -> the file's text, or None where there is no file to read."""


def commands(text: str, script: str | None = None, files: Files | None = None) -> Run:
    """The script's launched commands and variables (module docstring); `script` its path
    (`$0`), `files` what reads the files it sources."""
    nodes = parse(text)
    run = Run(script=script, files=files, assigned=assigned_names(nodes))
    try:
        _block(nodes, run)
    except Stops as stop:
        run.stopped = Stopped(stop.line or 0, stop.file, stop.what)
    return run


def assigned_names(nodes: list[Node]) -> frozenset[str]:
    """The names the nodes assign a value anywhere (`NAME=value`, `NAME+=( ... )`, after
    `export` / `local` too; a `for` loop's variable), on any path, in functions too
    (`Scope.assigned`). `read` and `mapfile` targets are not among them: what they hold is not
    known, not empty."""
    out: set[str] = set()
    for node in walk(nodes):
        if isinstance(node, Simple):
            out.update(name for name, _, _ in node.assigns)
        elif isinstance(node, Loop) and node.kind in ("for", "select"):
            out.add(node.var)
    return frozenset(out)


def _block(nodes: list[Node], run: Run) -> bool | None:
    """Run the nodes in order; the last one's status (True success, False failure, None
    unknown)."""
    status: bool | None = True
    for node in nodes:
        try:
            status = _node(node, run)
        except Stops as stop:  # the line: the innermost command's
            stop.line = node.line if stop.line is None else stop.line
            raise
    return status


def _subshell(nodes: list[Node], run: Run) -> bool | None:
    """The nodes run in a subshell: where it exits (`shell_stop`), the script goes on."""
    try:
        return _block(nodes, run)
    except Stops as stop:
        if stop.hangs:
            raise
        return False


def _node(node: Node, run: Run) -> bool | None:
    if isinstance(node, Simple):
        return _simple(node, run)
    if isinstance(node, Unparsed):
        stop = shell_stop.unclosed(node.closes)
        stop.line = node.line
        raise stop
    if isinstance(node, Chain):
        status = _subshell(node.parts[:1], run) if 0 in node.piped else _node(node.parts[0], run)
        for k, (op, part) in enumerate(zip(node.ops, node.parts[1:], strict=False), 1):
            if (op == "&&" and status is False) or (op == "||" and status is True):
                continue
            status = _subshell([part], run) if k in node.piped else _node(part, run)
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
        return _subshell(node.body, run) if node.subshell else _block(node.body, run)
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
    / `until` loop by `_while`."""
    if node.kind not in ("for", "select"):
        return _while(node, run)
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


def _while(node: Loop, run: Run) -> bool | None:
    """A `while` / `until` loop run pass by pass while its condition is known to hold (the
    commands launched from its first pass alone, as a `for` loop's); one pass where the
    condition is not known or a `break` / `return` may end it (`shell_stop.breaks_out`).
    Still holding after MAX_LOOP_ITEMS passes (or past MAX_LOOP_PASSES): `shell_stop.endless`."""
    ends = node.kind == "until"  # the condition's status that ends the loop
    may_break = shell_stop.breaks_out([*node.cond, *node.body])
    status: bool | None = True
    for k in range(MAX_LOOP_ITEMS + 1):
        launched, env = len(run.commands), dict(run.command_env)
        try:
            cond = _block(node.cond, run)
            if cond is ends or (k and cond is None):
                return status
            if k and (k == MAX_LOOP_ITEMS or run.passes >= MAX_LOOP_PASSES):
                raise shell_stop.endless(node.kind, k)
            run.passes += 1
            status = _block(node.body, run)
        finally:
            if k:  # the first pass's commands alone
                del run.commands[launched:]
                run.command_env = env
        if cond is None or may_break:
            return status
    return status


def _simple(node: Simple, run: Run) -> bool | None:
    if node.words and node.words[0] in ("[", "[[", "test"):
        return evaluate(_blank(node.words[1:], run))
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
            assign(run, name, append, value)
        return True
    for name, _, value in node.assigns:  # the command's own environment
        if isinstance(value, str):
            run.command_env[name] = one(value, run)
    return _command(words, run)


def _command(words: list[str], run: Run) -> bool | None:
    name = os.path.basename(words[0])
    if name in ("true", ":"):
        return True
    if name == "false":
        return False
    if name in ("shift", "unset"):
        return shift(words, run) if name == "shift" else unset(words, run, run.functions)
    if words[0] in run.functions:
        if run.depth >= MAX_CALL_DEPTH:
            raise shell_stop.recursion(words[0], run.depth)
        saved, run.args = run.args, words[1:]
        run.depth += 1
        try:
            return _block(run.functions[words[0]], run)
        finally:
            run.args, run.depth = saved, run.depth - 1
    if name in ("source", ".") and len(words) > 1:
        return _source(words[1], words[2:], run)
    if name == "eval":
        return _eval(words[1:], run)
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
            try:  # a shell of its own: where it exits, this one goes on (a loop holds both)
                _subshell(nodes, inner)
            except Stops as stop:
                stop.line = stop.file = None  # the line of the `bash -c` command
                raise
            finally:
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
    except Stops as stop:  # a syntax error ends the sourced file alone (bash: status 2)
        if stop.syntax:
            return False
        stop.file = path if stop.file is None else stop.file
        raise
    finally:
        (run.script, run.args), run.depth = saved, run.depth - 1


def _eval(words: list[str], run: Run) -> bool | None:
    """`eval WORDS`: their commands collected (read in a scope of their own); a syntax error
    ends the string alone, as in bash (`shell_stop`)."""
    nodes = parse(" ".join(words))
    nested = Run(assigned=assigned_names(nodes))
    try:
        _block(nodes, nested)
    except Stops as stop:
        if not stop.syntax:
            stop.line = None  # the line of the `eval` command
            raise
        return False
    finally:
        run.commands += nested.commands
    return None
