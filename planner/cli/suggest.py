"""`planner suggest`: search every layout of the job (a job file, flags, or the bundled default)
within the user's pins and bounds, list the fastest that fit (or, ranked by cost or goodput, the
cheapest), and write the top one as a plan file; when nothing fits, why and what would.

What only some runs need is imported where it is used, so that `suggest --json` does not pay for it
at start-up: the pools search (`planner.cli.pools_suggest`), the text output
(`planner.cli.render_suggest`, `planner.cli.job_text`) and the plan writer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from planner import __version__
from planner.cli import calibration, report
from planner.cli.common import (
    DEFAULT_HEADROOM,
    BatchOpt,
    GpuOpt,
    HeadroomOpt,
    JsonOpt,
    ModelOpt,
    PrecisionOpt,
    SeqOpt,
    check_headroom,
    emit_json,
    err,
    headroom_header,
    launch_notes,
    out,
    path_given,
    whole,
)
from planner.cli.space_flags import bound, recompute_list, zero_list
from planner.inputs.errors import EXIT_NO, InputError
from planner.inputs.job import Job
from planner.inputs.job_request import DEFAULT_JOB, JobArgs, request_job
from planner.inputs.plan import reframe
from planner.ops.operations import OBJECTIVES
from planner.search.job_checks import check_job, check_sized
from planner.search.space import MAX_CP, MAX_MICRO_BATCH, Bound, Space
from planner.search.suggest import check_found, check_space, explain_infeasible, search_rows
from planner.search.top_k import Candidate

RangeOpt = Annotated[str | None, typer.Option(help="pin (8) or bound (1-16, 4-, -8)")]
MaxOpt = Annotated[int | None, typer.Option(parser=whole(), help="upper bound")]
_gpus_default = f"(default: the job file's, else {DEFAULT_JOB['cluster']['num_gpus']})"


def suggest(
    job_path: Annotated[
        Path | None,
        typer.Argument(
            metavar="JOB", parser=path_given, help="job file: a plan without [parallel]"
        ),
    ] = None,
    model: ModelOpt = None,
    gpu: GpuOpt = None,
    num_gpus: Annotated[
        int | None, typer.Option(min=1, parser=whole(1), help=f"GPUs {_gpus_default}")
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(
            min=1, parser=whole(1), help="nodes of the GPU's gpus_per_node (or --num-gpus)"
        ),
    ] = None,
    seq_length: SeqOpt = None,
    global_batch_size: BatchOpt = None,
    precision: PrecisionOpt = None,
    tp: RangeOpt = None,
    pp: RangeOpt = None,
    cp: RangeOpt = None,
    ep: RangeOpt = None,
    dp: RangeOpt = None,
    vpp: Annotated[
        str | None,
        typer.Option(
            help="pin (2) or bound (2-4, 1-3); interleaved splits where vpp divides no rank's "
            "layers (Megatron's pipeline layout string) are searched to vpp 6, or to the "
            "bound's top (a bound without one: to 6 or its bottom, the higher)"
        ),
    ] = None,
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
    top: Annotated[
        int, typer.Option(min=1, max=100, parser=whole(1, 100), help="how many layouts to list")
    ] = 5,
    as_json: JsonOpt = False,
    write_plan: Annotated[
        Path | None, typer.Option(parser=path_given, help="write the top layout as a plan file")
    ] = None,
    force: Annotated[bool, typer.Option(help="overwrite --write-plan's file")] = False,
    objective: Annotated[
        str, typer.Option(help="rank by throughput, cost ($ per token) or goodput")
    ] = "throughput",
    calibration_opt: calibration.CalibrationOpt = None,
    framework: Annotated[
        str | None,
        typer.Option(help="search what megatron or torchtitan runs (default: the job's)"),
    ] = None,
) -> None:
    """Search every layout and list the fastest that fit. Exit 0 found, 1 nothing fits, 2 bad
    input."""
    check_headroom(headroom)
    args = JobArgs(model, gpu, num_gpus, nodes, seq_length, global_batch_size, precision)
    req = request_job(job_path, args)
    if framework is not None:
        if framework not in ("megatron", "torchtitan"):
            raise InputError(f"--framework: megatron or torchtitan (got {framework!r})")
        req = replace(req, job=reframe(req.job, framework))  # type: ignore[arg-type]
    job, model_ref = req.job, req.model_ref
    if len(job.pools) == 1:  # one GPU kind: the one-kind search, every setting searched
        job = one_kind(job)
        req = replace(req, job=job)
    # a setting no layout runs is bad input, as `check` says, before any search
    check_job(job, job_path)
    check_sized(job, job_path)
    _titan_model_note(job)
    prof = calibration.use(calibration_opt, job)
    if no_cp and (cp is not None or max_cp is not None):
        flag = "--cp" if cp is not None else "--max-cp"
        raise InputError(f"--no-cp contradicts {flag}: give one of them")
    space = Space(
        tp=bound("tp", tp, max_tp),
        pp=bound("pp", pp, max_pp),
        # MAX_CP bounds cp where the user gave no bound of their own (a pin above it is theirs)
        cp=Bound(1, 1) if no_cp else bound("cp", cp, _cp_top(cp, max_cp)),
        ep=bound("ep", ep, max_ep),
        dp=bound("dp", dp),
        vpp=bound("vpp", vpp),
        mbs=bound("mbs", mbs, None if mbs else MAX_MICRO_BATCH),
        zero_stages=zero_list(zero),
        recompute=recompute_list(recompute),
        tp_across_nodes=tp_across_nodes,
        uneven=not no_uneven,
        headroom_pct=headroom,
        framework=job.framework,
    )
    check_space(job, space)
    if write_plan is not None and write_plan.exists() and not force:
        raise InputError(f"--write-plan: {write_plan} exists (use --force to overwrite)")
    if objective not in OBJECTIVES:
        raise InputError(
            f"--objective: expected one of {', '.join(OBJECTIVES)} (got {objective!r})"
        )
    if not as_json:
        from planner.cli.job_text import print_job

        print_job(err, "planning", req)
    elif req.unread is not None:  # the job line says it otherwise
        err.print(f"note: {req.unread}", markup=False, highlight=False)
    if job.pools:  # heterogeneous pools: planner.cli.pools_suggest
        from planner.cli import pools_suggest

        pools_suggest.run(job, space, top, objective, as_json, write_plan, model_ref, req.defaulted)
        return
    res, rows = search_rows(job, space, top, objective, progress=lambda msg: err.print(msg))
    _check_rows(job, res.candidates, job_path)
    if not res.candidates:
        why = explain_infeasible(job, space, res)
        if as_json:
            emit_json(report.infeasible_dict(why, res, job, req.defaulted))
        else:
            from planner.cli import render_suggest

            render_suggest.print_infeasible(out, why, res)
        raise typer.Exit(EXIT_NO)
    if write_plan is not None:
        from planner.inputs import plan_writer
        from planner.search.titan_variants import candidate_job

        best = res.candidates[0]
        header = [
            f"planner {__version__} suggest: {job.arch.name} on {job.cluster.num_gpus} x "
            f"{job.cluster.gpu.name}",
            f"predicted step {best.performance.step_time_s:.3f} s, "
            f"{best.performance.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, "
            f"peak {best.memory.peak / 2**30:.1f} GiB",
        ]
        header += headroom_header(headroom)
        table = plan_writer.model_table(job, model_ref, write_plan)
        # a torchtitan candidate's own [torchtitan] settings (planner.search.titan_variants)
        plan_job = candidate_job(job, best)
        try:
            write_plan.write_text(plan_writer.render(plan_job, best.layout, table, header))
        except OSError as e:
            raise InputError(f"--write-plan: cannot write {write_plan}: {e}") from None
        launch_notes(write_plan, headroom)
    if as_json:
        data = report.suggest_dict(job, res, rows, req.defaulted)
        calibration.add_json(data, prof)
        emit_json(data)
    else:
        from planner.cli import render_suggest

        label = {"throughput": "step time", "cost": "cost per token"}.get(objective, objective)
        render_suggest.print_result(out, job, res, label, rows)
        for line in calibration.profile_lines(prof):
            out.print(line)
        if write_plan is not None:
            out.print(f"wrote {write_plan}")


def one_kind(job: Job) -> Job:
    """A job of one pool as the one-kind cluster it is (its price kept), with a note on stderr:
    the pooled search pipelines across pools and searches ZeRO 1 alone
    (`planner.search.pool_search`), the one-kind search every layout."""
    pool = job.pools[0]
    cluster = job.cluster
    if pool.price_usd_per_gpu_hour is not None:
        gpu = cluster.gpu.model_copy(update={"price_usd_per_gpu_hour": pool.price})
        cluster = cluster.model_copy(update={"gpu": gpu})
    err.print(
        f"note: one pool ({pool.name!r}) is one GPU kind: searched as [cluster] gpu = "
        f'"{cluster.gpu.name}", num_gpus = {cluster.num_gpus}',
        markup=False,
        highlight=False,
    )
    return replace(job, cluster=cluster, pools=(), between_pools=None, pools_data_parallel=False)


def _titan_model_note(job: Job) -> None:
    """On stderr, before the search: a torchtitan job of a model torchtitan defines no flavor of
    is planned as torchtitan would run a port of it, and no torchtitan target launches it."""
    from planner.inputs.torchtitan import MODELS, zoo_flavor

    if job.framework == "torchtitan" and zoo_flavor(job.arch) is None:
        err.print(
            f"note: torchtitan defines no flavor of {job.arch.name} (it runs "
            f"{', '.join(sorted(MODELS))}): the layouts are planned as torchtitan would run a "
            "port of it, and `launch` refuses them"
        )


def _cp_top(cp: str | None, max_cp: int | None) -> int | None:
    """--max-cp as given (0 too: `bound` refuses it), else MAX_CP where --cp gives no bound."""
    if max_cp is not None:
        return max_cp
    return None if cp else MAX_CP


def _check_rows(job: Job, found: list[Candidate], job_path: Path | None) -> None:
    """`search.suggest.check_found` of the rows, each under its own torchtitan settings."""
    from planner.search.titan_variants import candidate_job

    check_found(job, [(candidate_job(job, c), c.layout) for c in found], job_path)
