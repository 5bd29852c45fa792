"""`planner suggest` on a cluster of pools (issue 25): the pooled search's table
(`planner.search.pool_search`), the plan file of its top pick, and, ranked by cost, the
comparison with the best plan of each pool on its own (the ordinary search, one GPU kind)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from planner import __version__
from planner.cli.common import emit_json, err, headroom_header, launch_notes, out
from planner.cli.render_suggest import folded_lines
from planner.cli.report import host_dict, job_dict, layout_dict, memory_dict, performance_dict
from planner.inputs import plan_writer
from planner.inputs.errors import EXIT_NO, InputError
from planner.inputs.plan import Job
from planner.inputs.units import MIB, against, over
from planner.model import host_memory
from planner.ops.assumptions import OpsParams
from planner.ops.operations import operations
from planner.search import pool_search
from planner.search.pool_costs import slow_link, usd_per_million_tokens
from planner.search.pool_plan import PoolPlan
from planner.search.space import Space
from planner.search.suggest import search_rows


@dataclass(frozen=True)
class Alone:
    """The best plan of one pool on its own."""

    pool: str
    gpus: int
    layout: str
    step_time_s: float | None
    usd_per_mtok: float | None


def alone(job: Job, space: Space, objective: str) -> list[Alone]:
    """Each pool's best plan on its own GPUs (the ordinary search), its $ per million tokens
    with failures at the pool's price, as the pooled plans' (`pool_costs`) and explain's."""
    rows = []
    for pool in job.pools:
        solo = replace(job, cluster=pool.cluster, pools=(), between_pools=None)
        res, _ = search_rows(solo, space, 1, "throughput")
        if not res.candidates:
            rows.append(Alone(pool.name, pool.cluster.num_gpus, "nothing fits", None, None))
            continue
        c = res.candidates[0]
        step = c.performance.step_time_s
        usd = None
        if pool.price is not None:
            priced = OpsParams(price_usd_per_gpu_hour=pool.price)
            o = operations(solo, c.performance, None, priced, c.layout.zero_stage)
            usd = o.usd_per_million_tokens
        rows.append(Alone(pool.name, pool.cluster.num_gpus, c.layout.describe(), step, usd))
    return rows


def _stage_layers(p: PoolPlan) -> list[int]:
    """Decoder layers of each pipeline stage."""
    if p.split is not None:
        return list(p.split.layers)
    return [sum(map(len, c)) for c in p.layout.chunk_layers(p.job.arch.num_layers)]


def _split_text(p: PoolPlan) -> str:
    if p.split is None:  # the data-parallel replicas span the pools: each runs every stage
        return f"every pool: {'/'.join(map(str, _stage_layers(p)))}"
    names = [st.pool for st in p.memory.stages]  # the pools in the plan's pipeline order
    blocks = []
    for name in dict.fromkeys(names):
        layers = [y for y, n in zip(p.split.layers, names, strict=True) if n == name]
        blocks.append(f"{name}: {'/'.join(map(str, layers))}")
    return "; ".join(blocks)


def run(
    job: Job,
    space: Space,
    top: int,
    objective: str,
    as_json: bool,
    write_plan: Path | None,
    model_ref: dict[str, Any] | None,
    defaulted: tuple[str, ...] = (),
) -> None:
    """Search, print or emit, write the plan; exit 1 when nothing fits. The JSON holds the job
    as suggest's does (`report.job_dict`: `defaulted` its fields nobody gave)."""
    _unhonoured(space)
    res = pool_search.search(
        job, space.headroom_pct, objective, top, progress=lambda m: err.print(m)
    )
    solo = alone(job, space, objective) if objective == "cost" else []
    if not res.plans:
        msg = f"no layout of {res.layouts} fits the pools"
        near = res.closest
        if res.refused is not None:
            msg += f": every layout breaks a rule of Megatron-LM's: {res.refused}"
        elif res.host_over is not None:
            msg += f": those that fit the GPUs are over a pool's host; the fastest, {res.host_over}"
        elif near is not None:  # the binding constraint: which stage, which pool, by how much
            pool = job.pools[near.pool]
            msg += (
                f"; the closest, {near.layout.describe()}, needs {over(near.over_mib * MIB)} "
                f"more on stage {near.stage} (pool {pool.name!r}, {pool.cluster.gpu.name}) than "
                f"its {near.capacity_mib / 1024:.1f} GiB usable"
            )
        if as_json:
            emit_json({"candidates": [], "job": job_dict(job, defaulted), "reason": msg})
        else:
            out.print(msg)
        raise typer.Exit(EXIT_NO)
    best = res.plans[0]
    if write_plan is not None:
        _write(job, best, write_plan, model_ref, space.headroom_pct)
    if as_json:
        doc: dict[str, Any] = {
            "candidates": [_plan_dict(p) for p in res.plans],
            "job": job_dict(job, defaulted),
            "layouts": res.layouts,
            "solved": res.solved,
            "single_pool": [s.__dict__ for s in solo],
        }
        if job.pools_data_parallel:
            doc["across_pools"] = across_dict(res)
        emit_json(doc)
        return
    t = Table(title=f"Pools: top {len(res.plans)} of {res.layouts} layouts ({res.solved} solved)")
    for col in ("#", "layout", "layers per stage", "step s", "tok/s/GPU", "$/Mtok", "peak/cap"):
        t.add_column(col)
    for i, p in enumerate(res.plans, 1):
        usd = usd_per_million_tokens(p.job, p.layout, p.performance)
        t.add_row(
            str(i),
            p.layout.describe(),
            _split_text(p),
            f"{p.performance.step_time_s:.3f}",
            f"{p.performance.tokens_per_s_per_gpu:,.0f}",
            "-" if usd is None else f"{usd:.3f}",
            "/".join(against(p.memory.peak, p.memory.capacity)),
        )
    out.print(t)
    for line in folded_lines(res.twins):
        out.print(line, highlight=False)
    for s in solo:
        price = "no price" if s.usd_per_mtok is None else f"${s.usd_per_mtok:.3f}/Mtok"
        step = "-" if s.step_time_s is None else f"{s.step_time_s:.3f} s"
        out.print(f"{s.pool} alone ({s.gpus} GPUs): {s.layout}, step {step}, {price}")
    if job.pools_data_parallel:
        out.print(across_text(res), highlight=False)
    if solo:
        out.print(_verdict(best, solo))
    if write_plan is not None:
        out.print(f"wrote {write_plan}")


