"""Single changes to a layout that save memory, with the bytes each saves.

`planner check` lists the ones that make a layout fit, cheapest first. Each candidate changes one
knob (ZeRO stage, recompute, partial recompute's layers (Megatron's recompute_num_layers,
torchtitan's every N-th layer), sequence parallelism, micro-batch size, tp, pp, cp, vpp, ep,
expert tp, whole layers offloaded to the CPU, the modules whose saved inputs go to the host (the
sets the search tries, `rungs.OFFLOAD_SETS`), a larger share of those modules' groups or of the
optimizer on the host (`advice_offload.raised`); and for DeepSeek sparse attention on Megatron's
dense path, its sparse kernels) and must still pass `planner.search.rules`; the total GPU count
and the global batch stay as they are, so more tp, cp or pp takes its factor from dp, less
gives it to dp, and the change says so (`tp 8 -> 16 (+ dp 4 -> 2)`), as it says whatever else
the plan file must change with it (`_also`). Every value of a knob that can help is tried (each
higher ZeRO stage, each smaller micro-batch, each other recompute layer count, each other vpp,
each tp, cp, pp the data-parallel ranks leave room for, each smaller tp, cp or pp, each larger
ep, each other expert tp, the fewest offloaded layers that fit, the least or fastest share that
fits; a tp from 1 with sequence parallelism and without), and the cheapest of each knob is kept:
the one that fits at the shortest step where some fits, else the one that saves most (a tp or cp
given back to dp only where it fits: `gives_back`). A change makes the layout fit only where what
it offloads fits in host memory too (`planner.model.host_memory`; `planner.search.host_advice`
lists the changes for a layout over host memory alone).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import every_n
from planner.inputs.torchtitan import default_schedule
from planner.model import dsa, host_memory, memory
from planner.search import advice_offload, rules
from planner.search.advice_pipeline import other_pps, other_vpps
from planner.search.rules.torchtitan import shard_degree
from planner.search.rungs import OFFLOAD_SETS


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
    """What the change changes with it, joined by " + " (`_also`): the dp more tp, cp or pp takes
    its factor from (`dp 8 -> 4`), the vpp a pp change re-derives, sequence parallelism where the
    rules need it or from tp 1 (`sequence_parallel`, `sequence_parallel off`), torchtitan's
    default schedule at a new vpp; for host memory's pairs, the GPU change offloading less goes
    with (`planner.search.host_advice`)."""
    job: Job | None = None
    """The job the change runs under, where it changes a job field (the DSA kernels)."""
    memory: str = "gpu"
    """The memory `saves` is of: "gpu", or "host" (`planner.search.host_advice`)."""

    def describe(self) -> str:
        with_it = f" (+ {self.also})" if self.also else ""
        return f"{self.field} {shown(self.before)} -> {shown(self.after)}{with_it}"


def shown(value: object) -> str:
    """A setting as `describe` writes it: a module list comma-joined ("none" when empty)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def _factors(n: int) -> list[int]:
    """The divisors of n above 1, ascending: the factors more tp or cp can take from dp."""
    return [k for k in range(2, n + 1) if n % k == 0]


EVERY = "torchtitan.selective_layer_every"
"""torchtitan's every-N-th-layer recompute as a change names it (`Layout.recompute_every`)."""


def _more_recompute(job: Job, lay: Layout) -> Iterator[tuple[str, object, Layout]]:
    """(field, value, layout) of partial full recompute moved on: Megatron's block or uniform
    recompute_num_layers, each other count up to a chunk's layers (block recomputes more
    layers with more; uniform keeps one input a group and rebuilds a group at once, so either
    way can save); torchtitan's every N-th layer, each smaller N down to 1 (every layer)."""
    if lay.recompute != "full":
        return
    if lay.recompute_every:
        for n in range(lay.recompute_every - 1, 0, -1):
            yield EVERY, n, every_n(lay, n)
    elif job.framework == "megatron":
        most = max(len(c) for chunks in lay.chunk_layers(job.arch.num_layers) for c in chunks)
        for n in range(1, most + 1):
            if n != lay.recompute_num_layers:
                yield "recompute_num_layers", n, lay.with_(recompute_num_layers=n)


