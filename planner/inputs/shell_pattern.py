"""The string operations of a parameter expansion, for `planner.inputs.shell_expand`: a
pattern's shortest or longest match removed from either end (`trim`: `${V%p}`, `${V%%p}`,
`${V#p}`, `${V##p}`, bash's glob patterns), the case of the first letter changed (`first`:
`${V,}`, `${V^}`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable


def first(change: Callable[[str], str]) -> Callable[[str], str]:
    return lambda v: change(v[:1]) + v[1:]


def trim(value: str, how: str, pattern: str) -> str:
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
