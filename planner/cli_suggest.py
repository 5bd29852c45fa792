"""`planner suggest` and `planner launch`: search the layouts, write the plan, write the launch
files."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from planner import __version__, ops, planfile, render_suggest, report, search
from planner import suggest as suggest_mod
from planner.cli_common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    check_headroom,
    emit_json,
    out,
)
from planner.errors import EXIT_NO, InputError
from planner.space import MAX_CP, MAX_MICRO_BATCH, Bound, Space
from planner.suggest import JobArgs, merge_bound, parse_bound


def _bound(flag: str, text: str | None, max_value: int | None = None) -> Bound:
    bound = parse_bound(f"--{flag}", text) if text is not None else Bound()
    return merge_bound(flag, bound, max_value)


RangeOpt = Annotated[str | None, typer.Option(help="pin (8) or bound (1-16, 4-, -8)")]
MaxOpt = Annotated[int | None, typer.Option(help="upper bound")]


def suggest(
    job_path: Annotated[
        Path | None, typer.Argument(metavar="[JOB]", help="job file: a plan without [parallel]")
    ] = None,
    model: Annotated[str | None, typer.Option(help="zoo name, config.json or model TOML")] = None,
    gpu: Annotated[str | None, typer.Option(help="catalog GPU name")] = None,
    num_gpus: Annotated[int | None, typer.Option(min=1)] = None,
    nodes: Annotated[int | None, typer.Option(min=1)] = None,
    seq_length: Annotated[int | None, typer.Option(min=1)] = None,
    global_batch_size: Annotated[int | None, typer.Option(min=1)] = None,
    precision: Annotated[str | None, typer.Option(help="bf16 or fp8")] = None,
    tp: RangeOpt = None,
    pp: RangeOpt = None,
    cp: RangeOpt = None,
    ep: RangeOpt = None,
    dp: RangeOpt = None,
    vpp: RangeOpt = None,
    mbs: RangeOpt = None,
    max_tp: MaxOpt = None,
    max_pp: MaxOpt = None,
    max_cp: MaxOpt = None,
    max_ep: MaxOpt = None,
    no_cp: Annotated[bool, typer.Option("--no-cp", help="no context parallelism")] = False,
    no_uneven: Annotated[bool, typer.Option("--no-uneven", help="even splits only")] = False,
    zero: Annotated[str | None, typer.Option(help="ZeRO stages to allow, e.g. 1 or 1,2")] = None,
    recompute: Annotated[str | None, typer.Option(help="e.g. none or none,full")] = None,
    tp_across_nodes: Annotated[bool, typer.Option(help="TP beyond the NVLink domain")] = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
    top: Annotated[int, typer.Option(min=1, max=100, help="how many layouts to list")] = 5,
    as_json: JsonOpt = False,
    write_plan: Annotated[
        Path | None, typer.Option(help="write the top layout as a plan file")
    ] = None,
    force: Annotated[bool, typer.Option(help="overwrite --write-plan's file")] = False,
    objective: Annotated[
        str, typer.Option(help="rank by throughput, cost ($ per token) or goodput")
    ] = "throughput",
) -> None:
    """Search every layout and list the fastest that fit. Exit 0 found, 1 nothing fits."""
    check_headroom(headroom)
    args = JobArgs(model, gpu, num_gpus, nodes, seq_length, global_batch_size, precision)
    job, model_ref, origin = suggest_mod.load_job(job_path, args)
    space = Space(
        tp=_bound("tp", tp, max_tp),
        pp=_bound("pp", pp, max_pp),
        cp=Bound(1, 1) if no_cp else _bound("cp", cp, max_cp if max_cp else MAX_CP),
        ep=_bound("ep", ep, max_ep),
        dp=_bound("dp", dp),
        vpp=_bound("vpp", vpp),
        mbs=_bound("mbs", mbs, None if mbs else MAX_MICRO_BATCH),
        zero_stages=suggest_mod.zero_list(zero),
        recompute=suggest_mod.recompute_list(recompute),
        tp_across_nodes=tp_across_nodes,
        uneven=not no_uneven,
        headroom_pct=headroom,
    )
    suggest_mod.check_space(job, space)
    if write_plan is not None and write_plan.exists() and not force:
        raise InputError(f"--write-plan: {write_plan} exists (use --force to overwrite)")
    err = Console(stderr=True)
    if not as_json:
        err.print(
            f"planning {job.arch.name} on {job.cluster.num_gpus} x {job.cluster.gpu.name}"
            f" ({origin})"
        )
    if objective not in ops.OBJECTIVES:
        raise InputError(
            f"--objective: expected one of {', '.join(ops.OBJECTIVES)} (got {objective!r})"
        )
    wide = top if objective == "throughput" else max(top * 4, 20)
    res = search.search(job, space, wide, progress=lambda msg: err.print(msg))
    if objective != "throughput":
        res = rerank(job, top, objective, res)
    if not res.candidates:
        why = suggest_mod.explain_infeasible(job, space, res)
        if as_json:
            emit_json(report.infeasible_dict(why, res))
        else:
            render_suggest.print_infeasible(out, why, res)
        raise typer.Exit(EXIT_NO)
    if write_plan is not None:
        best = res.candidates[0]
        header = [
            f"planner {__version__} suggest: {job.arch.name} on {job.cluster.num_gpus} x "
            f"{job.cluster.gpu.name}",
            f"predicted step {best.performance.step_time_s:.3f} s, "
            f"{best.performance.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
            f"peak {best.memory.peak / 2**30:.1f} GiB",
        ]
        table = planfile.model_table(job, model_ref, write_plan)
        try:
            write_plan.write_text(planfile.render(job, best.layout, table, header))
        except OSError as e:
            raise InputError(f"--write-plan: cannot write {write_plan}: {e}") from None
    if as_json:
        emit_json(report.suggest_dict(job, res))
    else:
        label = {"throughput": "step time", "cost": "cost per token"}.get(objective, objective)
        render_suggest.print_result(out, job, res, label)
        if write_plan is not None:
            out.print(f"wrote {write_plan}")


def launch(
    plan_path: Annotated[Path, typer.Argument(metavar="PLAN", help="plan file (TOML)")],
    target: Annotated[str, typer.Option("--target", help="megatron-args, torchrun, slurm or k8s")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="write into this directory (default: stdout)")
    ] = None,
    job_name: Annotated[
        str | None, typer.Option("--job-name", help="job name (default: the plan file's stem)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
) -> None:
    """Write the plan's launch file: Megatron-LM arguments, torchrun, Slurm or Kubernetes."""
    from planner import launch as launch_mod

    done = launch_mod.launch(plan_path, target, out_dir, job_name, force)
    if done.path is None:
        sys.stdout.write(done.text)
    else:
        print(done.path)


def rerank(
    job: suggest_mod.Job, top: int, objective: str, res: search.SearchResult
) -> search.SearchResult:
    """Rank by cost or goodput. For one job both are the step time times a factor that does not
    depend on the layout (GPU count x price; 1 / goodput, which depends on the step time only
    through the checkpoint interval's rounding to whole steps), so the leading candidates of the
    certified time ranking are re-scored and re-sorted."""
    params = ops.OpsParams()

    def score(c: search.Candidate) -> float:
        return ops.objective_value(job, c.performance, objective, params)

    ranked = sorted(res.candidates, key=lambda c: (score(c), search.rank_key(c)))
    return replace(res, candidates=ranked[:top])
