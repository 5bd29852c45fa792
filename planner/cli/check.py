"""`planner check`: does a plan's layout (or an existing Megatron-LM command line's) fit in GPU
memory, and what it offloads in the host's (`planner.model.host_memory`)? Exit 0 fits, 1 does
not, 2 bad input; when the GPU's does not, the cheapest single changes that would make it fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.cli import advice_input, calibration, render, report, switch_notes
from planner.cli.common import (
    DEFAULT_HEADROOM,
    HeadroomOpt,
    JsonOpt,
    MegatronArgsOpt,
    TorchtitanConfigOpt,
    VocabSizeOpt,
    check_headroom,
    emit_json,
    err,
    launch_warnings,
    module_note,
    out,
    path_given,
    warn,
    whole,
)
from planner.cli.host_text import host_line
from planner.inputs import megatron_args, torchtitan_config
from planner.inputs.errors import EXIT_NO, EXIT_OK, InputError
from planner.inputs.job_request import JobArgs, name_flags
from planner.inputs.layout import Layout
from planner.inputs.megatron_line import flags_named
from planner.inputs.plan import Job, Plan, load_plan, parse_plan
from planner.inputs.torchtitan_keys import keys_named
from planner.model import cost, host_memory, memory
from planner.search import advice, host_advice
from planner.search.rules import check_plan


def plan_from_args(
    plan_path: Path | None,
    megatron_args_path: str | None,
    gpu: str | None,
    num_gpus: int | None,
    vocab_size: int | None = None,
    verbose: bool = False,
    nemo_model: str | None = None,
) -> Plan:
    """A plan file, or an existing Megatron-LM command line with --gpu and --num-gpus (else the
    world size its torchrun asks for), its layout checked against Megatron-LM's rules. For a
    command line, what was assumed is noted on stderr, and with `verbose` what was ignored
    too."""
    return _plan_and_source(
        plan_path, megatron_args_path, gpu, num_gpus, vocab_size, verbose, nemo_model
    )[0]


def _plan_and_source(
    plan_path: Path | None,
    megatron_args_path: str | None,
    gpu: str | None,
    num_gpus: int | None,
    vocab_size: int | None = None,
    verbose: bool = False,
    nemo_model: str | None = None,
    headroom: float = DEFAULT_HEADROOM,
) -> tuple[Plan, advice_input.Source | None]:
    """`plan_from_args`, with the command line's `advice_input.Source` (None for a plan
    file)."""
    if megatron_args_path is None:
        if plan_path is None:
            raise InputError("check: PLAN: give a plan file, or --megatron-args FILE")
        if vocab_size is not None:
            raise InputError("check: --vocab-size: only with --megatron-args or --megatron-log")
        for flag, value in (("--verbose", verbose or None), ("--nemo-model", nemo_model)):
            if value is not None:
                raise InputError(f"check: {flag}: only with --megatron-args")
        _plan_names_cluster(gpu, num_gpus)
        return check_plan(load_plan(plan_path)), None
    if plan_path is not None:
        raise InputError("check: give either PLAN or --megatron-args, not both")
    if gpu is None:
        raise InputError(
            "--megatron-args: also needs --gpu NAME (and --num-gpus N where no torchrun line "
            "says it)"
        )
    reading, where, source = advice_input.megatron_source(
        megatron_args_path, gpu, num_gpus, vocab_size, nemo_model
    )
    print_reading(reading, where, verbose)
    try:
        plan = check_plan(parse_plan(reading.doc, Path(where)))
        return plan, source(plan, headroom)
    except InputError as e:  # --gpu / --num-gpus are flags, not lines of the script
        flags = JobArgs(gpu=gpu, num_gpus=num_gpus)
        message = flags_named(name_flags(str(e), Path(where), flags), where, reading.field_names)
        raise InputError(message) from None


def print_reading(reading: megatron_args.Reading, where: str, verbose: bool) -> None:
    """On stderr: the notes (always), and with --verbose the flags that were not read."""
    for note in reading.notes:
        err.print(f"note: {where}: {note}", soft_wrap=True)
    for note in reading.not_modelled:
        err.print(f"note: {where}: not modelled: {note}", soft_wrap=True)
    if not verbose:
        return
    lines = (
        (f"ignored {reading.kind} (they do not change memory or layout)", reading.ignored),
        (f"ignored words that are not {reading.kind}", reading.unknown),
    )
    for title, flags in lines:
        err.print(f"{where}: {title}: {' '.join(flags) if flags else '(none)'}", soft_wrap=True)


def titan_plan(
    plan_path: Path | None,
    titan_config: Path | None,
    framework: str | None,
    gpu: str | None,
    num_gpus: int | None,
) -> Plan:
    """check --torchtitan-config FILE, or check PLAN --framework F (its rules applied)."""
    if titan_config is not None:
        if framework is not None:
            raise InputError("check: --torchtitan-config: not with --framework")
        try:
            return check_plan(torchtitan_config.load(titan_config, gpu, num_gpus))
        except InputError as e:  # the plan's rules, named by the TOML's keys
            raise InputError(keys_named(str(e), titan_config)) from None
    if plan_path is None or framework not in ("megatron", "torchtitan"):
        raise InputError(
            f"check: --framework: megatron or torchtitan, with PLAN (got {framework!r})"
        )
    _plan_names_cluster(gpu, num_gpus)
    return check_plan(load_plan(plan_path, framework))  # type: ignore[arg-type]


def _plan_names_cluster(gpu: str | None, num_gpus: int | None) -> None:
    """A plan file names its own GPU and count: --gpu and --num-gpus beside it are refused (they
    would be ignored), as `explain` refuses them."""
    for flag, value in (("--gpu", gpu), ("--num-gpus", num_gpus)):
        if value is not None:
            raise InputError(
                f"check: {flag}: only with --megatron-args, --megatron-log or "
                "--torchtitan-config (a plan file names its cluster: edit its [cluster] table)"
            )


def check(
    plan_path: Annotated[
        Path | None, typer.Argument(metavar="PLAN", parser=path_given, help="plan file (TOML)")
    ] = None,
    as_json: JsonOpt = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
    megatron_args_path: MegatronArgsOpt = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu", help="catalog GPU (--megatron-args, --megatron-log, --torchtitan-config)"
        ),
    ] = None,
    num_gpus: Annotated[
        int | None,
        typer.Option(
            "--num-gpus",
            min=1,
            parser=whole(1),
            help="GPU count (--megatron-args: default its torchrun's; --megatron-log: default "
            "its world_size; --torchtitan-config)",
        ),
    ] = None,
    vocab_size: VocabSizeOpt = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="list the flags --megatron-args ignored (on stderr)"),
    ] = False,
    nemo_model: Annotated[
        str | None,
        typer.Option(
            "--nemo-model",
            "--factory",
            help="the NeMo 2 recipe (`nemo llm pretrain --factory NAME`) of a --megatron-args "
            "line of NeMo overrides, where the line does not name it",
        ),
    ] = None,
    megatron_log_path: calibration.MegatronLogOpt = None,
    calibration_opt: calibration.CalibrationOpt = None,
    torchtitan_config: TorchtitanConfigOpt = None,
    framework: Annotated[
        str | None,
        typer.Option("--framework", help="check PLAN as trained by megatron or torchtitan"),
    ] = None,
) -> None:
    """Does the plan's layout fit in GPU memory? Exit 0 fits, 1 does not, 2 bad input."""
    check_headroom(headroom)
    run = None
    given = [
        name
        for name, value in (
            ("PLAN", plan_path),
            ("--megatron-args", megatron_args_path),
            ("--megatron-log", megatron_log_path),
            ("--torchtitan-config", torchtitan_config),
        )
        if value is not None
    ]
    if len(given) > 1:  # one reading of one job: the others would be ignored
        raise InputError(f"check: give one of {', '.join(given)}")
    if megatron_args_path is None:  # options of a command line's reading, else ignored
        for flag, value in (("--nemo-model", nemo_model), ("--verbose", verbose or None)):
            if value is not None:
                raise InputError(f"check: {flag}: only with --megatron-args")
        if vocab_size is not None and megatron_log_path is None:
            raise InputError("check: --vocab-size: only with --megatron-args or --megatron-log")
    source = None
    if torchtitan_config is not None or framework is not None:
        plan = titan_plan(plan_path, torchtitan_config, framework, gpu, num_gpus)
        if torchtitan_config is not None:
            source = advice_input.titan_source(torchtitan_config, gpu, num_gpus, plan, headroom)
    elif megatron_log_path is not None:
        run = calibration.log_run(megatron_log_path, gpu, num_gpus, vocab_size)
        plan = run.plan
    else:
        plan, source = _plan_and_source(
            plan_path, megatron_args_path, gpu, num_gpus, vocab_size, verbose, nemo_model, headroom
        )
    prof = calibration.use(calibration_opt, plan.job)
    job, layout = plan.job, plan.require_layout()
    warned = warn(plan)
    if plan_path is not None:  # a plan file: what its launch would refuse
        warned += launch_warnings(plan, headroom)
    module_note(plan)
    rep = memory.estimate(job, layout, headroom)
    host = host_memory.estimate(job, layout)

    def step_time(run: Job, lay: Layout) -> float:
        return cost.estimate(run, lay).step_time_s

    choices: list[list[advice.Change]] = []  # each setting's, best first (`advice_input`)
    if not rep.fits:
        choices = advice.memory_choices(job, layout, headroom, step_time)
    elif not host.fits:
        choices = [[c] for c in host_advice.host_changes(job, layout, headroom, step_time)]
    changes, said = advice_input.say_all(source, choices, step_time)
    if as_json:
        perf = cost.estimate(job, layout)
        issue = switch_notes.host_seconds(job, layout)
        data = report.plan_dict(job.arch, layout, rep, perf, host, issue)
        data["changes"] = [
            {
                "change": c.describe(),
                "saves_gib": round(c.saves / 2**30, 2),
                "memory": c.memory,
                "fits": c.fits,
                **advice_input.json_keys(said.get(id(c))),
            }
            for c in changes
        ]
        data["warnings"] = warned
        calibration.add_json(data, prof, run)
        emit_json(data)
    else:
        host_said = (host_line(job, host), host.fits)
        render.print_check(out, job, layout, rep, changes, host_said, said)
        if run is not None:
            out.print(calibration.measured_table(run, prof))
    raise typer.Exit(EXIT_OK if rep.fits and host.fits else EXIT_NO)
