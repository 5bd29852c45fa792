"""The tests of a launch script's conditions (`[ ]`, `[[ ]]`, `test`) over known values, for
`planner.inputs.shell_run`: string and integer comparisons, `-z`, `-n`, `!`, `&&` / `-a`,
`||` / `-o`; None (not known) where an operand holds what planner does not know.
"""

from __future__ import annotations

import fnmatch


def evaluate(args: list[str]) -> bool | None:
    """A test of known values; None where any operand is not known."""
    args = [a for a in args if a not in ("]", "]]")]
    if any("$" in a or "`" in a for a in args):
        return None
    for op in ("||", "-o"):
        if op in args:
            i = args.index(op)
            a, b = evaluate(args[:i]), evaluate(args[i + 1 :])
            return True if a or b else None if a is None or b is None else False
    for op in ("&&", "-a"):
        if op in args and args.index(op) > 0:
            i = args.index(op)
            a, b = evaluate(args[:i]), evaluate(args[i + 1 :])
            return False if a is False or b is False else None if a is None or b is None else True
    if args and args[0] == "!":
        inner = evaluate(args[1:])
        return None if inner is None else not inner
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2 and args[0] in ("-z", "-n"):
        return (args[1] == "") == (args[0] == "-z")
    if len(args) == 3:
        return binary(*args)
    return None


def binary(a: str, op: str, b: str) -> bool | None:
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
