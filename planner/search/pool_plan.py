"""What the pooled searches share (`planner.search.pool_search`, its pipelines across the pools,
and `planner.search.pool_data`, its data-parallel replicas across them): the plan they return
(`PoolPlan`), the micro-batch sizes they try and the expert-parallel degrees of a stage."""

from __future__ import annotations

from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory, performance
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


def host_fits(plan: PoolPlan | None) -> bool:
    """Whether a scored plan's host memory fits too, each stage against its own pool's host
    share (`host_memory.estimate`): the pooled searches keep no plan whose offloaded optimizer
    or activations are over a pool's host, as the one-kind search keeps none (`variants`)."""
    return plan is not None and host_memory.estimate(plan.job, plan.layout).fits


def expert_degrees(job: Job, cp_dp: int) -> list[int]:
    """The expert-parallel degrees of a stage of cp x dp = `cp_dp` (expert TP = tp): [1] for a
    dense model; for a mixture of experts every divisor of the experts that divides cp x dp, so
    that the expert grid (etp x ep x pp) divides the job and each EP group stays in its stage
    (Megatron folds EP inside the tp x cp x dp ranks of a pipeline rank), so in its pool."""
    experts = job.arch.num_moe_experts
    if not job.arch.is_moe or experts is None:
        return [1]
    return [e for e in range(1, experts + 1) if experts % e == 0 and cp_dp % e == 0]
