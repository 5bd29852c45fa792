"""`planner check`: does a plan's layout (or an existing Megatron-LM command line's) fit in GPU
memory? Exit 0 fits, 1 does not, 2 bad input; when it does not, the cheapest single changes that
would make it fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import render, report
from planner.cli.common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    check_headroom,
    emit_json,
    out,
)
from planner.inputs import megatron_args
from planner.inputs.errors import EXIT_NO, EXIT_OK, InputError
from planner.inputs.job_request import JobArgs, name_flags
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, load_plan, parse_plan
from planner.model import cost, memory
from planner.search import advice
from planner.search.rules import check_plan


def plan_from_args(
    plan_path: Path | None, megatron_args_path: str | None, gpu: str | None, num_gpus: int | None
) -> Plan:
    """A plan file, or an existing Megatron-LM command line with --gpu and --num-gpus, its
    layout checked against Megatron-LM's rules."""
    if megatron_args_path is None:
        if plan_path is None:
            raise InputError("check: PLAN: give a plan file, or --megatron-args FILE")
        return check_plan(load_plan(plan_path))
    if plan_path is not None:
        raise InputError("check: give either PLAN or --megatron-args, not both")
    if gpu is None or num_gpus is None:
        raise InputError("--megatron-args: also needs --gpu NAME and --num-gpus N")
    doc, where = megatron_args.load(megatron_args_path, gpu, num_gpus)
    try:
        return check_plan(parse_plan(doc, Path(where)))
    except InputError as e:  # --gpu / --num-gpus are flags, not lines of the script
        flags = JobArgs(gpu=gpu, num_gpus=num_gpus)
        raise InputError(name_flags(str(e), Path(where), flags)) from None


def check(
    plan_path: Annotated[
        Path | None, typer.Argument(metavar="PLAN", help="plan file (TOML)")
    ] = None,
    as_json: JsonOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
    megatron_args_path: Annotated[
        str | None,
        typer.Option(
            "--megatron-args", help="a Megatron-LM command line or launch script ('-' = stdin)"
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="catalog GPU (--megatron-args)")] = None,
    num_gpus: Annotated[
        int | None, typer.Option("--num-gpus", min=1, help="GPU count (--megatron-args)")
    ] = None,
) -> None:
    """Does the plan's layout fit in GPU memory? Exit 0 fits, 1 does not, 2 bad input."""
    check_headroom(headroom)
    plan = plan_from_args(plan_path, megatron_args_path, gpu, num_gpus)
    job, layout = plan.job, plan.require_layout()
    rep = memory.estimate(job, layout, headroom)

    def step_time(lay: Layout) -> float:
        return cost.estimate(job, lay).step_time_s

    changes = [] if rep.fits else advice.memory_changes(job, layout, headroom, step_time)
    if as_json:
        data = report.plan_dict(job.arch, layout, rep, cost.estimate(job, layout))
        data["changes"] = [
            {"change": c.describe(), "saves_gib": round(c.saves / 2**30, 2), "fits": c.fits}
            for c in changes
        ]
        emit_json(data)
    else:
        render.print_check(out, job, layout, rep, changes)
    raise typer.Exit(EXIT_OK if rep.fits else EXIT_NO)
