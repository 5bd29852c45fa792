"""Single changes to a layout that save memory, with the bytes each saves.

`planner check` lists the ones that make a layout fit, cheapest first. Each candidate changes one
knob (ZeRO stage, recompute, sequence parallelism, micro-batch size, tp, pp, cp, vpp; and for
DeepSeek sparse attention on Megatron's dense path, its sparse kernels) and must still pass
`planner.search.rules`; the total GPU count and the global batch stay as they are. A change
makes the layout fit only where what it offloads fits in host memory too
(`planner.model.host_memory`; `planner.search.host_advice` lists the changes for a layout over
host memory alone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_layout import torchtitan_stages
from planner.model import dsa, host_memory, memory
from planner.search import rules


@dataclass(frozen=True)
class Change:
    field: str
    before: object
    after: object
    layout: Layout
    saves: float
    """Bytes the worst stage saves."""
    fits: bool
    order: int
    """Rough cost rank when no step-time model orders them (lower is cheaper)."""
    also: str = ""
    """What the change turns on with it, where the rules need it (`sequence_parallel`)."""
    job: Job | None = None
    """The job the change runs under, where it changes a job field (the DSA kernels)."""
    memory: str = "gpu"
    """The memory `saves` is of: "gpu", or "host" (`planner.search.host_advice`)."""

    def describe(self) -> str:
        with_it = f" (+ {self.also})" if self.also else ""
        return f"{self.field} {self.before} -> {self.after}{with_it}"


def _halve_dp(lay: Layout, **changes: int) -> Layout | None:
    factor = 1
    for k, v in changes.items():
        factor *= v // getattr(lay, k)
    if lay.dp % factor:
        return None
    return lay.with_(dp=lay.dp // factor, **changes)


def _candidates(job: Job, lay: Layout) -> Iterator[tuple[int, str, object, Layout | None]]:
    if lay.zero_stage < 3:
        yield 0, "zero_stage", lay.zero_stage + 1, lay.with_(zero_stage=lay.zero_stage + 1)
    if lay.tp > 1 and not lay.sequence_parallel:
        yield 1, "sequence_parallel", True, lay.with_(sequence_parallel=True)
    if lay.recompute == "none":
        yield 2, "recompute", "selective", lay.with_(recompute="selective")
    if lay.micro_batch_size > 1:
        mbs = lay.micro_batch_size // 2 if lay.micro_batch_size % 2 == 0 else 1
        yield 3, "micro_batch_size", mbs, lay.with_(micro_batch_size=mbs)
    if lay.recompute != "full":
        yield 4, "recompute", "full", lay.with_(recompute="full")
    if lay.vpp > 1:
        yield 5, "vpp", 1, lay.with_(vpp=1)
    yield 6, "tp", lay.tp * 2, _halve_dp(lay, tp=lay.tp * 2)
    yield 7, "cp", lay.cp * 2, _halve_dp(lay, cp=lay.cp * 2)
    if lay.even_split:
        yield 8, "pp", lay.pp * 2, _halve_dp(lay, pp=lay.pp * 2)
    elif _titan_split(job, lay):  # torchtitan's own split, at the new pp too
        deeper = _halve_dp(lay, pp=lay.pp * 2)
        stages = torchtitan_stages(job.arch.num_layers, lay.pp * 2 * lay.vpp)
        yield 8, "pp", lay.pp * 2, deeper.with_(pipeline_layout=stages) if deeper else None


def _titan_split(job: Job, lay: Layout) -> bool:
    """Whether the layout runs torchtitan's own pipeline split (the plan gave none)."""
    stages = torchtitan_stages(job.arch.num_layers, lay.pp * lay.vpp)
    return job.framework == "torchtitan" and lay.pp > 1 and lay.pipeline_layout == stages


def _dsa_kernels(job: Job, layout: Layout, headroom_pct: float, peak: float) -> list[Change]:
    """DeepSeek sparse attention on Megatron's dense PyTorch path (`planner.model.dsa`): the
    sparse kernels instead (`training.dsa_kernel_backend`, a job field: the layout stays), where
    they run at this layout and save memory. Ranked first: they are faster too."""
    if not job.arch.has_dsa or job.dsa_kernel_backend != "none":
        return []
    out = []
    for kernels in ("tilelang", "cudnn"):
        other = replace(job, dsa_kernel_backend=kernels)
        if dsa.backend(other, layout.tp) != kernels or rules.violations(other, layout):
            continue
        rep = memory.estimate(other, layout, headroom_pct)
        if peak - rep.peak > 0:
            field = "training.dsa_kernel_backend"
            fits = rep.fits and host_memory.estimate(other, layout).fits
            change = Change(field, "none", kernels, layout, peak - rep.peak, fits, -1)
            out.append(replace(change, job=other))
    return out


def single_changes(job: Job, layout: Layout) -> Iterator[tuple[int, str, object, Layout, str]]:
    """(rank, field, new value, layout, what it turns on with it) of every single change of
    `_candidates` that passes the rules. A tp change turns sequence parallelism on with it
    where the rules need it at the new tp (MoE layers, torchtitan, DeepSeek sparse attention),
    and says so; no other change touches it."""
    for order, field, after, new in _candidates(job, layout):
        if new is None:
            continue
        also = ""
        if field == "tp" and not new.sequence_parallel:
            with_sp = new.with_(sequence_parallel=True)
            needed = rules.violations(job, new) and not rules.violations(job, with_sp)
            if job.arch.is_moe or needed:
                new, also = with_sp, "sequence_parallel"
        if not rules.violations(job, new):
            yield order, field, after, new, also


def by_cost(
    job: Job, changes: list[Change], cost: Callable[[Job, Layout], float] | None
) -> list[Change]:
    """Those that fit first, then cheapest: by `cost` (e.g. predicted step time, of the job and
    layout a change runs) where given, else by the fixed rank."""

    def key(c: Change) -> tuple[bool, float]:
        return (not c.fits, cost(c.job or job, c.layout) if cost else float(c.order))

    return sorted(changes, key=key)


def memory_changes(
    job: Job,
    layout: Layout,
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT,
    cost: Callable[[Job, Layout], float] | None = None,
) -> list[Change]:
    """Every valid single change (`single_changes`) that lowers the peak, those that fit first,
    cheapest first (`by_cost`)."""
    base = memory.estimate(job, layout, headroom_pct)
    out = []
    for order, field, after, new, also in single_changes(job, layout):
        rep = memory.estimate(job, new, headroom_pct)
        saves = base.peak - rep.peak
        if saves <= 0:
            continue
        before = getattr(layout, field)
        fits = rep.fits and host_memory.estimate(job, new).fits
        out.append(Change(field, before, after, new, saves, fits, order, also))
    out += _dsa_kernels(job, layout, headroom_pct, base.peak)
    return by_cost(job, out, cost)