UNHONOURED = {
    "tp": "--tp / --max-tp",
    "pp": "--pp / --max-pp",
    "cp": "--cp / --max-cp / --no-cp",
    "ep": "--ep / --max-ep",
    "dp": "--dp",
    "vpp": "--vpp",
    "mbs": "--mbs",
    "zero_stages": "--zero",
    "recompute": "--recompute",
    "tp_across_nodes": "--tp-across-nodes",
    "uneven": "--no-uneven",
}
"""The search flags (by `Space` field) the pooled search (`pool_search`) does not read: it
searches its own uniform degrees, ZeRO 1 and its recompute ladder."""


def _unhonoured(space: Space) -> None:
    """Exit 2 naming the search flags given that the pooled search would ignore (it ran
    without them, silently, before)."""
    plain = Space(headroom_pct=space.headroom_pct, framework=space.framework)
    given = [
        flag for field, flag in UNHONOURED.items() if getattr(space, field) != getattr(plain, field)
    ]
    if given:
        raise InputError(
            f"{', '.join(given)}: the search over pools does not take them (it searches its own "
            "uniform degrees, ZeRO 1 and its recompute ladder); drop them, or plan each pool on "
            "its own"
        )


def _verdict(best: PoolPlan, solo: list[Alone]) -> str:
    mine = usd_per_million_tokens(best.job, best.layout, best.performance)
    priced = [s for s in solo if s.usd_per_mtok is not None]
    if mine is None or not priced:
        return "cost: a pool's GPU has no price; no comparison"
    better = min(priced, key=lambda s: s.usd_per_mtok or 0.0)
    assert better.usd_per_mtok is not None
    if mine <= better.usd_per_mtok:
        return (
            f"the pooled plan costs ${mine:.3f}/Mtok, {1 - mine / better.usd_per_mtok:.1%} less "
            f"than the better single pool ({better.pool}, ${better.usd_per_mtok:.3f}/Mtok)"
        )
    worse = [s for s in priced if s is not better]
    why = "the link between pools and the stages' imbalance cost more than the mix saves"
    if worse and (worse[0].usd_per_mtok or 0.0) > better.usd_per_mtok:
        w = worse[0]
        why = (
            f"{w.pool} alone costs ${w.usd_per_mtok:.3f}/Mtok, more than {better.pool}: its "
            "throughput per GPU-dollar is lower, so every layer moved onto it raises the cost "
            "per token (the mix wins on step time, not on cost)"
        )
    return (
        f"the pooled plan costs ${mine:.3f}/Mtok, {mine / better.usd_per_mtok - 1:.1%} more than "
        f"{better.pool} alone (${better.usd_per_mtok:.3f}/Mtok): {why}"
    )


def _plan_dict(p: PoolPlan) -> dict[str, Any]:
    return {
        "parallel": layout_dict(p.layout),
        "pools": [q.name for q in p.job.pools],
        "layers_per_stage": _stage_layers(p),
        "recompute_num_layers": None if p.split is None else p.split.recompute_layers,
        "memory": {
            **memory_dict(p.memory),
            "host": host_dict(host_memory.estimate(p.job, p.layout)),
        },
        "performance": performance_dict(p.performance, p.job.arch.has_dsa),
        "usd_per_million_tokens": usd_per_million_tokens(p.job, p.layout, p.performance),
    }