def _candidates(job: Job, lay: Layout) -> Iterator[tuple[int, str, object, Layout | None]]:
    """(rank, field, new value, layout) of every value of each knob that can save memory, each
    knob's values from the nearest out: each higher ZeRO stage, each smaller micro-batch, more
    recompute (`_more_recompute`), each other vpp, tp and cp times each factor of dp (dp divided
    by it), pp times or divided by each factor (`advice_pipeline`), each larger ep the experts
    split by, each other expert tp."""
    for zero in range(lay.zero_stage + 1, 4):
        yield 0, "zero_stage", zero, lay.with_(zero_stage=zero)
    if lay.tp > 1 and not lay.sequence_parallel:
        yield 1, "sequence_parallel", True, lay.with_(sequence_parallel=True)
    if lay.recompute == "none":
        yield 2, "recompute", "selective", lay.with_(recompute="selective")
    for mbs in range(lay.micro_batch_size - 1, 0, -1):  # the rules keep those that divide
        yield 3, "micro_batch_size", mbs, lay.with_(micro_batch_size=mbs)
    if lay.recompute != "full":
        yield 4, "recompute", "full", lay.with_(recompute="full")
    for field, value, new in _more_recompute(job, lay):
        yield 4, field, value, new
    for vpp, new in other_vpps(job, lay):
        yield 5, "vpp", vpp, new
    factors = _factors(lay.dp)
    for k in factors:
        yield 6, "tp", lay.tp * k, _titan_zero(job, lay.with_(tp=lay.tp * k, dp=lay.dp // k))
    for k in _factors(lay.tp):
        yield 6, "tp", lay.tp // k, _given_back(job, lay.with_(tp=lay.tp // k, dp=lay.dp * k))
    for k in factors:
        yield 7, "cp", lay.cp * k, _titan_zero(job, lay.with_(cp=lay.cp * k, dp=lay.dp // k))
    for k in _factors(lay.cp):
        yield 7, "cp", lay.cp // k, _given_back(job, lay.with_(cp=lay.cp // k, dp=lay.dp * k))
    for pp, reshaped in other_pps(job, lay):
        yield 8, "pp", pp, reshaped and _titan_zero(job, reshaped)
    experts = job.arch.num_moe_experts or 1
    # a plan's ep raised from 1 under torchtitan reads its etp as 1 (`plan_layout._expert_tp`)
    ep_etp = 1 if job.framework == "torchtitan" and lay.etp is None else lay.etp
    for ep in (e for e in range(lay.ep + 1, experts + 1) if experts % e == 0):
        yield 9, "ep", ep, lay.with_(ep=ep, etp=ep_etp)
    if job.arch.is_moe:  # each other expert tp the stage's ranks leave room for beside ep:
        # more splits each expert's weights, less leaves more expert-data-parallel ranks to
        # shard their optimizer over
        room = lay.tp * lay.cp * lay.dp // lay.ep
        for etp in (e for e in range(1, room + 1) if room % e == 0 and e != lay.expert_tp):
            yield 10, "etp", etp, lay.with_(etp=etp)
    if not lay.offload_modules and not lay.cpu_offloading_num_layers:
        for modules in OFFLOAD_SETS:  # the rules keep those the model and settings allow
            yield 4, "offload_modules", modules, lay.with_(offload_modules=modules)


def _titan_zero(job: Job, new: Layout) -> Layout:
    """A layout whose tp, cp or pp moved a factor to or from dp, under torchtitan at the ZeRO
    stage its data-parallel shards now ask (`rules.torchtitan.sharding`: FSDP2, zero_stage 3,
    wherever dp_shard x cp > 1, else replicated, zero_stage 0): more tp or pp leaves fewer
    shards, down to one where dp is dp_replicate, less leaves more (`_also` names the change:
    `zero_stage 3 -> 0`; a dp_replicate that no longer divides dp the rules refuse). A Megatron
    layout as it is."""
    if job.framework != "torchtitan":
        return new
    return new.with_(zero_stage=3 if shard_degree(job, new) > 1 else 0)


def _given_back(job: Job, new: Layout) -> Layout:
    """A layout with tp or cp given back to dp, as the plan file so edited runs it: at tp 1
    without sequence parallelism (Megatron turns it off there, `plan_layout`) or TP overlap
    (which needs it: `rules.parallel.sequence_parallel`); under torchtitan at the ZeRO stage
    its data-parallel shards now ask (`_titan_zero`)."""
    if new.tp == 1:
        new = new.with_(sequence_parallel=False, tp_comm_overlap=False)
    return _titan_zero(job, new)


def gives_back(field: str, before: object, after: object) -> bool:
    """Whether a change gives tp or cp back to dp. Such a change is listed only where it fits
    (`memory_changes`, `host_advice`): a rank then holds more of each layer, so it saves memory
    only where something else moves with it (fewer micro-batches a rank, so fewer in flight at
    the pipeline's first stage; context parallelism's exchange buffers at cp 1), and the largest
    saving of one that does not fit is no lead to follow."""
    return (
        field in ("tp", "cp")
        and isinstance(before, int)
        and isinstance(after, int)
        and (after < before)
    )


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


def field_value(layout: Layout, field: str) -> object:
    """The layout's value of a `single_changes` field, as a change names it: etp is
    `Layout.expert_tp` (the field `etp` is None where it follows tp), torchtitan's every-N
    recompute `Layout.recompute_every`."""
    if field == EVERY:
        return layout.recompute_every
    return layout.expert_tp if field == "etp" else getattr(layout, field)


def _sp_variants(job: Job, layout: Layout, field: str, new: Layout) -> list[Layout]:
    """The layouts a candidate runs as, as to sequence parallelism: a tp change with it on
    where the rules need it at the new tp (MoE layers, torchtitan, DeepSeek sparse attention);
    from tp 1, where the plan's setting had no meaning (a plan that leaves it out runs with it
    at any tp > 1, one that sets it false without it), both where the rules allow it off
    (`memory_changes` keeps the faster); else the candidate as it is (to tp 1 without it:
    `_given_back`)."""
    if field != "tp" or new.sequence_parallel or new.tp == 1:
        return [new]
    with_sp = new.with_(sequence_parallel=True)
    if job.arch.is_moe or (rules.violations(job, new) and not rules.violations(job, with_sp)):
        return [with_sp]
    return [with_sp, new] if layout.tp == 1 else [new]


def _also(job: Job, layout: Layout, field: str, new: Layout) -> str:
    """What a change of `field` changes with it, as the plan file must say it too, joined by
    " + ": the dp more or less tp, cp or pp takes its factor from or gives it to (`dp 8 -> 4`:
    else the world size no longer adds up); the vpp a pp change re-derives (a layout string's
    stages over the new pp, or none at pp 1); sequence parallelism from tp 1, on
    (`sequence_parallel`) or off (`sequence_parallel off`: a plan that leaves it out would run
    it at the new tp), and to tp 1, off, with TP overlap (`tp_comm_overlap off`: the rules
    refuse it without sequence parallelism, `_given_back`); the ZeRO stage torchtitan's shards
    ask at the new tp, cp or pp (`zero_stage 0 -> 3`, `3 -> 0`: `_titan_zero`); torchtitan's
    schedule where the plan names none and the default at the new vpp is another (1F1B at one
    stage a rank, Interleaved1F1B at more: a plan naming the old one explicitly, the same plan,
    would have its stages refused)."""
    also = [f"dp {layout.dp} -> {new.dp}"] if new.dp != layout.dp else []
    if field != "vpp" and new.vpp != layout.vpp:
        also.append(f"vpp {layout.vpp} -> {new.vpp}")
    if field == "tp" and new.sequence_parallel != layout.sequence_parallel:
        also.append("sequence_parallel" if new.sequence_parallel else "sequence_parallel off")
    elif field == "tp" and layout.tp == 1:
        also.append("sequence_parallel off")
    if new.tp_comm_overlap != layout.tp_comm_overlap:
        also.append("tp_comm_overlap" if new.tp_comm_overlap else "tp_comm_overlap off")
    if field != "zero_stage" and new.zero_stage != layout.zero_stage:
        also.append(f"zero_stage {layout.zero_stage} -> {new.zero_stage}")
    named = job.titan.pipeline_schedule is not None
    was, now = default_schedule(layout.vpp), default_schedule(new.vpp)
    if job.framework == "torchtitan" and new.pp > 1 and not named and was != now:
        also.append(f"torchtitan.pipeline_schedule {was} -> {now}")
    return " + ".join(also)


def single_changes(job: Job, layout: Layout) -> Iterator[tuple[int, str, object, Layout, str]]:
    """(rank, field, new value, layout, what it changes with it) of every single change of
    `_candidates` that passes the rules, in each of its `_sp_variants`, with what the plan file
    must change with it (`_also`); no other change touches sequence parallelism."""
    for order, field, after, cand in _candidates(job, layout):
        if cand is None:
            continue
        for new in _sp_variants(job, layout, field, cand):
            if not rules.violations(job, new):
                yield order, field, after, new, _also(job, layout, field, new)


def by_cost(
    job: Job, changes: list[Change], cost: Callable[[Job, Layout], float] | None
) -> list[Change]:
    """Those that fit first, then cheapest: by `cost` (e.g. predicted step time, of the job and
    layout a change runs) where given, else by the fixed rank (ties in the order given)."""

    def key(c: Change) -> tuple[bool, float]:
        return (not c.fits, cost(c.job or job, c.layout) if cost else float(c.order))

    return sorted(changes, key=key)


def ranked_each(
    job: Job,
    changes: list[Change],
    cost: Callable[[Job, Layout], float] | None,
    knob: Callable[[Change], object],
) -> list[list[Change]]:
    """Each `knob`'s changes (a setting, or a pair of them), best first: those that fit, cheapest
    first (`by_cost`), else (none fits) by saving, the largest first; the knobs in the order
    they first come."""
    groups: dict[object, list[Change]] = {}
    for c in changes:
        groups.setdefault(knob(c), []).append(c)
    out = []
    for group in groups.values():
        fitting = [c for c in group if c.fits]
        out.append(
            by_cost(job, fitting, cost) if fitting else sorted(group, key=lambda c: -c.saves)
        )
    return out


def cheapest_each(
    job: Job,
    changes: list[Change],
    cost: Callable[[Job, Layout], float] | None,
    knob: Callable[[Change], object],
) -> list[Change]:
    """One change per `knob`: the first of `ranked_each`, the cheapest that fits, else the one
    that saves most; in the order the knobs first come."""
    return [ranked[0] for ranked in ranked_each(job, changes, cost, knob)]


def _offload_layers(job: Job, layout: Layout, headroom_pct: float, peak: float) -> list[Change]:
    """More whole layers offloaded to the CPU (`cpu_offloading_num_layers`, where the rules allow
    it: pp 1, no recompute, Megatron): the fewest that fit the GPU, by bisection (its peak falls
    as layers leave it; the host's grows, so where the fewest overflow the host none fits both);
    where none fits, the most the rules allow (num_layers - 1), the largest saving."""
    k, top = layout.cpu_offloading_num_layers, job.arch.num_layers - 1

    def at(n: int) -> Layout:
        return layout.with_(cpu_offloading_num_layers=n)

    if k >= top or rules.violations(job, at(top)):
        return []

    def fits(n: int) -> bool:
        return memory.estimate(job, at(n), headroom_pct).fits

    lo, hi = k + 1, top
    if fits(top):
        while lo < hi:  # the fewest that fit: fits(hi) holds throughout
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    n = hi
    new = at(n)
    if rules.violations(job, new):
        return []
    rep = memory.estimate(job, new, headroom_pct)
    if peak - rep.peak <= 0:
        return []
    ok = rep.fits and host_memory.estimate(job, new).fits
    return [Change("cpu_offloading_num_layers", k, n, new, peak - rep.peak, ok, 4)]


def memory_changes(
    job: Job,
    layout: Layout,
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT,
    cost: Callable[[Job, Layout], float] | None = None,
) -> list[Change]:
    """The cheapest of each knob of `memory_choices`: those that fit first, cheapest first."""
    return [ranked[0] for ranked in memory_choices(job, layout, headroom_pct, cost)]


def memory_choices(
    job: Job,
    layout: Layout,
    headroom_pct: float = memory.DEFAULT_HEADROOM_PCT,
    cost: Callable[[Job, Layout], float] | None = None,
) -> list[list[Change]]:
    """The valid single changes (`single_changes`, the offloaded shares raised:
    `advice_offload.raised`, `_offload_layers`, `_dsa_kernels`) that lower the peak, a give-back
    of tp or cp only where it fits (`gives_back`), each knob's best first (`ranked_each`), the
    knobs in the order of their best: those that fit first, cheapest first (`by_cost`)."""
    base = memory.estimate(job, layout, headroom_pct)
    out = []

    def judge(
        order: int, field: str, before: object, after: object, run: Job, new: Layout, also: str = ""
    ) -> None:
        rep = memory.estimate(run, new, headroom_pct)
        saves = base.peak - rep.peak
        fits = rep.fits and host_memory.estimate(run, new).fits
        if saves > 0 and (fits or not gives_back(field, before, after)):
            changed = run if run is not job else None
            out.append(Change(field, before, after, new, saves, fits, order, also, changed))

    for order, field, after, new, also in single_changes(job, layout):
        judge(order, field, field_value(layout, field), after, job, new, also)
    for field, before, after, run, new in advice_offload.raised(job, layout, headroom_pct, cost):
        if not rules.violations(run, new):
            judge(4, field, before, after, run, new)
    out += _offload_layers(job, layout, headroom_pct, base.peak)
    out += _dsa_kernels(job, layout, headroom_pct, base.peak)
    ranked = ranked_each(job, out, cost, lambda c: c.field)
    of = {id(r[0]): r for r in ranked}
    return [of[id(c)] for c in by_cost(job, [r[0] for r in ranked], cost)]
