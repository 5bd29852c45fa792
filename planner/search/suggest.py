"""What `planner suggest` adds around the search: requests that contradict themselves (exit 2),
its rows (layouts that only trade context parallelism for micro-batch size folded into one,
`planner.search.twins`) ranked by step time, cost or goodput, and, when nothing fits, the binding
constraint and the smallest changes that would make something fit.

The torchtitan search (`planner.search.titan_variants`, `planner.search.titan_every`) is imported
by `search_rows` when a job asks for it: a Megatron job does not load it at start-up.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory, memory
from planner.ops import operations as ops
from planner.ops.assumptions import OpsParams
from planner.search import rules, top_k
from planner.search import space as space_mod
from planner.search.lean_peak import min_peak
from planner.search.pins import check_reachable, flag_text
from planner.search.rules import parallel as parallel_rules
from planner.search.space import Bound, Space
from planner.search.top_k import Candidate, SearchResult, rank_key
from planner.search.twins import Row


def check_space(job: Job, space: Space) -> None:
    """Impossible requests exit 2 naming the contradiction."""
    n = job.cluster.num_gpus
    for name in ("tp", "pp", "cp", "ep", "dp"):
        b: Bound = getattr(space, name)
        if b.lo > n:
            raise InputError(f"--{name} {b.lo} exceeds num_gpus ({n})")
    _check_degrees(n, space)
    if space.dp.lo > job.global_batch_size:
        raise InputError(
            f"--dp {space.dp.lo} exceeds global_batch_size ({job.global_batch_size}): every "
            f"data-parallel rank needs at least one sequence"
        )
    if space.mbs.lo > job.global_batch_size:
        raise InputError(
            f"--mbs {space.mbs.lo} exceeds global_batch_size ({job.global_batch_size})"
        )
    layers = job.arch.num_layers
    for name in ("pp", "vpp"):  # a virtual stage holds one layer at least
        if getattr(space, name).lo > layers:
            raise InputError(f"--{name} {getattr(space, name).lo} exceeds num_layers ({layers})")
    if space.ep.lo > 1 and not job.arch.is_moe:
        raise InputError(f"--ep {space.ep.lo}: {job.arch.name} has no experts")
    _check_pins(job, space)
    if not space.zero_stages:
        raise InputError("--zero: no ZeRO stage left to search")
    if space.framework == "torchtitan" and not {0, 3} & set(space.zero_stages):
        raise InputError(
            f"--zero {','.join(map(str, space.zero_stages))}: torchtitan runs FSDP2, ZeRO 3 (ZeRO "
            "0 where no data-parallel rank shards): allow 3"
        )
    if job.optimizer == "muon" and min(space.zero_stages) > 1:  # rules.muon
        raise InputError(
            f"--zero {','.join(map(str, space.zero_stages))}: Megatron's Muon optimizer runs "
            "without Megatron-FSDP (ZeRO 2, 3): allow ZeRO 0 or 1 (training.optimizer is muon)"
        )
    if not space.recompute:
        raise InputError("--recompute: no recompute policy left to search")
    # bounds that leave the search no layout before any memory is asked (`pins`)
    check_reachable(job, space)


def _check_pins(job: Job, space: Space) -> None:
    """A pinned degree the model cannot split by exits 2 naming it (the rules would reject every
    layout, which read as 'nothing fits'): an expert-parallel size that does not divide the
    experts (the search tries only divisors), a tensor-parallel size the attention heads or the
    query groups do not split by (`rules.parallel.heads`, `query_groups`)."""
    arch = job.arch
    ep, tp = space.ep, space.tp
    if ep.lo == ep.hi and arch.num_moe_experts and arch.num_moe_experts % ep.lo:
        raise InputError(f"--ep {ep.lo}: must divide {arch.name}'s {arch.num_moe_experts} experts")
    if tp.lo != tp.hi:
        return
    lay = Layout(tp=tp.lo)
    for rule in (parallel_rules.heads, parallel_rules.query_groups):
        broken = rule(job, lay)
        if broken is not None:
            raise InputError(f"--tp {tp.lo}: {broken.message} ({arch.name})")


def check_found(job: Job, found: list[tuple[Job, Layout]], path: Path | None) -> None:
    """Every (job, layout) the search found passes the rules `check` applies
    (`rules.violations`): the search filters layouts by the rules its space models, and a job
    setting that no layout runs (one the job's own fields break, such as MoE router groups on a
    dense model) is bad input (InputError, exit 2), reported as `check` reports it, naming the
    job file `path` (None: the flags)."""
    where = str(path) if path is not None else "<flags>"
    for j, lay in found:
        broken = rules.violations(j, lay)
        if broken:
            raise InputError("\n".join(f"{where}: {v.field}: {v.message}" for v in broken))


def _check_degrees(n: int, space: Space) -> None:
    """Pins and bounds on tp, cp, pp, dp must leave some tp x cp x pp x dp equal to num_gpus."""
    names = ("tp", "cp", "pp", "dp")
    bounds: dict[str, Bound] = {k: getattr(space, k) for k in names}
    for k, b in bounds.items():
        if b.lo == b.hi and n % b.lo:
            raise InputError(f"--{k} {b.lo} does not divide num_gpus ({n})")
    ds = space_mod.divisors(n)
    b_tp, b_cp, b_pp, b_dp = bounds.values()
    for tp in (d for d in ds if b_tp.admits(d)):
        for cp in (d for d in ds if b_cp.admits(d) and (n // tp) % d == 0):
            for pp in (d for d in ds if b_pp.admits(d) and (n // (tp * cp)) % d == 0):
                if b_dp.admits(n // (tp * cp * pp)):
                    return
    default = Space()
    given = " and ".join(flag_text(k, b) for k, b in bounds.items() if b != getattr(default, k))
    lo = math.prod(b.lo for b in bounds.values())
    hi = math.prod(min(b.hi, n) for b in bounds.values())
    if lo > n:
        why = f"need at least {lo} GPUs (tp x cp x pp x dp) but num_gpus is {n}"
    elif hi < n:
        why = f"allow at most {hi} GPUs (tp x cp x pp x dp) but num_gpus is {n}"
    else:
        why = f"no tp x cp x pp x dp within them equals num_gpus ({n})"
    raise InputError(f"{given}: {why}")


@dataclass(frozen=True)
class Infeasible:
    """Why nothing fits, and the smallest changes that would make something fit."""

    binding: str
    changes: list[str]


GPU_DOUBLINGS = 6
"""More GPUs are looked for up to 2^6 = 64 times the job's."""

