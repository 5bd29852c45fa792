"""Changes that bring what a layout offloads back within its host memory
(`planner.model.host_memory`), for a layout that fits in GPU memory but not in host memory.

Offloading less (`_candidates`), by as little as it must: the most whole layers
(`cpu_offloading_num_layers`), the largest share of the fine-grained groups
(`activation_offload_fraction`, in hundredths) or of the optimizer (`optimizer_offload_fraction`,
a `[training]` field) that still fits the host; or one fine-grained module fewer. What it no
longer offloads stays on the GPU, so each must still fit there (and pass `planner.search.rules`):
the largest amount that fits the host is the one most likely to. Or a change of
`advice.single_changes` (recompute, more tp or cp ...) that shrinks what is offloaded until it
fits; and where none of those fits GPU memory too, each of the latter with offloading less on
top. `planner check` lists the ones that fit both, cheapest first, as `advice.memory_changes`
does for GPU memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search import advice, rules
from planner.search.advice import Change

STEP = 0.01
"""The fractions' grid: hundredths (Megatron takes any float; a finer one saves little)."""


def _largest(low: float, high: float, fits: Callable[[float], bool]) -> float | None:
    """The largest value on the STEP grid in [low, high) that `fits` (monotone: a smaller value
    offloads less), by bisection over the grid; None where not even `low` fits."""

    def at(i: int) -> float:
        return round(i * STEP, 2)

    lo, hi = round(low / STEP), math.ceil(round(high / STEP, 6)) - 1
    if hi < lo or not fits(at(lo)):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(at(mid)):
            lo = mid
        else:
            hi = mid - 1
    return at(lo)


def _names(modules: tuple[str, ...]) -> str:
    return ",".join(modules) or "none"


def _candidates(job: Job, lay: Layout) -> Iterator[tuple[int, str, object, object, Job, Layout]]:
    """(rank, field, value before, value after, job, layout) of each way to offload less that
    fits the host."""

    def host_fits(j: Job, new: Layout) -> bool:
        return host_memory.estimate(j, new).fits

    k = lay.cpu_offloading_num_layers
    if k > 0:  # the most layers that fit: host bytes grow with k
        layers = (lay.with_(cpu_offloading_num_layers=n) for n in range(k - 1, -1, -1))
        new = next((x for x in layers if host_fits(job, x)), None)
        if new is not None:
            yield 0, "cpu_offloading_num_layers", k, new.cpu_offloading_num_layers, job, new
    mods, f = lay.offload_modules, lay.activation_offload_fraction
    if mods:

        def share_fits(x: float) -> bool:
            return host_fits(job, lay.with_(activation_offload_fraction=x))

        share = _largest(STEP, f, share_fits)
        if share is not None:
            new = lay.with_(activation_offload_fraction=share)
            yield 1, "activation_offload_fraction", f, share, job, new
        for module in mods:
            new = lay.with_(offload_modules=tuple(m for m in mods if m != module))
            if host_fits(job, new):
                yield 2, "offload_modules", _names(mods), _names(new.offload_modules), job, new
    f = job.optimizer_offload_fraction
    if f > 0:

        def part_fits(x: float) -> bool:
            return host_fits(replace(job, optimizer_offload_fraction=x), lay)

        part = _largest(0.0, f, part_fits)
        if part is not None:
            new_job = replace(job, optimizer_offload_fraction=part)
            yield 3, "training.optimizer_offload_fraction", f, part, new_job, lay


def host_changes(
    job: Job,
    layout: Layout,
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT,
    cost: Callable[[Job, Layout], float] | None = None,
) -> list[Change]:
    """The changes that bring the layout's offloads within host memory and pass the rules,
    those that also fit GPU memory first, then cheapest (`advice.by_cost`); `Change.saves` is
    the host bytes a GPU they free. Single changes: offloading less (`_candidates`), or one of
    `advice.single_changes` that shrinks what is offloaded enough (recompute, a smaller
    micro-batch, more tp ...). Where none of these fits GPU memory too, each of the latter
    with offloading less on top (`Change.also` names it): offloading less puts back on the GPU
    what such a change takes off it."""
    before = host_memory.estimate(job, layout).total

    def evaluate(
        order: int, field: str, was: object, after: object, j: Job, new: Layout, also: str = ""
    ) -> Change | None:
        host = host_memory.estimate(j, new)
        if not host.fits or rules.violations(j, new):
            return None
        fits = memory.estimate(j, new, headroom_pct).fits
        saves = before - host.total
        return Change(
            field, was, after, new, saves, fits, order, also, j if j is not job else None, "host"
        )

    out = [evaluate(*c) for c in _candidates(job, layout)]
    gpu_side = list(advice.single_changes(job, layout))
    for order, field, after, new, also in gpu_side:
        out.append(evaluate(order + 4, field, getattr(layout, field), after, job, new, also))
    found = [c for c in out if c is not None]
    if not any(c.fits for c in found):
        for order, field, after, g, also in gpu_side:
            first = f"{field} {getattr(layout, field)} -> {after}" + (f" + {also}" if also else "")
            for o, f, was, to, j, new in _candidates(job, g):
                c = evaluate(o + order + 4, f, was, to, j, new, first)
                if c is not None:
                    found.append(c)
    return advice.by_cost(job, found, cost)
