"""The rule a heterogeneous cluster adds: every pool holds whole pipeline stages of tp x cp x dp
GPUs, pp of them in all (`planner.model.pools.pool_problem`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.pools import pool_problem
from planner.search.rules.base import Violation


def pools(job: Job, lay: Layout) -> Violation | None:
    why = pool_problem(job, lay)
    return None if why is None else Violation("pools", "cluster.pools", why)