CONFIRMS = 4
"""Searches (`_found`) a proposed change may take to confirm it: the leanest layout
(`lean_peak.min_peak`) sees the memory, not every rule a searched layout meets; where it fits
and the search finds nothing, the next value is tried, up to this many."""


def _found(job: Job, space: Space) -> bool:
    """Whether the search finds a layout of the job that fits: a proposed change's oracle."""
    return bool(search_rows(job, space, 1)[0].candidates)


def _cluster(job: Job, **update: object) -> Job:
    return replace(job, cluster=job.cluster.model_copy(update=update))


def _more_gpus(job: Job, space: Space, cap: float) -> str | None:
    """The fewest whole nodes above the job's GPUs on which some layout fits, to GPU_DOUBLINGS
    doublings: the node count doubled from the first whole node above until the leanest layout
    fits, then bisected below it, and confirmed by the search. The bisection assumes a count
    above one that fits fits too (the leanest layout's peak falls as the GPUs that share the
    model grow); a count whose divisors give no structure the batch and the layers split by can
    break it, so the count found fits but a smaller one may."""
    n, per_node = job.cluster.num_gpus, job.cluster.gpus_per_node
    top = max(n // per_node + 1, (n << GPU_DOUBLINGS) // per_node)

    def lean(nodes: int) -> bool:
        return min_peak(_cluster(job, num_gpus=nodes * per_node), space, cap)[0] <= cap

    below, nodes = n // per_node, n // per_node + 1
    while not lean(nodes):
        if nodes >= top:
            return None
        below, nodes = nodes, min(2 * nodes, top)
    while below + 1 < nodes:  # lean(nodes) holds throughout
        mid = (below + nodes) // 2
        below, nodes = (below, mid) if lean(mid) else (mid, nodes)
    for m in range(nodes, min(nodes + CONFIRMS, top + 1)):
        if _found(_cluster(job, num_gpus=m * per_node), space):
            nodes_text = f"{m} node{'s' if m > 1 else ''} of {per_node}"
            return f"{m * per_node} GPUs instead of {n} ({nodes_text})"
    return None


def _shorter(job: Job, space: Space, cap: float) -> str | None:
    """The longest halving of the sequence (to 256 tokens) on which some layout fits, confirmed
    by the search."""
    seq, tries = job.seq_length, 0
    while seq > 256 and tries < CONFIRMS:
        seq //= 2
        trial = replace(job, seq_length=seq)
        if min_peak(trial, space, cap)[0] <= cap:
            tries += 1
            if _found(trial, space):
                return f"seq_length {seq} instead of {job.seq_length}"
    return None


def _more_memory(job: Job, space: Space, peak: float, cap: float) -> str | None:
    """GPUs of the least whole GiB whose usable part holds the leanest layout's peak, confirmed
    by the search on them."""
    gib = 2**30
    needed = math.ceil(peak * job.cluster.capacity_bytes / cap / gib - 1e-9)
    for size in range(needed, needed + CONFIRMS):
        if _found(_cluster(job, memory_gib=float(size)), space):
            return f"GPUs with at least {size} GiB each"
    return None


def explain_infeasible(job: Job, space: Space, result: SearchResult) -> Infeasible:
    """The binding constraint and the smallest single changes (GPU memory, GPUs, sequence;
    batch where no layout passes the rules), each confirmed by the search on the changed job.
    A job that breaks a rule on its own never gets here: `suggest` refuses it first
    (`job_checks.check_job`, exit 2)."""
    if result.structures == 0 or result.space_size == 0:
        # the rules that rejected layouts inside the user's bounds first: those say why
        own = ("user bound on ", space_mod.CP_BOUND)
        ranked = sorted(result.rejected.items(), key=lambda kv: (kv[0].startswith(own), -kv[1]))
        top = ", ".join(f"{k} ({v})" for k, v in ranked[:3])
        changes = _batch_changes(job, space)
        return Infeasible(f"no layout passes the rules: {top}", changes)
    cap = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    peak, lay = min_peak(job, space)  # of the layouts the host's share holds
    host_too = False  # the leanest is one the host's share refuses too
    if lay is None or (peak > cap and result.rejected.get("host memory")):
        held = min_peak(job, space, fixed=False)  # its fixed pinned bytes aside
        if held[1] is not None and (lay is None or held[0] <= cap):
            (peak, lay), host_too = held, True
    gib = 2**30
    found: list[str | None] = []
    if lay is None:  # no leanest variant to size
        binding = f"memory: no layout fits in the {cap / gib:.1f} GiB available per GPU"
    elif peak <= cap and (host_too or result.rejected.get("host memory")):
        return _host_bound(job, space, lay, peak, cap)
    else:
        binding = (
            f"memory: the leanest layout ({lay.describe()}) needs "
            f"{peak / gib:.1f} GiB per GPU, {cap / gib:.1f} GiB available"
        )
        if host_too:  # more GPU memory alone fits nothing
            binding += ", and pins more host memory than a GPU's share holds"
        else:
            found.append(_more_memory(job, space, peak, cap))
    found += [_more_gpus(job, space, cap), _shorter(job, space, cap)]
    return Infeasible(binding, [c for c in found if c is not None])


def _host_bound(job: Job, space: Space, lay: Layout, peak: float, cap: float) -> Infeasible:
    """Where layouts fit the GPUs but every one is over its host share (`variants` rejects them
    on `host_memory`): host memory binds, the leanest layout's pinned bytes named by part (the
    checkpoint saves' staging, `host_checkpoint`, said to be what is over where the rest fits).
    The changes: the optimizer back on the GPU, saves without --async-save (which ZeRO 2/3 then
    make without pinned staging), or nodes with the host memory the leanest layout pins, each
    confirmed by the search."""
    gib = 2**30
    host = host_memory.estimate(job, lay)
    parts = ", ".join(f"{what} {b / gib:.1f} GiB" for what, b in host.parts())
    binding = (
        f"host memory: layouts fit in GPU memory (the leanest, {lay.describe()}, needs "
        f"{peak / gib:.1f} of {cap / gib:.1f} GiB) but pin more host memory than a GPU's share "
        f"holds: the leanest {host.total / gib:.1f} GiB a GPU, {host.capacity / gib:.1f} usable"
        f" ({parts})"
    )
    if host.checkpoint > 0 and host.total - host.checkpoint <= host.capacity:
        binding += "; it fits but for the pinned staging of its checkpoint saves"
    found = []
    if job.optimizer_offload_fraction > 0:
        # on the GPU the plan's moment dtype holds (--exp-avg-dtype reaches the GPU's Adam once
        # --optimizer-cpu-offload is gone; the host optimizer's are fp32 whatever it says)
        on_gpu = replace(job, optimizer_offload_fraction=0.0)
        if _found(on_gpu, space):
            dtype = job.optimizer_state_dtype
            moments = "" if dtype == "fp32" else f", {dtype} moments"
            found.append(
                f"training.optimizer_offload_fraction 0 (the optimizer on the GPU{moments})"
            )
    if host.checkpoint > 0 and job.async_save and _found(replace(job, async_save=False), space):
        found.append("training.async_save false (ZeRO 2/3's synchronous saves stage nothing)")
    per_gpu = host.total / gib + host_memory.HOST_RESERVED_GIB_PER_GPU
    node = math.ceil(per_gpu * job.cluster.gpus_per_node)
    for size in range(node, node + CONFIRMS):
        if _found(_host(job, size), space):
            least = _least_host(job, space, size)
            field = "host_memory_gib_per_node"
            found.append(f"nodes with at least {least} GiB of host memory ({field})")
            break
    return Infeasible(binding, found)


def _host(job: Job, gib: int) -> Job:
    return _cluster(job, host_memory_gib_per_node=float(gib))


def _least_host(job: Job, space: Space, found: int) -> int:
    """The least whole GiB of host memory a node needs for some layout to fit, given that
    `found` GiB does: bisected down to the nodes that pin nothing (the reserve alone), as more
    host memory never rejects a layout. The GPU-leanest layout `found` comes from need not pin
    the least (QA: tp 4 pp 2 ZeRO 1 at 383 GiB where tp 8 ZeRO 3 fits 376)."""
    lo = math.ceil(host_memory.HOST_RESERVED_GIB_PER_GPU * job.cluster.gpus_per_node)
    hi = found  # found fits; below lo nothing pinned fits
    while lo < hi:
        mid = (lo + hi) // 2
        if _found(_host(job, mid), space):
            hi = mid
        else:
            lo = mid + 1
    return hi


BATCH_GROWTH = 16
"""A larger global batch is looked for up to 16 times the job's."""


def _batch_changes(job: Job, space: Space) -> list[str]:
    """The smallest larger global batch on which some layout fits, confirmed by the search: of
    the multiples of each data-parallel size the GPUs allow above the batch (the batch splits
    evenly over them), up to BATCH_GROWTH times it, the first CONFIRMS whose structures pass the
    rules."""
    gbs, n = job.global_batch_size, job.cluster.num_gpus
    top = gbs * BATCH_GROWTH
    sizes = sorted({(gbs // dp + 1) * dp for dp in space_mod.divisors(n)} | {2 * gbs})
    tries = 0
    for size in (b for b in sizes if b <= top):
        trial = replace(job, global_batch_size=size)
        structs = space_mod.structures(trial, space, Counter())
        if not any(space_mod.options(trial, space, s) for s in structs):
            continue
        if _found(trial, space):
            return [f"global_batch_size {size} instead of {gbs}"]
        tries += 1
        if tries >= CONFIRMS:
            break
    return []


def search_rows(
    job: Job,
    space: Space,
    top: int,
    objective: str = "throughput",
    progress: Callable[[str], None] | None = None,
) -> tuple[SearchResult, list[Row[Candidate]]]:
    """The `top` best rows of twins (`planner.search.twins`: layouts that only trade cp for
    micro-batch size at the same step time share a row), ranked by step time or by `objective`,
    and the search result whose candidates are the rows' layouts.

    By step time the search certifies the rows itself (`top_k.search(..., fold_twins=True)`). By
    cost or goodput, rows by time are re-scored and re-sorted, first the max(4 x top, 20)
    fastest, twice as many each time the order is not yet certain: both objectives are the step
    time over the row's goodput times a constant of the job (GPU count x price), and goodput
    depends on the layout through the step (the checkpoint interval's whole steps) and the ZeRO
    stage (the checkpoint's size). Every row not fetched steps at least as long as the slowest
    fetched, so none scores below `ops.objective_floor` of that step (the job's least wall time
    per unit of work, under every goodput); once the top-th score is at or below that floor, or
    every row has been fetched, the order is exact. Twins have the same step time and ZeRO
    stage, and so the same score.
    For torchtitan the rows are over every (layout, `[torchtitan]` settings variant)
    (`planner.search.titan_variants`), each candidate a `TitanCandidate` with its settings."""
    ask = top if objective == "throughput" else max(4 * top, 20)
    params = OpsParams()

    def score(r: Row[Candidate]) -> tuple[float, tuple[float, tuple[int, ...]]]:
        zero = r.candidate.layout.zero_stage
        value = ops.objective_value(job, r.candidate.performance, objective, params, zero)
        return value, rank_key(r.candidate)

    while True:
        res = _rows_by_time(job, space, ask, progress)
        rows = res.rows
        if objective == "throughput":
            break
        rows = sorted(rows, key=score)
        if len(res.rows) < ask or not rows:  # every row there is
            break
        slowest = max(r.candidate.performance.step_time_s for r in res.rows)
        if score(rows[min(top, len(rows)) - 1])[0] <= ops.objective_floor(
            job, slowest, objective, params
        ):
            break
        ask *= 2
    rows = rows[:top]
    return replace(res, candidates=[r.candidate for r in rows], rows=rows), rows


def _rows_by_time(
    job: Job, space: Space, ask: int, progress: Callable[[str], None] | None
) -> SearchResult:
    """The `ask` fastest rows, certified by the search (twins folded)."""
    if job.framework == "torchtitan" and not job.pools:
        # torchtitan's own settings beside the layout (`planner.search.titan_variants`)
        from planner.search import titan_every, titan_variants

        found = titan_variants.search_variants(job, space, ask, progress)
        return titan_variants.result(titan_every.add_every(job, space, ask, found))
    return top_k.search(job, space, ask, progress=progress, fold_twins=True)
