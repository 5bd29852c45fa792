"""Where a launch script read as bash runs it (`planner.inputs.shell_run`) stops before its end:
what bash does there, as `Stops` (raised while reading) and `Stopped` (what the read found).

Bash, run on a file (bash 5.2.15, each checked by running it; tests/inputs/test_shell_stops.py
runs them):

- a quote the file never closes (`shell_parse.Unparsed`): "unexpected EOF while looking for
  matching `''", a syntax error; the commands before it ran, nothing from its command on;
- `${X:?message}` with X set empty (`X=`, `X=()`): bash prints "X: message" and exits. Where
  X is unset, bash exits only where the environment lacks it, which planner does not know: the
  read goes on, as it does for `${X?message}` (which exits on an unset X alone). Planner's own
  torchrun files require MASTER_ADDR so (tests/golden/launch-*.torchrun.sh line 29:
  `MASTER_ADDR="${MASTER_ADDR:?...}"`);
- a function that calls itself deeper than planner follows (`shell_run.MAX_CALL_DEPTH`):
  planner cannot see that the recursion ends; bash stops it at FUNCNEST where that is set (a
  FUNCNEST within planner's depth is followed: `planner.inputs.shell_exit`), and without it
  recurses until its stack overflows and the shell dies (SIGSEGV, exit 139);
- a `while` / `until` loop whose condition planner still finds true after every pass it runs,
  nothing in it breaking out (`breaks_out`): planner cannot see it end, and bash runs nothing
  after a loop that does not.

In a subshell (`( ... )`, a pipeline's part, `bash -c`) only that shell exits; a loop that does
not end holds the script there wherever it is; a sourced file's or an `eval` string's syntax
error ends that file or string alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.shell_parse import Node, Simple, walk


class Stops(Exception):
    """The script stops here (module docstring): `what` bash does, `line` where (None: the
    command being run, filled in as it propagates), `file` a sourced file's path (None: the
    script's own)."""

    def __init__(self, what: str, *, hangs: bool = False, syntax: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.hangs = hangs
        """A loop planner cannot see end: the script waits on the subshell that holds it."""
        self.syntax = syntax
        """A syntax error: it ends the file or `eval` string it is in, not the script."""
        self.line: int | None = None
        self.file: str | None = None


@dataclass(frozen=True)
class Stopped:
    """Where the read stopped and what bash does there."""

    line: int
    file: str | None
    what: str

    def __str__(self) -> str:
        return f"line {self.line}{f' of {self.file}' if self.file else ''}: {self.what}"


def unclosed(closes: str) -> Stops:
    """A quote opened on the line and never closed (`shell_parse.Unparsed`)."""
    quote = {"'": "'", '"': '"', "`": "`", ")": "$( or (", "}": "${"}.get(closes, closes)
    return Stops(
        f"the quote {quote} opened here is never closed: bash stops with a syntax error "
        f"(unexpected EOF while looking for matching `{closes}') and runs nothing from this "
        "command on",
        syntax=True,
    )


def required(whole: str, name: str, message: str, empty: bool = True) -> Stops:
    """`whole`, `${NAME:?message}`, on a name the file sets empty (`empty`), or `${NAME?message}`
    / `${NAME:?message}` on one it unsets (`unset NAME`)."""
    said = message or ("parameter null or not set" if ":?" in whole else "parameter not set")
    how = "set empty" if empty else "unset (`unset`)"
    return Stops(f"{whole} with {name} {how}: bash prints '{name}: {said}' and exits")


def endless(kind: str, passes: int) -> Stops:
    """A `while` / `until` loop still going after `passes` passes (module docstring)."""
    holds = "true" if kind == "while" else "false"
    return Stops(
        f"a `{kind}` loop planner cannot see end (its condition still {holds} after "
        f"{passes:,} passes, no `break` or `return` in it): bash gets past it only if it ends",
        hangs=True,
    )


def recursion(name: str, depth: int, funcnest: int | None = None) -> Stops:
    """A function call nested past `depth` calls (`funcnest`: the file's FUNCNEST, deeper)."""
    bash = (
        f"bash stops it at the file's FUNCNEST={funcnest} calls deep, deeper than planner "
        "follows, and goes on with the next command"
        if funcnest is not None
        else "bash stops it at FUNCNEST where that is set, and without it recurses until its "
        "stack overflows and the shell dies"
    )
    return Stops(
        f"`{name}` is called {depth} calls deep (a function that calls itself): planner cannot "
        f"see the recursion end; {bash}"
    )


def breaks_out(nodes: list[Node]) -> bool:
    """Whether a `break` or a `return` is among the nodes' commands, at any depth: a loop that
    holds one may end whatever its condition (planner does not follow which pass reaches it)."""
    return any(
        isinstance(n, Simple) and n.words[:1] in (["break"], ["return"]) for n in walk(nodes)
    )
