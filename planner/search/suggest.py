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
from planner.model import memory
from planner.ops import operations as ops
from planner.ops.assumptions import OpsParams
from planner.search import rules, top_k
from planner.search import space as space_mod
from planner.search.rules import parallel as parallel_rules
from planner.search.rungs import leanest
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


def _flag(name: str, b: Bound) -> str:
    if b.lo == b.hi:
        return f"--{name} {b.lo}"
    return f"--{name} {b.lo}-{b.hi if b.bounded_above() else ''}"


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
    given = " and ".join(_flag(k, b) for k, b in bounds.items() if b != getattr(default, k))
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


def _min_peak(job: Job, space: Space) -> tuple[float, Layout | None]:
    """The smallest peak memory any layout of the space reaches (most sharding, the leanest
    memory savers, smallest micro-batch, no interleaving), and that layout."""
    lean = replace(
        space,
        zero_stages=(max(space.zero_stages),),
        recompute=(space.recompute[-1],),
        mbs=Bound(space.mbs.lo, space.mbs.lo),
        vpp=Bound(1, 1),
    )
    best: tuple[float, Layout | None] = (float("inf"), None)
    for s in space_mod.structures(job, lean, Counter()):
        for mbs, vpp, split in space_mod.options(job, lean, s):
            for base in space_mod.bases(job, s, mbs, vpp, split, lean):
                # the most sharding Megatron allows on it (none of the space's stages: no
                # layout of this base is searched), and its leanest rungs
                stages = space_mod.zero_stages(space, base.layout)
                if not stages:
                    continue
                zbase = base.layout.with_(zero_stage=max(stages))
                for rung in leanest(base.single, base.ladders) or list(base.single):
                    lay = rung.on(zbase)
                    peak = memory.estimate(job, lay, space.headroom_pct, all_stages=False).peak
                    if peak < best[0]:
                        best = (peak, lay)
    return best


def explain_infeasible(job: Job, space: Space, result: SearchResult) -> Infeasible:
    """The binding constraint and the smallest single change (GPUs, memory, sequence, batch)."""
    if result.structures == 0 or result.space_size == 0:
        # the rules that rejected layouts inside the user's bounds first: those say why
        own = ("user bound on ", space_mod.CP_BOUND)
        ranked = sorted(result.rejected.items(), key=lambda kv: (kv[0].startswith(own), -kv[1]))
        top = ", ".join(f"{k} ({v})" for k, v in ranked[:3])
        changes = _batch_changes(job, space)
        top += "".join(f"; {v.field}: {v.message}" for v in rules.job_violations(job))
        return Infeasible(f"no layout passes the rules: {top}", changes)
    cap = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    peak, lay = _min_peak(job, space)
    gib = 2**30
    if lay is None:  # no leanest variant to size (its structures have none at vpp 1)
        binding = f"memory: no layout fits in the {cap / gib:.1f} GiB available per GPU"
        changes = []
    else:
        binding = (
            f"memory: the leanest layout ({lay.describe()}) needs "
            f"{peak / gib:.1f} GiB per GPU, {cap / gib:.1f} GiB available"
        )
        # the physical size whose usable part holds the peak
        needed = peak * job.cluster.capacity_bytes / cap
        changes = [f"GPUs with at least {needed / gib:.0f} GiB each"]
    for k in range(1, 7):
        n = job.cluster.num_gpus * 2**k
        bigger = replace(job, cluster=job.cluster.model_copy(update={"num_gpus": n}))
        if _min_peak(bigger, space)[0] <= cap:
            changes.append(f"{n} GPUs instead of {job.cluster.num_gpus}")
            break
    seq = job.seq_length
    while seq > 256:
        seq //= 2
        if _min_peak(replace(job, seq_length=seq), space)[0] <= cap:
            changes.append(f"seq_length {seq} instead of {job.seq_length}")
            break
    return Infeasible(binding, changes)


def _batch_changes(job: Job, space: Space) -> list[str]:
    out = []
    for gbs in (job.global_batch_size * 2**k for k in range(1, 5)):
        trial = replace(job, global_batch_size=gbs)
        structs = space_mod.structures(trial, space, Counter())
        if any(space_mod.options(trial, space, s) for s in structs):
            out.append(f"global_batch_size {gbs} instead of {job.global_batch_size}")
            break
    return out


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
    cost or goodput the first max(4 x top, 20) rows by time are re-scored and re-sorted: for one
    job both are the step time times a factor that does not depend on the layout (GPU count x
    price; 1 / goodput, which depends on the step time only through the checkpoint interval's
    rounding to whole steps); twins have the same step time and so the same cost and goodput.
    For torchtitan the rows are over every (layout, `[torchtitan]` settings variant)
    (`planner.search.titan_variants`), each candidate a `TitanCandidate` with its settings."""
    ask = top if objective == "throughput" else max(4 * top, 20)
    if job.framework == "torchtitan" and not job.pools:
        # torchtitan's own settings beside the layout (`planner.search.titan_variants`)
        from planner.search import titan_every, titan_variants

        found = titan_variants.search_variants(job, space, ask, progress)
        res = titan_variants.result(titan_every.add_every(job, space, ask, found))
    else:
        res = top_k.search(job, space, ask, progress=progress, fold_twins=True)
    rows = res.rows
    if objective != "throughput":
        params = OpsParams()

        def score(r: Row[Candidate]) -> tuple[float, tuple[float, tuple[int, ...]]]:
            value = ops.objective_value(job, r.candidate.performance, objective, params)
            return value, rank_key(r.candidate)

        rows = sorted(rows, key=score)
    rows = rows[:top]
    return replace(res, candidates=[r.candidate for r in rows], rows=rows), rows
