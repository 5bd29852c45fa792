"""Reading the search-space flags of `planner suggest`: pins and bounds (`--tp 8`, `--pp 1-16`,
`--max-tp 4`), ZeRO stages (`--zero 1,2`) and recompute policies (`--recompute none,full`)."""

from __future__ import annotations

import re

from planner.inputs.errors import InputError
from planner.inputs.layout import Recompute
from planner.search import space as space_mod
from planner.search.space import Bound


def parse_bound(flag: str, text: str) -> Bound:
    """ "8" pins, "1-16" bounds, "4-" is at least 4, "-8" at most 8."""
    m = re.fullmatch(r"\s*(\d*)\s*(-?)\s*(\d*)\s*", text)
    if not m or not (m.group(1) or m.group(3)) or (m.group(2) == "" and not m.group(1)):
        raise InputError(f"{flag}: expected N, LO-HI, LO- or -HI (got {text!r})")
    lo = int(m.group(1)) if m.group(1) else 1
    hi = int(m.group(3)) if m.group(3) else (lo if not m.group(2) else space_mod.UNBOUNDED)
    if lo < 1 or hi < lo:
        raise InputError(f"{flag}: the range {text!r} is empty")
    return Bound(lo, hi)


def merge_bound(flag: str, bound: Bound, max_value: int | None) -> Bound:
    """Apply --max-X on top of --X; a pin above the maximum is a contradiction."""
    if max_value is None:
        return bound
    if max_value < 1:
        raise InputError(f"--max-{flag}: must be at least 1 (got {max_value})")
    if bound.lo > max_value:
        given = f"{bound.lo}-{bound.hi if bound.bounded_above() else ''}"
        raise InputError(
            f"--{flag} {bound.lo if bound.lo == bound.hi else given} contradicts "
            f"--max-{flag} {max_value}"
        )
    return Bound(bound.lo, min(bound.hi, max_value))


def recompute_list(text: str | None) -> tuple[Recompute, ...]:
    if text is None:
        return space_mod.RECOMPUTE_ORDER
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in space_mod.RECOMPUTE_ORDER]
    if bad:
        raise InputError(f"--recompute: expected none, selective, full (got {bad[0]!r})")
    return tuple(r for r in space_mod.RECOMPUTE_ORDER if r in items)


def zero_list(text: str | None) -> tuple[int, ...]:
    if text is None:
        return (0, 1, 2, 3)
    try:
        items = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise InputError(f"--zero: expected stages 0-3, e.g. 1 or 1,2 (got {text!r})") from None
    if not items or any(z not in (0, 1, 2, 3) for z in items):
        raise InputError(f"--zero: expected stages 0-3, e.g. 1 or 1,2 (got {text!r})")
    return tuple(items)


def bound(flag: str, text: str | None, max_value: int | None = None) -> Bound:
    """The bound `--FLAG TEXT` and `--max-FLAG MAX` give together (no flag: unbounded)."""
    b = parse_bound(f"--{flag}", text) if text is not None else Bound()
    return merge_bound(flag, b, max_value)
