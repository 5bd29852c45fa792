"""A launch script's loops read as bash runs them, for `planner.inputs.shell_run` (`loop`, which
runs a body with the reader's `Block`): `for` over its items, `while` / `until` while their
condition is known to hold, bounded (MAX_LOOP_ITEMS, MAX_LOOP_PASSES, `shell_stop.endless`).
"""

from __future__ import annotations

from collections.abc import Callable

from planner.inputs import shell_stop
from planner.inputs.shell_expand import expand_all
from planner.inputs.shell_parse import Loop, Node
from planner.inputs.shell_state import Run, guess, sure

Block = Callable[[list[Node], Run], bool | None]
"""Runs a list of commands, their status (`shell_run`)."""

MAX_LOOP_ITEMS = 1024
"""The most items of a `for` loop whose body is run (a longer list: its first ones)."""

MAX_LOOP_PASSES = 1 << 14
"""The most loop-body passes a read runs over all its loops (nested loops multiply): past it, a
loop runs its first item only, as every loop did before."""


def loop(node: Loop, run: Run, block: Block) -> bool | None:
    """A `for` loop's body run for each item (up to MAX_LOOP_ITEMS: what it assigns accumulates
    as bash has it, `ARGS="$ARGS --$kv"`), the commands it launches collected from its first
    item's pass alone (a sweep that launches a run per item is read as its first run); a `while`
    / `until` loop by `_while`."""
    if node.kind not in ("for", "select"):
        return _while(node, run, block)
    items = expand_all(node.items, run) if node.items is not None else list(run.args or [])
    status: bool | None = True
    for k, item in enumerate(items[:MAX_LOOP_ITEMS]):
        if k and run.passes >= MAX_LOOP_PASSES:
            break
        run.passes += 1
        run.env[node.var] = item
        launched, env = len(run.commands), dict(run.command_env)
        try:
            status = block(node.body, run)
        finally:
            if k:  # the first pass's commands alone
                del run.commands[launched:]
                run.command_env = env
    return status


def _while(node: Loop, run: Run, block: Block) -> bool | None:
    """A `while` / `until` loop run pass by pass while its condition is known to hold (the
    commands launched from its first pass alone, as a `for` loop's); one pass where the
    condition is not known (undone where that pass ends the shell having launched nothing) or a
    `break` / `return` may end it (`shell_stop.breaks_out`). Still holding after MAX_LOOP_ITEMS
    passes (or past MAX_LOOP_PASSES): `shell_stop.endless`."""
    ends = node.kind == "until"  # the condition's status that ends the loop
    may_break = shell_stop.breaks_out([*node.cond, *node.body])
    status: bool | None = True
    for k in range(MAX_LOOP_ITEMS + 1):
        launched, env = len(run.commands), dict(run.command_env)
        try:
            guesses = run.guesses
            cond = block(node.cond, run)
            if cond is ends or (k and cond is None):
                return status
            if k and (k == MAX_LOOP_ITEMS or run.passes >= MAX_LOOP_PASSES):
                raise shell_stop.endless(node.kind, k)
            run.passes += 1
            if k == 0 and not sure(run, cond is not None, guesses):
                ended, status = guess(run, block, node.body, run)
                if ended is not None:
                    return True
            else:
                status = block(node.body, run)
        finally:
            if k:  # the first pass's commands alone
                del run.commands[launched:]
                run.command_env = env
        if cond is None or may_break:
            return status
    return status
