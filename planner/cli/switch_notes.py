"""The notes explain and suggest give that advise one switch and weigh what it costs in memory:
CUDA graphs for a plan whose host's eager kernel issue floors the layers, the shared experts'
overlap for a MoE plan without it. A switch is advised only where the plan still fits with it,
at the command's headroom (`--headroom`), and the advice names the memory it adds at the peak;
where it would not fit, the note says so instead of advising it."""

from __future__ import annotations

import re
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_types import CudaGraphImpl
from planner.inputs.units import GIB, shown
from planner.model import cost, memory
from planner.model.performance import BOTTLENECK_MIN_SHARE, Performance
from planner.search import rules
from planner.search.rules import graphs
from planner.search.rules.shared_overlap import shared_expert_overlap

SWITCH_ADVICE_SHARE = 0.01
"""The share of the step a one-switch change (the fused grouped MLP, the shared experts'
overlap) must save for explain to suggest it to a plan without it (1%: one flag, no layout
change)."""

FULL_ITERATION_RUNS = '; training.cuda_graph_impl = "full_iteration" runs it'
"""How `rules.graphs` names the full-iteration graphs that run what per-layer ones refuse."""


def added(perf: Performance, other: Job, layout: Layout) -> float:
    """Seconds per step the plan (`perf`) takes over the same layout run as `other`."""
    return perf.step_time_s - cost.estimate(other, layout).step_time_s


def change_text(
    extra: float, step_s: float, adds: str = "adding", saves: str = "saving", share: bool = False
) -> str:
    """'adding E s to the T s step', or where the change saves time at the thousandth of a
    second the notes print, 'saving E s of the T s step'; with `share`, E over T after it, as
    '(P%)'. Never a signed zero ("adding -0.000 s" where bf16 layers ran 0.06 ms faster)."""
    tail = f" ({shown(abs(extra) / step_s, 2):.0%})" if share else ""
    if shown(extra, 3) < 0:
        return f"{saves} {-extra:.3f} s of the {step_s:.3f} s step{tail}"
    return f"{adds} {shown(extra, 3):.3f} s to the {step_s:.3f} s step{tail}"


def _weigh(
    job: Job, layout: Layout, other: Job, other_layout: Layout, headroom_pct: float
) -> tuple[bool, float, float]:
    """(whether the plan fits run as `other` on `other_layout` at the headroom, the GiB that adds
    at the peak, the GiB it would then be over)."""
    grown = memory.estimate(other, other_layout, headroom_pct)
    more = (grown.peak - memory.estimate(job, layout, headroom_pct).peak) / GIB
    return grown.fits, more, grown.shortfall / GIB


def _more_text(more: float) -> str:
    return f", for {more:.1f} GiB more at the peak" if more >= 0.05 else ""


def shared_overlap_text(
    job: Job, layout: Layout, perf: Performance, headroom_pct: float = memory.DEFAULT_HEADROOM_PCT
) -> str | None:
    """A Megatron MoE plan with shared experts and a token dispatcher's all-to-all: with
    `Layout.moe_shared_expert_overlap`, the all-to-all seconds its shared experts hide per step
    and the step against the same plan without; without it, where Megatron allows it
    (`planner.search.rules.shared_overlap`), it would save SWITCH_ADVICE_SHARE of the step and
    the plan would still fit at `headroom_pct`, what turning it on would save, and the memory it
    would add (with TP, the shared experts' fc1 keeps the group's gathered input:
    `Shard.shared_gathered`)."""
    if job.framework != "megatron" or not job.arch.moe_shared_expert_intermediate_size:
        return None
    if layout.ep * layout.expert_tp <= 1:  # no all-to-all: the flag is a no-op
        return None
    flip = layout.with_(moe_shared_expert_overlap=not layout.moe_shared_expert_overlap)
    if not layout.moe_shared_expert_overlap and shared_expert_overlap(job, flip):
        return None  # Megatron refuses it here: no advice
    other = cost.estimate(job, flip)
    if layout.moe_shared_expert_overlap:
        hidden = perf.breakdown.ep_comm_hidden
        return (
            f"shared-expert overlap: the shared experts' GEMMs run beside the dispatch and "
            f"combine, hiding {hidden:.3f} s of the all-to-all per step; the step "
            f"{shown(perf.step_time_s / other.step_time_s - 1, 3):+.1%} against the same plan "
            "without"
        )
    saved = perf.step_time_s - other.step_time_s
    if saved < SWITCH_ADVICE_SHARE * perf.step_time_s:
        return None
    fits, more, _ = _weigh(job, layout, job, flip, headroom_pct)
    if not fits:
        return None
    return (
        "shared-expert overlap: off; parallel.moe_shared_expert_overlap = true (Megatron "
        f"--moe-shared-expert-overlap) would save {saved:.3f} s of the {perf.step_time_s:.3f} s "
        f"step{_more_text(more)}"
    )


GRAPH_IMPLS: tuple[CudaGraphImpl, ...] = ("transformer_engine", "full_iteration")
"""The CUDA-graph implementations `host_text` tries, in this order, where the job's own one is
refused on its layout (`planner.search.rules.graphs`, `features._graph_conflict`: Transformer
Engine's per-layer graphs run the fine-grained offloading the local ones refuse, full-iteration
graphs CPU offloading and full recompute too)."""

