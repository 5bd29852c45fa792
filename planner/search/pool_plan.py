"""What the pooled searches share (`planner.search.pool_search`, its pipelines across the pools,
and `planner.search.pool_data`, its data-parallel replicas across them): the plan they return
(`PoolPlan`), the micro-batch sizes they try and the expert-parallel degrees of a stage."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from planner.inputs import pipeline_layout
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import memory, performance
from planner.search.rules.context import exchange_for
from planner.search.solver import PoolSplit

MICRO_BATCHES = (1, 2, 4)
"""Micro-batch sizes the pooled searches try (where the global batch divides)."""


@dataclass(frozen=True)
class PoolPlan:
    """A scored plan over pools: the job (its pools in pipeline order), the layout with its
    per-stage split, and the exact model's memory and performance."""

    job: Job
    layout: Layout
    memory: memory.MemoryReport
    performance: performance.Performance
    split: PoolSplit | None
    """The solver's split of the pipeline over the pools (None: the data-parallel replicas
    span the pools, `planner.search.pool_data`)."""

    @property
    def step_time(self) -> float:
        """The step in seconds (what `planner.search.twins.fold` reads)."""
        return self.performance.step_time_s


def pool_layout(job: Job, tp: int, cp: int, **fields: Any) -> Layout:
    """A pooled search's layout of degrees `tp` and `cp` and the other `fields`: sequence
    parallelism at tp > 1 and the CP exchange the job takes (`exchange_for`), as both pooled
    searches (`pool_search`, `pool_data`) build them."""
    return Layout(
        tp=tp, cp=cp, cp_comm_type=exchange_for(job, tp, cp), sequence_parallel=tp > 1, **fields
    )


def expert_degrees(job: Job, cp_dp: int) -> list[int]:
    """The expert-parallel degrees of a stage of cp x dp = `cp_dp` (expert TP = tp): [1] for a
    dense model; for a mixture of experts every divisor of the experts that divides cp x dp, so
    that the expert grid (etp x ep x pp) divides the job and each EP group stays in its stage
    (Megatron folds EP inside the tp x cp x dp ranks of a pipeline rank), so in its pool."""
    experts = job.arch.num_moe_experts
    if not job.arch.is_moe or experts is None:
        return [1]
    return [e for e in range(1, experts + 1) if experts % e == 0 and cp_dp % e == 0]


def apply(job: Job, layout: Layout, split: PoolSplit) -> tuple[Job, Layout]:
    """The job with its pools in the split's pipeline order and the layout with its stages."""
    order = list(dict.fromkeys(split.pools))
    ordered = replace(job, pools=tuple(job.pools[k] for k in order))
    stages = pipeline_layout.stages_of([[y] for y in split.layers], job.arch.mtp_num_layers)
    lay = layout.with_(pipeline_layers=None, pipeline_layout=stages, vpp=1)
    if split.recompute_layers:
        n = split.recompute_layers
        lay = lay.with_(recompute="full", recompute_method="block", recompute_num_layers=n)
    return ordered, lay
