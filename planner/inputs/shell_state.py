"""What reading a launch script as bash runs it (`planner.inputs.shell_run`) keeps as it goes
(`Run`), which commands launch nothing, and a way back (`save` / `restore`) from a path planner
took on a guess and bash may not (`planner.inputs.shell_exit`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from planner.inputs.shell_exit import Exits
from planner.inputs.shell_expand import Scope, Value
from planner.inputs.shell_parse import Loop, Node, Simple, walk
from planner.inputs.shell_stop import Stopped, Stops

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

Files = Callable[[str], str | None]
"""A path -> the file's text, or None where there is no file to read."""


@dataclass
class Run(Scope):
    """What reading a script found: the launched commands' words and the variables set (its
    `Scope`), and what a command and a function call need besides."""

    commands: list[list[str]] = field(default_factory=list)
    command_env: dict[str, str] = field(default_factory=dict)
    """`NAME=value` words before a collected command (its environment)."""
    functions: dict[str, list[Node]] = field(default_factory=dict)
    depth: int = 0
    """Function calls and sourced files nested (MAX_CALL_DEPTH)."""
    nest: int = 0
    """Function calls nested (FUNCNEST: `planner.inputs.shell_exit`)."""
    passes: int = 0
    """Loop-body passes run so far (`shell_loops.MAX_LOOP_PASSES`)."""
    files: Files | None = None
    """Reads a file `source` / `.` names (its text, None where there is none to read); None:
    sourced files are not followed."""
    stopped: Stopped | None = None
    """Where bash stops before the file's end, and what it does there (`shell_stop`)."""
    last: bool | None = True
    """The status of the last command run (`exit` / `return` without a number)."""
    guessed: bool = False
    """The way taken so far rests on a guess (`sure`): a value set since may be another on the
    way bash takes, and a condition on it decides nothing for sure."""


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


@dataclass(frozen=True)
class Saved:
    """A `Run` as it was (`save`)."""

    launched: int
    command_env: dict[str, str]
    env: dict[str, Value]
    functions: dict[str, list[Node]]
    gone: frozenset[str]
    args: list[str] | None


def save(run: Run) -> Saved:
    return Saved(
        len(run.commands),
        dict(run.command_env),
        dict(run.env),
        dict(run.functions),
        frozenset(run.gone),
        run.args,
    )


def restore(run: Run, saved: Saved) -> None:
    """`run` as it was when `saved`: what it launched, assigned, defined and unset since undone
    (in place: a `bash -c` string's run shares the functions)."""
    del run.commands[saved.launched :]
    run.command_env.clear()
    run.command_env.update(saved.command_env)
    run.env.clear()
    run.env.update(saved.env)
    run.functions.clear()
    run.functions.update(saved.functions)
    run.gone.clear()
    run.gone.update(saved.gone)
    run.args = saved.args


def guess(run: Run, step: Callable[..., bool | None], *args: Any) -> tuple[Exits | None, Any]:
    """`step(*args)` on a way taken on a guess: where it ends the shell, the call or the file
    (`shell_exit`) having launched no run (a command with a `--flag` or a Python file:
    `python -c "import x" || exit 1` launches none), undone, and (its `Exits`, None); else
    (None, its status)."""
    saved = save(run)
    try:
        return None, step(*args)
    except Exits as stop:
        new = run.commands[saved.launched :]
        if any(w.startswith("--") or w.endswith(".py") for c in new for w in c):
            raise
        restore(run, saved)
        return stop, None


def sure(run: Run, decided: bool, guesses: int) -> bool:
    """Whether the way a condition takes is bash's for sure: the way so far is (`Run.guessed`),
    and the condition was `decided` with no guess since `guesses` (`Scope.guesses`); where not,
    the way is a guess from here on."""
    run.guessed |= not decided or run.guesses != guesses
    return not run.guessed


def ends(run: Run, step: Callable[..., bool | None], *args: Any) -> bool:
    """Whether `step(*args)` ends the shell, the call or the file (any `Stops`), `run` left as
    it was either way."""
    saved = save(run)
    try:
        step(*args)
        return False
    except Stops:
        return True
    finally:
        restore(run, saved)
