"""Changes that bring what a layout offloads back within its host memory
(`planner.model.host_memory`), for a layout that fits in GPU memory but not in host memory.

Offloading less (`_candidates`): of the whole layers (`cpu_offloading_num_layers`) or the share
of the optimizer (`optimizer_offload_fraction`, a `[training]` field), among the amounts that fit
both the host and the GPU (what it no longer offloads stays on the GPU: the GPU's memory falls as
the amount grows and the host's rises, so those are a range) the fastest: of layers the least
(the step never gains from moving more activations), of the optimizer the fastest by the
step-time model (its CPU update overlaps the GPU's on the rest: a few hundredths on the host can
beat none). Where none of the range fits the GPU, the most the host holds, the nearest to
fitting; or one fine-grained module fewer. Not the fine-grained groups' share
(`activation_offload_fraction`): the host holds the first step's copies of every group whatever
it is (`host_memory`). Or a change of
`advice.single_changes` (recompute, more tp or cp ...) that shrinks what is offloaded until it
fits; and each of the latter with offloading less on top, where none of those fits GPU memory
too or where the pair is faster than every one that does. `planner check` lists the ones that
fit both, the cheapest of each knob (`advice.cheapest_each`), cheapest first, as
`advice.memory_changes` does for GPU memory.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search import advice, rules
from planner.search.advice import Change
from planner.search.advice_offload import below, fastest, fitting, share


def _names(modules: tuple[str, ...]) -> str:
    return ",".join(modules) or "none"


def _candidates(
    job: Job,
    lay: Layout,
    headroom_pct: float,
    cost: Callable[[Job, Layout], float] | None = None,
) -> Iterator[tuple[int, str, object, object, Job, Layout]]:
    """(rank, field, value before, value after, job, layout) of each way to offload less that
    fits the host (`advice_offload.fitting`): of whole layers and fine-grained shares, the least
    that fits the GPU too (the step never gains from offloading more of them); of the optimizer,
    the fastest by `cost` that fits both (its CPU update overlaps the GPU's: a few hundredths on
    the host can beat none), else the least."""

    def host(j: Job, new: Layout) -> bool:
        return host_memory.estimate(j, new).fits

    def span(lo: int, hi: int, at: Callable[[int], tuple[Job, Layout]]) -> range:
        return fitting(headroom_pct, at, lo, hi)

    k = lay.cpu_offloading_num_layers
    if k > 0:
        layers = span(0, k - 1, lambda i: (job, lay.with_(cpu_offloading_num_layers=i)))
        if layers:
            new = lay.with_(cpu_offloading_num_layers=layers[0])
            yield 0, "cpu_offloading_num_layers", k, layers[0], job, new
    mods = lay.offload_modules
    if mods:
        for module in mods:
            new = lay.with_(offload_modules=tuple(m for m in mods if m != module))
            if host(job, new):
                yield 2, "offload_modules", _names(mods), _names(new.offload_modules), job, new
    f = job.optimizer_offload_fraction
    if f > 0:

        def part(i: int) -> tuple[Job, Layout]:
            return replace(job, optimizer_offload_fraction=share(i)), lay

        parts = span(0, below(f), part)
        if parts:
            i = fastest(parts, functools.cache(lambda i: cost(*part(i)))) if cost else parts[0]
            new_job = part(i)[0]
            field = "training.optimizer_offload_fraction"
            yield 3, field, f, new_job.optimizer_offload_fraction, new_job, lay


def _fastest_fit(
    job: Job, changes: list[Change], cost: Callable[[Job, Layout], float] | None
) -> float | None:
    """The step of the fastest change that fits (`cost`; -inf without it), None where none
    does."""
    steps = [cost(c.job or job, c.layout) if cost else -math.inf for c in changes if c.fits]
    return min(steps, default=None)


def _may_fit(job: Job, lay: Layout, headroom_pct: float) -> bool:
    """Whether offloading less (`_candidates`) may leave a GPU change within GPU memory: each
    way puts more back on the GPU (more layers or groups kept, a smaller optimizer share above
    none), but none of the optimizer at all, which also leaves the precision-aware optimizer
    that Megatron's CPU offload asserts (`advice_offload`): the GPU change fits as it is, or
    with its optimizer on the GPU."""
    if memory.estimate(job, lay, headroom_pct).fits:
        return True
    if job.optimizer_offload_fraction == 0:
        return False
    on_gpu = replace(job, optimizer_offload_fraction=0.0)
    return memory.estimate(on_gpu, lay, headroom_pct).fits


def host_changes(
    job: Job,
    layout: Layout,
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT,
    cost: Callable[[Job, Layout], float] | None = None,
) -> list[Change]:
    """The changes that bring the layout's offloads within host memory and pass the rules,
    those that also fit GPU memory first, then cheapest (`advice.by_cost`); `Change.saves` is
    the host bytes a GPU they free (on pools, on the pool whose host binds before them).
    Single changes: offloading less (`_candidates`), or one of `advice.single_changes` that
    shrinks what is offloaded enough (recompute, a smaller micro-batch, more tp ...); a give-back
    of tp or cp only where it fits (`advice.gives_back`). And each of the latter with offloading
    less on top (`Change.also` names it: offloading less puts back on the GPU what such a change
    takes off it), where no single change fits GPU memory too, or where the pair fits and is
    faster by `cost` than every single change that does: ZeRO 2 with 3 layers offloaded, say,
    where the single change that fits is tp 8."""
    before = host_memory.estimate(job, layout)

    def freed(groups: list[host_memory.HostMemory], after: host_memory.HostMemory) -> float:
        """Host bytes a GPU the change frees on the pool whose host binds before it (on pools
        the least headroom can move to another pool, whose figures are not comparable)."""
        same = [h for h in groups if h.pool == before.pool]
        return before.total - (same[0] if same else after).total

    def evaluate(
        order: int, field: str, was: object, after: object, j: Job, new: Layout, also: str = ""
    ) -> Change | None:
        groups = host_memory.by_pool(j, new)
        host = max(groups, key=lambda h: h.shortfall)  # `host_memory.estimate`
        if not host.fits or rules.violations(j, new):
            return None
        fits = memory.estimate(j, new, headroom_pct).fits
        saves = freed(groups, host)
        return Change(
            field, was, after, new, saves, fits, order, also, j if j is not job else None, "host"
        )

    out = [evaluate(*c) for c in _candidates(job, layout, headroom_pct, cost)]
    gpu_side = list(advice.single_changes(job, layout))
    for order, field, after, new, also in gpu_side:
        was = advice.field_value(layout, field)
        c = evaluate(order + 4, field, was, after, job, new, also)
        out.append(None if c and not c.fits and advice.gives_back(field, was, after) else c)
    found = [c for c in out if c is not None]
    pairs: dict[int, str] = {}  # a paired change's GPU knob, by the change's id
    best = _fastest_fit(job, found, cost)
    if best is None or cost is not None:
        for order, field, after, g, also in gpu_side:
            was = advice.field_value(layout, field)
            only_fitting = best is not None or advice.gives_back(field, was, after)
            if only_fitting and not _may_fit(job, g, headroom_pct):
                continue
            first = f"{field} {advice.shown(was)} -> {advice.shown(after)}"
            first += f" + {also}" if also else ""
            for o, f, off, to, j, new in _candidates(job, g, headroom_pct, cost):
                c = evaluate(o + order + 4, f, off, to, j, new, first)
                if c is None or (not c.fits and advice.gives_back(field, was, after)):
                    continue
                if best is None or (c.fits and cost and cost(j, new) < best):
                    found.append(c)
                    pairs[id(c)] = field
    found = advice.cheapest_each(job, found, cost, lambda c: (c.field, pairs.get(id(c))))
    return advice.by_cost(job, found, cost)
