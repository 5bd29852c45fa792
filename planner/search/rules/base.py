"""A broken rule: the plan field it concerns and a Megatron-style message printing both values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job


@dataclass(frozen=True)
class Violation:
    rule: str
    """A short id (the search counts rejections by it)."""
    field: str
    """The plan field, e.g. "parallel.tp"."""
    message: str


Rule = Callable[[Job, Layout], Violation | None]
