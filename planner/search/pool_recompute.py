"""The recompute the pooled search (`planner.search.pool_search`) offers before its solver's
block count, and the plans whose recompute it drops: only recompute that can save memory where
memory is short, as the one-kind search offers it.

The one-kind search tries the selective module sets the model has and the rules allow
(`rungs.selective`: no core_attn under flash attention, where it saves nothing); the pooled
search those of them in MODULE_SETS. The one-kind search takes a base layout's fastest rung
that fits (`planner.search.top_k`), so it never lists a layout with recompute that the same
layout fits without. The pooled search solves each layout's split on its own; a selective plan
whose split fits with no recompute at no more time (the model may count nothing saved, e.g.
layernorm recompute where Transformer Engine fuses the norm into the linear layer) is the same
plan made slower, and is dropped as it is scored (`needless`): the layout without recompute is
searched too, its best split no worse by the solver's objective.
"""

from __future__ import annotations

from planner.inputs.layout import RecomputeModule
from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.search.pool_plan import PoolPlan
from planner.search.rules import violations
from planner.search.rungs import NONE, Rung, selective

MODULE_SETS: tuple[tuple[RecomputeModule, ...], ...] = (("core_attn",),)
"""The selective module sets the pooled search tries, where the one-kind search's rule allows
them (`rungs.selective`): Megatron's default alone, as before that rule was applied. Every set
the rule allows would be tried by listing `rungs.MODULE_SETS` here: for Mixtral 8x7B on 16 + 16
GPUs 1455 layouts in place of 582, the pooled search 1.6x and its brute-force tests 2-3.6x
slower (measured), for plans with a recompute that saves memory (Llama 3.1 8B, L40S + A100:
selective mlp at 30.36 s, tenth)."""


def recompute_rungs(job: Job) -> list[Rung]:
    """None, and each of MODULE_SETS that the one-kind search tries (`rungs.selective`: none
    under flash attention, where core_attn saves no memory)."""
    return [NONE, *(r for r in selective(job) if r.modules in MODULE_SETS)]


def needless(plan: PoolPlan, headroom_pct: float) -> bool:
    """Whether a plan's selective recompute saves nothing it needs: its layout and split with
    no recompute break no rule, fit the GPUs and are no slower (host memory does not read
    selective recompute: `host_memory` counts offloaded optimizer states and activations)."""
    if plan.layout.recompute != "selective":
        return False
    plain = NONE.on(plan.layout)
    if violations(plan.job, plain) or not memory.estimate(plan.job, plain, headroom_pct).fits:
        return False
    return cost.estimate(plan.job, plain).step_time_s <= plan.performance.step_time_s
