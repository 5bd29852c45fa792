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
from planner.cli.common import emit_json, err, out
from planner.cli.report import layout_dict, memory_dict, performance_dict
from planner.inputs import plan_writer
from planner.inputs.errors import EXIT_NO, InputError
from planner.inputs.plan import Job
from planner.search import pool_search
from planner.search.pools import PoolPlan, usd_per_million_tokens
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
    """Each pool's best plan on its own GPUs (the ordinary search)."""
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
            usd = pool.price * pool.cluster.num_gpus / 3600 * step / job.tokens_per_step * 1e6
        rows.append(Alone(pool.name, pool.cluster.num_gpus, c.layout.describe(), step, usd))
    return rows


def _split_text(p: PoolPlan) -> str:
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
) -> None:
    """Search, print or emit, write the plan; exit 1 when nothing fits."""
    res = pool_search.search(
        job, space.headroom_pct, objective, top, progress=lambda m: err.print(m)
    )
    solo = alone(job, space, objective) if objective == "cost" else []
    if not res.plans:
        msg = f"no layout of {res.layouts} fits the pools"
        near = res.closest
        if near is not None:  # the binding constraint: which stage, which pool, by how much
            pool = job.pools[near.pool]
            msg += (
                f"; the closest, {near.layout.describe()}, needs {near.over_mib / 1024:.1f} GiB "
                f"more on stage {near.stage} (pool {pool.name!r}, {pool.cluster.gpu.name}) than "
                f"its {near.capacity_mib / 1024:.1f} GiB usable"
            )
        if as_json:
            emit_json({"candidates": [], "reason": msg})
        else:
            out.print(msg)
        raise typer.Exit(EXIT_NO)
    best = res.plans[0]
    if write_plan is not None:
        _write(job, best, write_plan, model_ref)
    if as_json:
        emit_json(
            {
                "candidates": [_plan_dict(p) for p in res.plans],
                "layouts": res.layouts,
                "solved": res.solved,
                "single_pool": [s.__dict__ for s in solo],
            }
        )
        return
    t = Table(title=f"Pools: top {len(res.plans)} of {res.layouts} layouts ({res.solved} solved)")
    for col in ("#", "layout", "layers per stage", "step s", "tok/s/GPU", "$/Mtok", "peak/cap"):
        t.add_column(col)
    for i, p in enumerate(res.plans, 1):
        usd = usd_per_million_tokens(p.job, p.performance)
        t.add_row(
            str(i),
            p.layout.describe(),
            _split_text(p),
            f"{p.performance.step_time_s:.3f}",
            f"{p.performance.tokens_per_s_per_gpu:,.0f}",
            "-" if usd is None else f"{usd:.3f}",
            f"{p.memory.peak / 2**30:.1f}/{p.memory.capacity / 2**30:.1f}",
        )
    out.print(t)
    for s in solo:
        price = "no price" if s.usd_per_mtok is None else f"${s.usd_per_mtok:.3f}/Mtok"
        step = "-" if s.step_time_s is None else f"{s.step_time_s:.3f} s"
        out.print(f"{s.pool} alone ({s.gpus} GPUs): {s.layout}, step {step}, {price}")
    if solo:
        out.print(_verdict(best, solo))
    if write_plan is not None:
        out.print(f"wrote {write_plan}")


def _verdict(best: PoolPlan, solo: list[Alone]) -> str:
    mine = usd_per_million_tokens(best.job, best.performance)
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
        "layers_per_stage": list(p.split.layers),
        "recompute_num_layers": p.split.recompute_layers,
        "memory": memory_dict(p.memory),
        "performance": performance_dict(p.performance),
        "usd_per_million_tokens": usd_per_million_tokens(p.job, p.performance),
    }


def _write(job: Job, best: PoolPlan, path: Path, model_ref: dict[str, Any] | None) -> None:
    gpus = " + ".join(f"{q.cluster.num_gpus} x {q.cluster.gpu.name}" for q in best.job.pools)
    header = [
        f"planner {__version__} suggest: {job.arch.name} on {gpus} (pools in pipeline order)",
        f"predicted step {best.performance.step_time_s:.3f} s, "
        f"{best.performance.tokens_per_s_per_gpu:,.0f} tokens/s/GPU",
    ]
    table = plan_writer.model_table(job, model_ref, path)
    try:
        path.write_text(plan_writer.render(best.job, best.layout, table, header))
    except OSError as e:
        raise InputError(f"--write-plan: cannot write {path}: {e}") from None
