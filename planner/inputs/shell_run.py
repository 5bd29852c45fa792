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
`break` / `return` is in them. `exit`, `return`, `exec` and FUNCNEST end a shell, a call, a
sourced file or a command where bash ends them (`planner.inputs.shell_exit`); where a way taken
on a guess (`Run.guessed`, `Scope.guesses`) ends one having launched no run, the read takes
another. Where bash stops before the file's end (a syntax error, `${X:?}` on a name the file
sets empty or unsets, a loop or a recursion planner cannot see end: `planner.inputs.shell_stop`;
an `exit` or an `exec`), the read stops there too (`Run.stopped`; none for an `exit` in the
file's last command that leaves out nothing it may launch), with what ran before.

Collected: every simple command's words but those of `echo`, `printf` and the shell's and
coreutils' own commands (`NOT_LAUNCHES`): `torchrun ...`, `python pretrain_gpt.py ...`,
`srun ...`, and a file that is nothing but `--flag value` lines, alike.
"""

from __future__ import annotations

import fnmatch
import os
import re

from planner.inputs import shell_exit, shell_stop
from planner.inputs.shell_cond import evaluate
from planner.inputs.shell_exit import Exits
from planner.inputs.shell_expand import Value as Value
from planner.inputs.shell_expand import expand_all, one
from planner.inputs.shell_loops import MAX_LOOP_ITEMS as MAX_LOOP_ITEMS
from planner.inputs.shell_loops import MAX_LOOP_PASSES as MAX_LOOP_PASSES
from planner.inputs.shell_loops import loop
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
    parse_units,
    walk,
)
from planner.inputs.shell_state import MAX_CALL_DEPTH as MAX_CALL_DEPTH
from planner.inputs.shell_state import NOT_LAUNCHES, WRAPPERS, assigned_names, ends, guess, sure
from planner.inputs.shell_state import Files as Files
from planner.inputs.shell_state import Run as Run
from planner.inputs.shell_stop import Stopped, Stops
from planner.inputs.shell_vars import MAX_VALUE_CHARS as MAX_VALUE_CHARS
from planner.inputs.shell_vars import assign, shift, unset

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
Units = list[list[Node]]


def commands(text: str, script: str | None = None, files: Files | None = None) -> Run:
    """The script's launched commands and variables (module docstring); `script` its path
    (`$0`), `files` what reads the files it sources."""
    units = parse_units(text)
    run = Run(script=script, files=files, assigned=assigned_names([n for u in units for n in u]))
    for k, unit in enumerate(units):
        try:
            _read([unit], run)
        except Stops as stop:  # an exit that leaves nothing out is no news
            if not isinstance(stop, Exits) or k + 1 < len(units) or _may_launch(unit, run):
                run.stopped = Stopped(stop.line or 0, stop.file, stop.what)
            break
    return run


def _may_launch(nodes: list[Node], run: Run) -> bool:
    """Whether the nodes may launch what `run` has not: it launched nothing, and a command
    among them is not one of NOT_LAUNCHES."""
    simple = (n for n in walk(nodes) if isinstance(n, Simple) and n.words)
    return not run.commands and any(n.words[0] not in NOT_LAUNCHES for n in simple)


def _read(units: Units, run: Run) -> bool | None:
    """A file's or a string's complete commands (`shell_parse.parse_units`) run in order: a call
    past FUNCNEST discards the rest of its own (`shell_exit`)."""
    status: bool | None = True
    for unit in units:
        try:
            status = _block(unit, run)
        except Exits as stop:
            if stop.kind != "funcnest":
                raise
            status = run.last = False
    return status


def _block(nodes: list[Node], run: Run) -> bool | None:
    """Run the nodes in order; the last one's status (True success, False failure, None
    unknown)."""
    status: bool | None = True
    for node in nodes:
        try:
            status = run.last = _node(node, run)
        except Stops as stop:  # the line: the innermost command's
            stop.line = node.line if stop.line is None else stop.line
            raise
    return status


def _subshell(units: Units, run: Run) -> bool | None:
    """The commands run in a subshell: where it exits (`shell_exit`, `shell_stop`), the script
    goes on, the subshell's status that of its `exit`."""
    try:
        return _read(units, run)
    except Exits as stop:
        return stop.status
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
        return _chain(node, run)
    if isinstance(node, If):
        return _if(node, run)
    if isinstance(node, Case):
        return _case(node, run)
    if isinstance(node, Loop):
        return loop(node, run, _block)
    if isinstance(node, Group):
        return _subshell([node.body], run) if node.subshell else _block(node.body, run)
    if isinstance(node, Function):
        run.functions[node.name] = node.body
        return True
    return None