def _write(
    job: Job, best: PoolPlan, path: Path, model_ref: dict[str, Any] | None, headroom: float
) -> None:
    gpus = " + ".join(f"{q.cluster.num_gpus} x {q.cluster.gpu.name}" for q in best.job.pools)
    header = [
        f"planner {__version__} suggest: {job.arch.name} on {gpus} (pools in pipeline order)",
        f"predicted step {best.performance.step_time_s:.3f} s, "
        f"{best.performance.tokens_per_s_per_gpu:,.0f} tokens/s/GPU",
        *headroom_header(headroom),
    ]
    table = plan_writer.model_table(job, model_ref, path)
    try:
        path.write_text(plan_writer.render(best.job, best.layout, table, header))
    except OSError as e:
        raise InputError(f"--write-plan: cannot write {path}: {e}") from None
    launch_notes(path, headroom)


def across_dict(res: pool_search.PoolSearch) -> dict[str, Any]:
    """JSON `across_pools`: the best plan of each kind and which is faster."""
    out: dict[str, Any] = {}
    for kind, plan in (("pipeline", res.best_pipeline), ("data", res.best_data)):
        if plan is None:
            out[kind] = None
            continue
        link = slow_link(plan.job, plan.layout, plan.performance)
        out[kind] = {
            "parallel": plan.layout.describe(),
            "step_time_s": round(plan.performance.step_time_s, 4),
            "link_added_s": None if link is None else round(link.added_s, 4),
        }
    out["faster"] = _faster(res)
    return out


def _faster(res: pool_search.PoolSearch) -> str | None:
    a, b = res.best_pipeline, res.best_data
    if a is None or b is None:
        return "pipeline" if a is not None else "data" if b is not None else None
    return "data" if b.performance.step_time_s < a.performance.step_time_s else "pipeline"


def _one_kind_text(res: pool_search.PoolSearch) -> str:
    """`across_text` where only one kind (or none) has a plan."""
    data = res.data
    if res.best_data is not None:
        return "across pools: only data parallelism across the link fits"
    if data is None or not data.layouts or data.least_bound_s is None:
        return (
            "across pools: data parallelism across the link has no layout here (it needs pools "
            "of one size, each holding whole nodes of every stage)"
        )
    if data.scored and res.best_pipeline is None:
        return "across pools: nothing fits"
    return (
        "across pools: the pipeline across the link wins; with data parallelism across it the "
        f"pools run in lock-step, and no such layout can come below {data.least_bound_s:.3f} s "
        "a step (the slowest pool's compute alone)"
        + ("" if data.scored else ", more than the plans above")
    )


def across_text(res: pool_search.PoolSearch) -> str:
    """Which crosses the link better, the pipeline's sends or the data-parallel gradient
    all-reduce, and why: each best plan's step and what the link costs it."""
    a, b = res.best_pipeline, res.best_data
    if a is None or b is None:
        return _one_kind_text(res)
    la = slow_link(a.job, a.layout, a.performance)
    lb = slow_link(b.job, b.layout, b.performance)
    sa, sb = a.performance.step_time_s, b.performance.step_time_s
    link_a = 0.0 if la is None else la.added_s
    link_b = 0.0 if lb is None else lb.added_s
    on_link = 0.0 if lb is None or lb.data_parallel_s is None else lb.data_parallel_s
    winner = "data parallelism across the link" if sb < sa else "the pipeline across the link"
    rest = (sb - link_b) - (sa - link_a)
    lat = b.job.between_pools.latency_us / 1e3 if b.job.between_pools else 0.0
    return (
        f"across pools: {winner} wins ({min(sa, sb):.3f} s against {max(sa, sb):.3f} s a step, "
        f"{abs(sa - sb) / max(sa, sb):.1%}); best with the pipeline across: "
        f"{a.layout.describe()}; best with data parallelism across: {b.layout.describe()}. The "
        f"link adds {link_a * 1e3:,.0f} ms per step to the first (its pipeline sends) and "
        f"{link_b * 1e3:,.0f} ms to the second (its gradient all-reduce between the pools' "
        f"optimizer instances, {on_link * 1e3:,.0f} ms per step on the link: every gradient "
        f"bucket's all-reduce pays the {lat:g} ms latency twice); on a link as fast as a "
        f"pool's own the second would be {abs(rest) * 1e3:,.0f} ms "
        f"{'faster' if rest < 0 else 'slower'} than the first (bubble, compute, traffic inside "
        "the pools)"
    )
