"""What ends a shell, a function call or a sourced file early, in a launch script read as bash
runs it (`planner.inputs.shell_run`): `exit`, `return`, `exec` and FUNCNEST, as `Exits`.

Bash 5.2.15, each checked by running it (tests/inputs/test_shell_exits.py runs them):

- `exit [N]`: the shell ends, with status N (the last command's without N; 2 where N is not a
  number); nothing after it runs, in a function or a sourced file too. In a subshell (`( ... )`,
  a pipeline's part, `$( ... )`, `bash -c`) only that shell ends, and its status is N;
- `return [N]`: the innermost function call or sourced file ends, with status N. At a script's
  top level (or a `bash -c` string's) bash prints "return: can only `return' from a function or
  sourced script" and goes on, with status 1;
- `exec COMMAND`: the command replaces the shell, which runs nothing after it (a non-interactive
  shell exits where the command is not found, too). `exec` with redirections alone goes on;
- FUNCNEST=N, N a positive integer (0, a negative number or a word: no limit): a call N deep
  fails, "f: maximum function nesting level exceeded (N)", and bash discards the rest of the
  complete command it is reading (`shell_parse.parse_units`: the script's, a sourced file's,
  an `eval` or `bash -c` string's) and goes on with the next one; in a subshell the subshell
  ends. Planner follows calls `shell_run.MAX_CALL_DEPTH` deep: with FUNCNEST past that a
  recursion stops the read (`shell_stop.recursion`), as it does without FUNCNEST.

Which of them the script reaches: where a condition planner decides by a guess (`Scope.guesses`:
a name the environment may set, a command's status) leads to one that launched nothing (a
guard: `[ -z "$DATA" ] && exit 1`, `cd "$DIR" || exit`), planner takes the other way, the one
on which the script goes on (`shell_run`); where every way ends, the script ends.
"""

from __future__ import annotations

from planner.inputs.shell_stop import Stops


class Exits(Stops):
    """The shell, the function call or the sourced file ends here (module docstring): `kind`
    exit, exec, return or funcnest, `status` its status (True 0, False another, None not
    known)."""

    def __init__(self, what: str, kind: str, status: bool | None) -> None:
        super().__init__(what)
        self.kind = kind
        self.status = status


def status(words: list[str], last: bool | None) -> bool | None:
    """`exit` / `return` WORDS's status: the number's (bash takes it modulo 256; a word that is
    not a number: 2), the last command's where there is none, None where it is not known."""
    if len(words) < 2:
        return last
    word = words[1]
    if "$" in word or "`" in word:
        return None
    try:
        return int(word.strip()) % 256 == 0
    except ValueError:
        return False


def _said(words: list[str]) -> str:
    return " ".join(words) if len(" ".join(words)) <= 60 else " ".join(words)[:57] + "..."


def exited(words: list[str], last: bool | None) -> Exits:
    """`exit [N]`."""
    return Exits(
        f"`{_said(words)}`: bash exits here and runs nothing after it", "exit", status(words, last)
    )


def returned(words: list[str], last: bool | None) -> Exits:
    """`return [N]` in a function call or a sourced file."""
    return Exits(f"`{_said(words)}`", "return", status(words, last))


def execs(words: list[str]) -> Exits:
    """`exec COMMAND`: the shell ends once the command has replaced it."""
    return Exits(
        f"`exec {_said(words)}`: the command replaces bash, which runs nothing after it",
        "exec",
        None,
    )


def exec_command(words: list[str]) -> list[str]:
    """What `exec WORDS` runs: its options (`-c`, `-l`, `-a NAME`) and process substitutions
    (`exec > >(tee log)`, read as a word `(tee log)`) off; nothing where it only redirects."""
    words = [w for w in words if not w.startswith("(")]
    while words and words[0] in ("-c", "-l", "-cl", "-lc", "-a", "--"):
        words = words[2:] if words[0] == "-a" else words[1:]
    return words


def funcnest(value: object) -> int | None:
    """FUNCNEST's limit on nested calls: None where there is none (unset, not a positive
    integer) or it is not known."""
    if not isinstance(value, str) or "$" in value or "`" in value:
        return None
    try:
        limit = int(value.strip())
    except ValueError:
        return None
    return limit if limit > 0 else None


def nested(name: str, limit: int) -> Exits:
    """A call to `name` FUNCNEST (`limit`) calls deep: bash discards the rest of the complete
    command (module docstring)."""
    return Exits(f"{name}: maximum function nesting level exceeded ({limit})", "funcnest", False)