def _part(chain: Chain, k: int, run: Run) -> bool | None:
    part = chain.parts[k]
    return _subshell([[part]], run) if k in chain.piped else _node(part, run)


def _chain(node: Chain, run: Run) -> bool | None:
    """`a && b || c`, `a | b`: a part after a status known by a guess (or not known) that ends
    the shell having launched nothing is undone, the chain going on as if the status were the
    other (`cd "$DIR" || exit`: `cd` succeeded)."""
    guesses = run.guesses
    status = run.last = _part(node, 0, run)
    for k, op in enumerate(node.ops, 1):
        known = sure(run, status is not None, guesses)
        if (op == "&&" and status is False) or (op == "||" and status is True):
            continue
        if known:
            status = _part(node, k, run)
        else:
            ended, status = guess(run, _part, node, k, run)
            status = op == "||" if ended is not None else status
        run.last = status
    return status


def _if(node: If, run: Run) -> bool | None:
    """The first branch whose condition holds or is not known (`else` a branch whose condition
    holds). Where that one was taken on a guess and ends the shell having launched nothing, the
    first other that does not (the later ones first, then those skipped on a guess); where
    every one ends, the script ends."""
    ways = [*node.branches, ([], node.otherwise)]
    never: set[int] = set()  # the branches surely not taken
    for k, (cond, body) in enumerate(ways):
        guesses = run.guesses
        taken = _block(cond, run)
        if sure(run, taken is not None, guesses) and taken is not None:
            if taken:
                return _block(body, run)
            never.add(k)
            continue
        if taken is False:
            continue
        ended, status = guess(run, _block, body, run)
        if ended is None:
            return status
        for j in [*range(k + 1, len(ways)), *range(k)]:
            again, status = (ended, None) if j in never else guess(run, _block, ways[j][1], run)
            if again is None:
                return status
        raise ended  # every way ends
    return True


def _blank(raws: list[str], run: Run) -> list[str]:
    """Words expanded with unset variables as nothing (`Run.blank_unset`)."""
    run.blank_unset = True
    try:
        return expand_all(raws, run)
    finally:
        run.blank_unset = False


def _case(node: Case, run: Run) -> bool | None:
    """The item the word matches; a word not known takes the default pattern, else the first
    item. Taken on a guess and ending the shell having launched nothing (an argument loop's
    `*) usage; exit 1`): none, as where no pattern matches, unless every item ends (and a `*`
    leaves no way past them)."""
    guesses = run.guesses
    word = " ".join(_blank([node.word], run))
    items = node.items
    known = "$" not in word and "`" not in word
    if known:
        chosen = next((k for k, (p, _) in enumerate(items) if _matches(word, p, run)), None)
    else:
        chosen = next((k for k, (p, _) in enumerate(items) if "*" in p), 0 if items else None)
    if sure(run, known, guesses) and chosen is not None:
        return _block(items[chosen][1], run)
    if chosen is None:
        return True
    ended, status = guess(run, _block, items[chosen][1], run)
    if ended is None:
        return status
    others = [body for k, (_, body) in enumerate(items) if k != chosen]
    if any("*" in p for p, _ in items) and all(ends(run, _block, b, run) for b in others):
        raise ended  # every way ends
    return True


def _matches(word: str, patterns: list[str], run: Run) -> bool:
    alternatives = [a for p in patterns for a in p.split("|")]  # fp8|mxfp8)
    return any(fnmatch.fnmatchcase(word, one(a, run)) for a in alternatives)


