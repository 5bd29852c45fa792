"""The pooled search's brute-force reference (tests/search/test_pool_search_moe.py,
test_solver_pools.py, test_pool_search_rows.py): every layout of `pool_search.layouts` split by
`pools.plan_split` with no cut, each plan judged by the model's own functions, no bound and no
early stop; then ranked as the search ranks (step time, `top_k.simplicity` on exact ties) and its
twins folded (`twins.fold`: README, "the top K rows are K different layouts").

A plan with selective recompute whose layout and split fit with no recompute at no more time
is left out here too (the one-kind search takes a base's fastest rung that fits,
`planner.search.top_k`): written out with `memory.estimate` and `cost.estimate`, not with the
search's `pool_recompute.needless`."""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.search import pool_search, pools
from planner.search.pool_plan import PoolPlan
from planner.search.top_k import simplicity
from planner.search.twins import Row, fold


def recompute_for_nothing(plan: PoolPlan, headroom_pct: float) -> bool:
    """A selective plan that its own split runs as fast or faster without recompute, in the
    GPUs' memory."""
    if plan.layout.recompute != "selective":
        return False
    plain = plan.layout.with_(recompute="none", recompute_modules=("core_attn",))
    fits = memory.estimate(plan.job, plain, headroom_pct).fits
    return fits and cost.estimate(plan.job, plain).step_time_s <= plan.performance.step_time_s


def every_plan(job: Job, headroom_pct: float) -> list[PoolPlan]:
    """Each layout's plan (no cut), those with recompute for nothing left out."""
    every = [pools.plan_split(job, lay, headroom_pct) for lay in pool_search.layouts(job)]
    return [q for q in every if q is not None and not recompute_for_nothing(q, headroom_pct)]


def rows(plans: list[PoolPlan], top: int) -> list[Row[PoolPlan]]:
    """The top rows of `plans`: ranked by step then `simplicity`, twins folded."""
    ranked = sorted(plans, key=lambda q: (q.performance.step_time_s, simplicity(q.layout)))
    return fold(ranked)[:top]


def top_steps(job: Job, headroom_pct: float, top: int) -> list[float]:
    """The step times of the top rows of every layout's plan."""
    return [r.candidate.performance.step_time_s for r in rows(every_plan(job, headroom_pct), top)]
