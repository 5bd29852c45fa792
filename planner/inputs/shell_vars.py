"""The builtins and assignments that change a launch script's variables, for
`planner.inputs.shell_run`: `NAME=value`, `NAME+=value` and arrays (`assign`, values past
MAX_VALUE_CHARS not known), `shift` and `unset`.
"""

from __future__ import annotations

from typing import Any

from planner.inputs.shell_expand import Scope, Value, expand_all, one


def shift(words: list[str], run: Scope) -> bool | None:
    """`shift [N]` in a function call: its first N arguments dropped (none where it has fewer:
    bash's status 1); at the script's top level its arguments are not known."""
    if run.args is None or len(words) > 2 or not all(w.isdecimal() for w in words[1:]):
        return None
    count = int(words[1]) if len(words) == 2 else 1
    if count > len(run.args):
        return False
    run.args = run.args[count:]
    return True


def unset(words: list[str], run: Scope, functions: dict[str, Any]) -> bool:
    """`unset [-v] NAME...` / `unset -f NAME...`, as bash 5.2 has it: `-v` the variables, `-f`
    the functions; neither, each name's variable, or its function where no variable has the
    name (one the file has not set is taken as not in the environment). A variable unset is
    unset whatever the environment held (`Scope.gone`). Both flags: bash's error, nothing
    unset."""
    flags, names = "", words[1:]
    while names and names[0].startswith("-") and names[0] != "-":
        flags, names = flags + names[0][1:], names[1:]
        if flags.endswith("-"):  # `--`: names follow
            break
    if "f" in flags and "v" in flags:
        return False
    plain = "v" not in flags and "f" not in flags
    for name in names:
        if "f" in flags or (plain and name not in run.env and name in functions):
            functions.pop(name, None)
        if "f" not in flags:
            run.env.pop(name, None)
            run.gone.add(name)
    return True


MAX_VALUE_CHARS = 1 << 16
"""The most characters a variable's value (an array's, all its elements) holds: past it the
value is not known, kept as the variable's own `${NAME}` text as an unset one is. No Megatron
setting is that long, and a value that keeps its unset parts' text can double with each line
(`a=${a}${a}`: a fuzzer's 30 lines took 25 s and gigabytes)."""


def assign(run: Scope, name: str, append: bool, value: Value) -> None:
    """`NAME=value` / `NAME+=value` (an array's elements where `value` is a list); the name
    `Scope.tainted` where the value took a guess (`${X:-d}` of a name the file does not set)."""
    guesses = run.guesses
    _assign(run, name, append, value)
    if run.guesses == guesses and not (append and name in run.tainted):
        run.tainted.discard(name)
    else:
        run.tainted.add(name)


def _assign(run: Scope, name: str, append: bool, value: Value) -> None:
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


def _set(run: Scope, name: str, value: Value) -> None:
    """The variable set, or not known where its value passes MAX_VALUE_CHARS."""
    size = len(value) if isinstance(value, str) else sum(map(len, value))
    run.env[name] = value if size <= MAX_VALUE_CHARS else f"${{{name}}}"
