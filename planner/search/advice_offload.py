"""The offloaded shares of `planner check`'s advice, on a grid of hundredths: the fine-grained
groups' (`Layout.activation_offload_fraction`) and the optimizer's
(`Job.optimizer_offload_fraction`, a `[training]` field). Either share moves bytes from the GPU
to the host as it grows, so on the grid the GPU's memory falls and the host's grows
(`planner.model.host_memory`): the hundredths that fit both are a range (`span`).
`planner.search.host_advice` offloads less to fit the host; `raised` here offloads more to fit
the GPU (`planner.search.advice`).

The optimizer's GPU bytes fall with its share only above none: the first hundredth turns on the
precision-aware optimizer Megatron asserts with the CPU offload (`Job.precision_aware_optimizer`),
which changes what the GPU keeps of every parameter (an fp32 copy of each bf16 gradient the
GPU's share updates, say); from there each hundredth more takes its master and moments off the
GPU, and what stays of it (Megatron-FSDP's fp32 main weights, `optimizer_offload.gpu_extra_bytes`)
is less. So a raised share is searched from the hundredth above the plan's, never at none, and
every share `raised` offers is judged again by the models (`advice.memory_changes`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.search import rules

STEP = 0.01
"""The fractions' grid: hundredths (Megatron takes any float; a finer one saves little)."""

TOP = round(1 / STEP)
"""The grid point of the whole share (1.0)."""


def share(i: int) -> float:
    """The fraction of grid point `i`."""
    return round(i * STEP, 2)


def below(x: float) -> int:
    """The last grid point below the fraction x."""
    return math.ceil(round(x / STEP, 6)) - 1


def above(x: float) -> int:
    """The first grid point above the fraction x."""
    return math.floor(round(x / STEP, 6)) + 1


def span(
    lo: int,
    hi: int,
    host: Callable[[int], bool],
    gpu: Callable[[int], bool],
    top_first: bool = False,
) -> range:
    """On the integer grid [lo, hi] of an amount offloaded (the host's bytes grow with it, the
    GPU's fall): the amounts that fit both, by bisection; where none of those that fit the host
    fits the GPU, the most that fits the host alone (the nearest to fitting); empty where none
    fits the host. `top_first`: the host is asked at hi first (where it mostly holds every
    amount: offloading more to fit the GPU)."""
    if hi < lo:
        return range(0)
    first = lo
    if top_first and host(hi):
        lo = hi
    elif not host(lo):
        return range(0)
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


def fastest(parts: range, step: Callable[[int], float]) -> int:
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


def fitting(
    headroom_pct: float,
    at: Callable[[int], tuple[Job, Layout]],
    lo: int,
    hi: int,
    top_first: bool = False,
) -> range:
    """`span` of the grid points [lo, hi], each run as `at` says (its job and layout), judged
    by `host_memory.estimate` and `memory.estimate` at `headroom_pct`."""

    def host(i: int) -> bool:
        return host_memory.estimate(*at(i)).fits

    def gpu(i: int) -> bool:
        return memory.estimate(*at(i), headroom_pct).fits

    return span(lo, hi, host, gpu, top_first)


def raised(
    job: Job,
    lay: Layout,
    headroom_pct: float,
    cost: Callable[[Job, Layout], float] | None = None,
) -> Iterator[tuple[str, float, float, Job, Layout]]:
    """(field, share before, share after, job, layout) of each offloaded share raised to fit the
    GPU within the host's memory (`fitting`, from the hundredth above the plan's up to the
    whole): of the fine-grained groups (where the plan offloads some modules), the fastest by
    `cost`, the least on ties, else the least (one group more can pair a chunk's reloads with
    the waits that expect them, `planner.model.offload_groups`); of the optimizer (where the rules
    take it offloaded at all: Megatron, the distributed optimizer, Adam), the fastest by `cost`
    (its CPU update overlaps the GPU's on the rest: `fastest`), else the least. Where no share
    that fits the host fits the GPU, the most the host holds, the largest saving."""
    f = lay.activation_offload_fraction
    if lay.offload_modules and f < 1:

        def group(i: int) -> tuple[Job, Layout]:
            return job, lay.with_(activation_offload_fraction=share(i))

        shares = fitting(headroom_pct, group, above(f), TOP, True)
        if shares:
            # not monotone: which group the share stops at sets how the reloads pair with their
            # waits (`offload_groups`), so each share that fits is timed where `cost` is given
            i = min(shares, key=lambda i: (cost(*group(i)), i)) if cost else shares[0]
            yield "activation_offload_fraction", f, share(i), *group(i)
    f = job.optimizer_offload_fraction
    if f < 1 and not rules.violations(replace(job, optimizer_offload_fraction=1.0), lay):

        def part(i: int) -> tuple[Job, Layout]:
            return replace(job, optimizer_offload_fraction=share(i)), lay

        parts = fitting(headroom_pct, part, above(f), TOP, True)
        if parts:
            i = fastest(parts, functools.cache(lambda i: cost(*part(i)))) if cost else parts[0]
            yield "training.optimizer_offload_fraction", f, share(i), *part(i)
