"""A broken rule: the plan field it concerns and a Megatron-style message printing both values;
and the one of a model feature only Megatron-LM runs (`megatron_only`)."""

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


def megatron_only(job: Job, present: bool, rule: str, what: str) -> Violation | None:
    """The violation of a model feature (`what`, `present` in the job's model) that only
    Megatron-LM runs, where the job trains with another framework."""
    if not present or job.framework == "megatron":
        return None
    return Violation(
        rule, "training.framework", f"{what} runs on Megatron-LM only (got {job.framework!r})"
    )
