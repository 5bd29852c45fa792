"""`planner explain`: where a plan's memory and time go, per pipeline stage; with `--tokens` (or any
operations option) also days, GPU-hours, cost, energy, checkpoint interval and goodput; with
`--timeline` one step's pipeline schedule as SVG."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import calibration, explain_notes, plot, render, report, switch_notes, timeline
from planner.cli.common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    MegatronArgsOpt,
    TorchtitanConfigOpt,
    VocabSizeOpt,
    check_headroom,
    emit_json,
    launch_warnings,
    module_note,
    out,
    path_given,
    warn,
)
from planner.cli.host_text import host_line
from planner.cli.ops_options import (
    AsyncOpt,
    FailureRateOpt,
    GpuWOpt,
    IntervalOpt,
    NodeWOpt,
    PriceOpt,
    PueOpt,
    RestartOpt,
    StorageOpt,
    TokensOpt,
    check_ops,
    named_options,
    ops_inputs,
)
from planner.inputs import torchtitan_config as torchtitan_config_mod
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.model import cost, host_memory, memory
from planner.model.known_gaps import optimistic
from planner.ops import operations
from planner.search import pool_costs
from planner.search.rules import check_plan


def explain(
    plan_path: Annotated[
        Path | None, typer.Argument(metavar="PLAN", parser=path_given, help="plan file (TOML)")
    ] = None,
    as_json: JsonOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
    tokens: TokensOpt = None,
    price: PriceOpt = None,
    failure_rate: FailureRateOpt = None,
    restart_min: RestartOpt = None,
    storage_gb_per_s: StorageOpt = None,
    pue: PueOpt = None,
    node_overhead_w: NodeWOpt = None,
    gpu_power_w: GpuWOpt = None,
    async_checkpoint: AsyncOpt = False,
    checkpoint_interval_min: IntervalOpt = None,
    timeline_path: Annotated[
        Path | None,
        typer.Option(
            "--timeline", parser=path_given, help="write one step's pipeline schedule as SVG"
        ),
    ] = None,
    megatron_log_path: calibration.MegatronLogOpt = None,
    megatron_args_path: MegatronArgsOpt = None,
    torchtitan_config: TorchtitanConfigOpt = None,
    vocab_size: VocabSizeOpt = None,
    gpu: calibration.LogGpuOpt = None,
    num_gpus: calibration.LogGpusOpt = None,
    calibration_opt: calibration.CalibrationOpt = None,
) -> None:
    """Where the memory and the time go, per pipeline stage; with --tokens (or any operations
    option) also days, GPU-hours, cost, energy, checkpoint interval and goodput."""
    check_headroom(headroom)
    if timeline_path is not None:
        plot.check_svg_path(timeline_path, "--timeline")
    params, budget, wanted = ops_inputs(
        tokens, price, failure_rate, restart_min, storage_gb_per_s, pue, node_overhead_w,
        gpu_power_w, async_checkpoint, checkpoint_interval_min,
    )  # fmt: skip
    run = None
    sources = (plan_path, megatron_log_path, megatron_args_path, torchtitan_config)
    if len([s for s in sources if s is not None]) != 1:
        raise InputError(
            "explain: give one of a plan file, --megatron-args FILE, --megatron-log FILE or "
            "--torchtitan-config FILE"
        )
    if vocab_size is not None and megatron_args_path is None and megatron_log_path is None:
        raise InputError("explain: --vocab-size: only with --megatron-args or --megatron-log")
    if megatron_log_path is not None:
        run = calibration.log_run(megatron_log_path, gpu, num_gpus, vocab_size)
        plan = run.plan
    elif megatron_args_path is not None:
        from planner.cli.check import plan_from_args

        plan = plan_from_args(None, megatron_args_path, gpu, num_gpus, vocab_size)
    elif torchtitan_config is not None:
        plan = check_plan(torchtitan_config_mod.load(torchtitan_config, gpu, num_gpus))
    else:
        for flag, value in (("--gpu", gpu), ("--num-gpus", num_gpus)):
            if value is not None:
                raise InputError(
                    f"explain: {flag}: only with --megatron-args, --megatron-log or "
                    "--torchtitan-config"
                )
        assert plan_path is not None  # the one source given
        plan = check_plan(load_plan(plan_path))
    prof = calibration.use(calibration_opt, plan.job)
    job, layout = plan.job, plan.require_layout()
    if timeline_path is not None:
        timeline.drawable(job, layout)  # before the work
    warned = warn(plan)
    if plan_path is not None:  # a plan file: what its launch would refuse
        warned += launch_warnings(plan, headroom)
    noted = module_note(plan)
    rep = memory.estimate(job, layout, headroom)
    host = host_memory.estimate(job, layout)
    perf = cost.estimate(job, layout)
    ops = None
    if wanted:
        check_ops(job, params, budget, tokens)  # --tokens as written, --gpu-power-w vs the TDP
        with named_options():
            ops = operations.operations(job, perf, budget, params, layout.zero_stage)
    if timeline_path is not None:
        svg = timeline.pipeline_svg(job, layout, perf)
        plot.write_svg(timeline_path, svg, "--timeline")
    link = pool_costs.slow_link(job, layout, perf)  # heterogeneous pools: the slow link's share
    if as_json:
        issue = switch_notes.host_seconds(job, layout)
        data = report.plan_dict(job.arch, layout, rep, perf, host, issue)
        if link is not None:
            data["performance"]["between_pools"] = report.slow_link_dict(link)
        if ops is not None:
            data["operations"] = report.operations_dict(ops)
        if timeline_path is not None:
            data["timeline"] = str(timeline_path)
        data["performance"]["optimistic"] = optimistic(job, layout)
        data["notes"] = noted + explain_notes.notes(job, layout, perf, headroom)
        data["warnings"] = warned
        calibration.add_json(data, prof, run)
        emit_json(data)
    else:
        render.print_explain(out, job, layout, rep, perf, (host_line(job, host), host.fits))
        if link is not None:
            out.print(report.slow_link_text(link), highlight=False)
        if run is not None:
            out.print(calibration.measured_table(run, prof))
        for line in calibration.profile_lines(prof):
            out.print(line)
        if ops is not None:
            out.print(render.operations_table(ops))
        if timeline_path is not None:
            out.print(f"wrote {timeline_path}")