def _simple(node: Simple, run: Run) -> bool | None:
    if node.words and node.words[0] in ("[", "[[", "test"):
        return evaluate(_blank(node.words[1:], run))
    words = expand_all(node.words, run)
    execs = False
    while words and words[0] in WRAPPERS:
        execs |= words[0] == "exec"
        words = shell_exit.exec_command(words[1:]) if words[0] == "exec" else words[1:]
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
    status = _command(words, run)
    if execs:  # the command replaced the shell
        raise shell_exit.execs(words)
    return status


def _command(words: list[str], run: Run) -> bool | None:
    name = os.path.basename(words[0])
    if name in ("true", ":"):
        return True
    if name == "false":
        return False
    if name in ("shift", "unset"):
        return shift(words, run) if name == "shift" else unset(words, run, run.functions)
    if words[0] in run.functions:
        return _call(words, run)
    if name == "exit":
        raise shell_exit.exited(words, run.last)
    if name == "return":  # at the top level: bash's error, and it goes on
        if run.depth == 0:
            return False
        raise shell_exit.returned(words, run.last)
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
            units = parse_units(words[i + 2])
            # bash -c 'STRING' NAME ARGS...: NAME is its $0 (else the shell's own), ARGS its
            # positional parameters ("$@", $1, ...; none without), as bash binds them
            inner = Run(
                env=dict(run.env),
                gone=set(run.gone),
                guessed=run.guessed,
                functions=run.functions,
                args=words[i + 4 :],
                files=run.files,
                script=words[i + 3] if i + 3 < len(words) else w,
            )
            inner.assigned = run.assigned | assigned_names([n for u in units for n in u])
            try:  # a shell of its own: where it exits, this one goes on (a loop holds both)
                _subshell(units, inner)
            except Stops as stop:
                stop.line = stop.file = None  # the line of the `bash -c` command
                raise
            finally:
                run.commands += inner.commands
                run.command_env.update(inner.command_env)
            return None
    run.commands.append(words)
    return None


def _call(words: list[str], run: Run) -> bool | None:
    """A function called with its arguments: its `return` ends it; FUNCNEST (`shell_exit`)
    and MAX_CALL_DEPTH bound the calls nested."""
    limit = shell_exit.funcnest(run.env.get("FUNCNEST"))
    if limit is not None and run.nest >= limit:
        raise shell_exit.nested(words[0], limit)
    if run.depth >= MAX_CALL_DEPTH:
        raise shell_stop.recursion(words[0], run.depth, limit)
    saved, run.args = run.args, words[1:]
    run.depth, run.nest = run.depth + 1, run.nest + 1
    try:
        return _block(run.functions[words[0]], run)
    except Exits as stop:
        if stop.kind != "return":
            raise
        return stop.status
    finally:
        run.args, run.depth, run.nest = saved, run.depth - 1, run.nest - 1


def _source(path: str, args: list[str], run: Run) -> bool | None:
    """`source PATH ARGS`: the file's commands run here, in this scope (its `$0` / BASH_SOURCE
    its own path, its positional parameters ARGS where given), where `Run.files` reads it; its
    `return` ends it."""
    if run.files is None or "$" in path or "`" in path or run.depth >= MAX_CALL_DEPTH:
        return None
    text = run.files(path)
    if text is None:
        return None
    saved = run.script, run.args
    run.script, run.args = path, (args or run.args)
    run.depth += 1
    units = parse_units(text)
    run.assigned |= assigned_names([n for u in units for n in u])
    try:
        return _read(units, run)
    except Stops as stop:  # a syntax error ends the sourced file alone (bash: status 2)
        if isinstance(stop, Exits) and stop.kind == "return":
            return stop.status
        if stop.syntax:
            return False
        stop.file = path if stop.file is None else stop.file
        raise
    finally:
        (run.script, run.args), run.depth = saved, run.depth - 1


def _eval(words: list[str], run: Run) -> bool | None:
    """`eval WORDS`: their commands collected (read in a scope of their own); a syntax error
    ends the string alone, as in bash (`shell_stop`)."""
    units = parse_units(" ".join(words))
    nested = Run(assigned=assigned_names([n for u in units for n in u]), depth=run.depth)
    nested.guessed = run.guessed
    try:
        _read(units, nested)
    except Stops as stop:
        if not stop.syntax:
            stop.line = None  # the line of the `eval` command
            raise
        return False
    finally:
        run.commands += nested.commands
    return None
