"""Changes that bring what a layout offloads back within its host memory
(`planner.model.host_memory`), for a layout that fits in GPU memory but not in host memory.

Offloading less (`_candidates`): of the whole layers (`cpu_offloading_num_layers`), the share of
the fine-grained groups (`activation_offload_fraction`, in hundredths) or of the optimizer
(`optimizer_offload_fraction`, a `[training]` field), among the amounts that fit both the host
and the GPU (what it no longer offloads stays on the GPU: the GPU's memory falls as the amount
grows and the host's rises, so those are a range) the fastest: of layers and shares the least
(the step never gains from moving more activations), of the optimizer the fastest by the
step-time model (its CPU update overlaps the GPU's on the rest: a few hundredths on the host can
beat none). Where none of the range fits the GPU, the most the host holds, the nearest to
fitting; or one fine-grained module fewer. Or a change of
`advice.single_changes` (recompute, more tp or cp ...) that shrinks what is offloaded until it
fits; and where none of those fits GPU memory too, each of the latter with offloading less on
top. `planner check` lists the ones that fit both, the cheapest of each knob
(`advice.cheapest_each`), cheapest first, as `advice.memory_changes` does for GPU memory.
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

STEP = 0.01
"""The fractions' grid: hundredths (Megatron takes any float; a finer one saves little)."""


def _span(lo: int, hi: int, host: Callable[[int], bool], gpu: Callable[[int], bool]) -> range:
    """On the integer grid [lo, hi] of an amount offloaded (the host's bytes grow with it, the
    GPU's fall): the amounts that fit both, by bisection; where none of those that fit the host
    fits the GPU, the most that fits the host alone (the nearest to fitting); empty where none
    fits the host."""
    if hi < lo or not host(lo):
        return range(0)
    first = lo
    while lo < hi:  # the most that fit the host: host(lo) holds throughout
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if host(mid) else (lo, mid - 1)
    top = hi
    if not gpu(top):
        return range(top, top + 1)
    lo = first
    while lo < hi:  # the least that fit the GPU: gpu(hi) holds throughout
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if gpu(mid) else (mid + 1, hi)
    return range(hi, top + 1)


def _fastest(parts: range, step: Callable[[int], float]) -> int:
    """The hundredth of `parts` (optimizer shares on the host) with the fastest `step`, the least
    on ties. Above none, the step's optimizer part is the larger of the GPU's update, which falls
    with the share, and the CPU's, which grows (`stage_sync.optimizer_time`): a valley, found by
    bisection on its slope; none on the host (0), where in `parts`, is weighed beside it."""
    lo, hi = max(parts[0], 1), parts[-1]
    if hi < lo:
        return parts[0]
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if step(mid + 1) < step(mid) else (lo, mid)
    return min(dict.fromkeys((parts[0], lo)), key=step)


def _names(modules: tuple[str, ...]) -> str:
    return ",".join(modules) or "none"


def _candidates(
    job: Job,
    lay: Layout,
    headroom_pct: float,
    cost: Callable[[Job, Layout], float] | None = None,
) -> Iterator[tuple[int, str, object, object, Job, Layout]]:
    """(rank, field, value before, value after, job, layout) of each way to offload less that
    fits the host (`_span`): of whole layers and fine-grained shares, the least that fits the GPU
    too (the step never gains from offloading more of them); of the optimizer, the fastest by
    `cost` that fits both (its CPU update overlaps the GPU's: a few hundredths on the host can
    beat none), else the least."""

    def host(j: Job, new: Layout) -> bool:
        return host_memory.estimate(j, new).fits

    def span(lo: int, hi: int, at: Callable[[int], tuple[Job, Layout]]) -> range:
        def gpu(i: int) -> bool:
            return memory.estimate(*at(i), headroom_pct).fits

        return _span(lo, hi, lambda i: host(*at(i)), gpu)

    def hundredths(x: float) -> int:  # the last grid point below x
        return math.ceil(round(x / STEP, 6)) - 1

    def share(i: int) -> float:
        return round(i * STEP, 2)

    k = lay.cpu_offloading_num_layers
    if k > 0:
        layers = span(0, k - 1, lambda i: (job, lay.with_(cpu_offloading_num_layers=i)))
        if layers:
            new = lay.with_(cpu_offloading_num_layers=layers[0])
            yield 0, "cpu_offloading_num_layers", k, layers[0], job, new
    mods, f = lay.offload_modules, lay.activation_offload_fraction
    if mods:
        shares = span(
            1, hundredths(f), lambda i: (job, lay.with_(activation_offload_fraction=share(i)))
        )
        if shares:
            new = lay.with_(activation_offload_fraction=share(shares[0]))
            yield 1, "activation_offload_fraction", f, share(shares[0]), job, new
        for module in mods:
            new = lay.with_(offload_modules=tuple(m for m in mods if m != module))
            if host(job, new):
                yield 2, "offload_modules", _names(mods), _names(new.offload_modules), job, new
    f = job.optimizer_offload_fraction
    if f > 0:

        def part(i: int) -> tuple[Job, Layout]:
            return replace(job, optimizer_offload_fraction=share(i)), lay

        parts = span(0, hundredths(f), part)
        if parts:
            i = _fastest(parts, functools.cache(lambda i: cost(*part(i)))) if cost else parts[0]
            new_job = part(i)[0]
            field = "training.optimizer_offload_fraction"
            yield 3, field, f, new_job.optimizer_offload_fraction, new_job, lay


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
    shrinks what is offloaded enough (recompute, a smaller micro-batch, more tp ...). Where
    none of these fits GPU memory too, each of the latter with offloading less on top
    (`Change.also` names it): offloading less puts back on the GPU what such a change takes
    off it."""
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
        out.append(evaluate(order + 4, field, was, after, job, new, also))
    found = [c for c in out if c is not None]
    pairs: dict[int, str] = {}  # a paired change's GPU knob, by the change's id
    if not any(c.fits for c in found):
        for order, field, after, g, also in gpu_side:
            was = advice.field_value(layout, field)
            first = f"{field} {was} -> {after}" + (f" + {also}" if also else "")
            for o, f, was, to, j, new in _candidates(job, g, headroom_pct, cost):
                c = evaluate(o + order + 4, f, was, to, j, new, first)
                if c is not None:
                    found.append(c)
                    pairs[id(c)] = field
    found = advice.cheapest_each(job, found, cost, lambda c: (c.field, pairs.get(id(c))))
    return advice.by_cost(job, found, cost)