_RUNS_CLAUSE = re.compile(
    r'; training\.cuda_graph_impl = "[^)]*runs it|, or set training\.cuda_graph_impl'
)
"""A refusal's clause naming implementations that run the layout (`rules.graphs`,
`features._graph_conflict`): dropped where none of them runs it either."""


def _graphed_runs(job: Job, layout: Layout) -> tuple[Job | None, str | None]:
    """(the job with every layer captured in CUDA graphs, in its own implementation or else the
    first of GRAPH_IMPLS, that `rules.violations` accepts on the layout, or None where none is;
    why its own implementation is refused, or None where it runs). A rule the plan already breaks
    eager does not count against its graphs."""
    eager = {v.rule for v in rules.violations(job, layout)}
    own = replace(job, cuda_graphs=True, cuda_graph_modules=())
    why: str | None = None
    for impl in (own.cuda_graph_impl, *(i for i in GRAPH_IMPLS if i != own.cuda_graph_impl)):
        graphed = replace(own, cuda_graph_impl=impl)
        broken = [v for v in rules.violations(graphed, layout) if v.rule not in eager]
        if not broken:
            return graphed, why
        if why is None:
            barred = graphs.conflict(graphed, layout)
            why = barred[1] if barred is not None else broken[0].message
    return None, why


def _host_graphed(job: Job, layout: Layout) -> tuple[Job | None, Job | None, str | None]:
    """(the job with every layer captured in CUDA graphs that the host's seconds are priced at:
    `_graphed_runs`' where one runs, else the job's own implementation; the one that runs or
    None; why the job's own is refused or None), all None where nothing is left to capture or
    the job runs no CUDA graphs (torchtitan)."""
    if (job.cuda_graphs and not job.cuda_graph_modules) or job.framework == "torchtitan":
        return None, None, None
    runs, why = _graphed_runs(job, layout)
    return runs or replace(job, cuda_graphs=True, cuda_graph_modules=()), runs, why


def host_seconds(job: Job, layout: Layout) -> float:
    """The seconds the host's eager kernel issue adds to the plan's step, which sit in its
    compute: the step less the same layout's with its layers captured (`_host_graphed`), as
    `host_text` states it; 0 where nothing is left to capture or below BOTTLENECK_MIN_SHARE of
    the step (no note says it). What `Performance.bottleneck` weighs against the other costs."""
    graphed = _host_graphed(job, layout)[0]
    if graphed is None:
        return 0.0
    perf = cost.estimate(job, layout)
    extra = added(perf, graphed, layout)
    return extra if extra >= BOTTLENECK_MIN_SHARE * perf.step_time_s else 0.0


def host_text(
    job: Job, layout: Layout, perf: Performance, headroom_pct: float = memory.DEFAULT_HEADROOM_PCT
) -> str | None:
    """Where the host's eager kernel issue floors the layers (`planner.model.host`): the seconds
    per step it adds over the same layout with every layer captured in CUDA graphs, when that is
    at least BOTTLENECK_MIN_SHARE of the step; with Megatron, the switch that removes it and the
    memory the graphs add at the peak, where the plan still fits with them at `headroom_pct`;
    else why it does not take them: the memory, or the layout (every rule `planner check`
    applies, `rules.violations`: where the job's own implementation is refused, the first of
    GRAPH_IMPLS that runs it is named and the seconds and memory are those of it; where none
    does, no switch is advised, and the seconds are those of the job's own implementation)."""
    graphed, runs, why = _host_graphed(job, layout)
    if graphed is None:
        return None  # nothing left to capture, or no CUDA graphs to capture it with
    extra = added(perf, graphed, layout)
    if extra < BOTTLENECK_MIN_SHARE * perf.step_time_s:
        return None
    if runs is None:  # no implementation runs the layout: say why, advise none
        fix = f"CUDA graphs would remove it, but {_RUNS_CLAUSE.sub('', why or '')}"
    elif why is not None:  # another implementation runs what the job's own refuses
        impl = f'training.cuda_graph_impl = "{runs.cuda_graph_impl}"'
        fix = f"CUDA graphs would remove it, but {_RUNS_CLAUSE.sub('', why)}"
        fits, more, over = _weigh(job, layout, runs, layout, headroom_pct)
        if fits:
            fix += f"; {impl} runs it{_more_text(more)}"
        else:
            fix += (
                f"; {impl}, which runs it, would not fit: {more:.1f} GiB more at the peak, "
                f"{over:.1f} GiB over"
            )
    else:
        switch = (
            "CUDA graphs of the whole layer (training.cuda_graph_modules unset)"
            if job.cuda_graphs
            else "CUDA graphs (training.cuda_graphs = true)"
        )
        fits, more, over = _weigh(job, layout, graphed, layout, headroom_pct)
        if fits:
            fix = f"{switch} would remove it{_more_text(more)}"
        else:
            fix = (
                f"{switch} would remove it, but the plan would not fit with them: {more:.1f} GiB "
                f"more at the peak, {over:.1f} GiB over"
            )
    return (
        f"host-bound: issuing the layers' kernels eagerly adds {extra:.3f} s to the "
        f"{perf.step_time_s:.3f} s step ({extra / perf.step_time_s:.0%}); {fix}"
    )
