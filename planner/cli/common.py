"""What every `planner` command shares: the console, JSON output, common options and checks."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.inputs.errors import InputError
from planner.inputs.job_request import DEFAULT_JOB
from planner.inputs.plan import Plan
from planner.model import memory
from planner.search.rules import warnings

out = Console(width=None if sys.stdout.isatty() else 160, markup=False, emoji=False)
"""stdout. No rich markup nor emoji codes: names and paths a user gave print as they are
(`render`; a name holding ":smile:" too, and rich's emoji table is not loaded)."""
err = Console(stderr=True, markup=False, emoji=False)
"""stderr: the job planned, progress."""


def whole(low: int | None = None, high: int | None = None) -> Callable[[Any], int]:
    """The parser of an integer option (typer's `parser=`): plain decimal digits (a sign only
    where `low` is None), within [low, high]; else a usage error (exit 2) naming the option and
    the value. typer's own int took `16.0`, `1_6` and `8.0` as integers and refused `1e3`
    without naming it. The option's `min` / `max` still show in --help; this applies them."""

    def parse(value: Any) -> int:
        if isinstance(value, int):  # a default
            return value
        text = str(value)
        shown = repr(text if len(text) <= 40 else text[:40] + "...")
        digits = r"[0-9]+" if low is not None and low >= 0 else r"[-+]?[0-9]+"
        if not re.fullmatch(digits, text):
            raise typer.BadParameter(f"expected an integer in decimal digits (got {shown})")
        try:
            number = int(text)
        except ValueError:  # past Python's 4,300 digits
            raise typer.BadParameter(f"an integer of {len(text):,} digits (got {shown})") from None
        if (low is not None and number < low) or (high is not None and number > high):
            bounds = f"at least {low}" if high is None else f"{low} to {high}"
            raise typer.BadParameter(f"expected {bounds} (got {shown})")
        return number

    return parse


def path_given(value: Any) -> Path:
    """The parser of a path option or argument (typer's `parser=`): an empty one (an unset
    `$OUTDIR`) is a usage error (exit 2) naming the option and `''`, where click's Path read it
    as `.` (`launch --out ''` wrote into the working directory)."""
    return Path(text_given(value))


def text_given(value: Any) -> str:
    """`path_given` for an option that holds a path as text (`--megatron-args`, where '-' is
    standard input; `--calibration`, where 'none' is a word)."""
    text = str(value)
    if not text:
        raise typer.BadParameter("expected a path (got '')")
    return text


JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
HeadroomOpt = Annotated[float, typer.Option("--headroom", help="percent of GPU memory kept free")]
TorchtitanConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--torchtitan-config",
        parser=path_given,
        help="a torchtitan job config TOML (as launch --target torchtitan writes), or a "
        "Python configuration FILE.py[:FUNCTION] (as --target torchtitan-module writes); "
        "--gpu where it names none",
    ),
]

MegatronArgsOpt = Annotated[
    str | None,
    typer.Option(
        "--megatron-args",
        parser=text_given,
        help="a file holding a Megatron-LM command line, launch script or test configuration "
        "(model_config.yaml) ('-' = stdin)",
    ),
]
VocabSizeOpt = Annotated[
    int | None,
    typer.Option(
        "--vocab-size",
        min=1,
        parser=whole(1),
        help="the tokenizer's vocabulary, where the command line or log does not imply it "
        "(--megatron-args, --megatron-log)",
    ),
]
DEFAULT_HEADROOM = memory.DEFAULT_HEADROOM_PCT


def _default(table: str, key: str) -> str:
    return f"(default: the job file's, else {DEFAULT_JOB[table][key]})"


# the job flags of suggest and scale; each says the default it falls back to
ModelOpt = Annotated[
    str | None,
    typer.Option(help=f"zoo name, config.json or model TOML {_default('model', 'name')}"),
]
GpuOpt = Annotated[str | None, typer.Option(help=f"catalog GPU name {_default('cluster', 'gpu')}")]
SeqOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        parser=whole(1),
        help=f"tokens per sequence {_default('training', 'seq_length')}",
    ),
]
BatchOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        parser=whole(1),
        help=f"sequences per optimizer step {_default('training', 'global_batch_size')}",
    ),
]
PrecisionOpt = Annotated[
    str | None,
    typer.Option(
        help="bf16, fp16, fp8, fp4 (NVFP4) or fp32 (a Megatron-LM line without --bf16 / --fp16: "
        f"its GEMMs at the TF32 peak) {_default('training', 'precision')}"
    ),
]


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def headroom_header(headroom: float) -> list[str]:
    """The plan file's header line for a plan ranked at a headroom other than the default, which
    `check` and `launch` would otherwise judge it at (none at the default)."""
    if headroom == DEFAULT_HEADROOM:
        return []
    h = f"{headroom:g}"
    said = f"ranked with --headroom {h}: run planner check --headroom {h} and launch --headroom {h}"
    return [said]


def check_headroom(headroom: float) -> None:
    if not 0 <= headroom < 100:
        raise InputError(f"--headroom: must be in [0, 100) percent (got {headroom})")


MODULE_NOTE = (
    "a torchtitan Python configuration (b5bcd76c): the prediction is for the training code "
    "planner models, torchtitan e347b1e5's with this configuration's loss; FlexAttention's "
    "per-document masks (less attention work on packed short documents) and CUDA graphs are "
    "not modelled"
)


def module_note(plan: Plan) -> list[str]:
    """For a plan read from a torchtitan Python configuration: what its prediction is for
    (`MODULE_NOTE`), also written on stderr; else nothing."""
    if plan.path is None or not plan.path.name.partition(":")[0].endswith(".py"):
        return []
    line = f"{plan.path}: {MODULE_NOTE}"
    sys.stderr.write(f"planner: note: {line}\n")
    return [line]


def warn(plan: Plan) -> list[str]:
    """What Megatron-LM would warn about in the plan's layout (`planner.search.rules.warnings`),
    and the settings the plan gives that change nothing (`Plan.inert`), each as 'file: field:
    message', also written on stderr; the plan stays valid."""
    where = str(plan.path) if plan.path else "<plan>"
    found = [] if plan.layout is None else warnings(plan.job, plan.layout)
    lines = [f"{where}: {v.field}: {v.message}" for v in found]
    lines += [f"{where}: {field}: {message}" for field, message in plan.inert]
    for line in lines:
        sys.stderr.write(f"planner: warning: {line}\n")
    return lines


def launch_lines(plan: Plan, headroom: float = DEFAULT_HEADROOM) -> tuple[list[str], list[str]]:
    """What `planner launch` refuses of the plan (`emit.launch.refusals`: a node count its
    launchers cannot start, a model a runtime cannot run), one line per reason naming the
    targets; and what the targets that do not refuse it launch differently, with the step or
    peak they predict (`launch_pricing.megatron_lm_launched_note`: the loss Megatron-LM runs, bf16
    attention for FP8 attention; `launch_pricing.bridge_launched_note`: Megatron-Bridge's optimizer
    path), none where they launch it as it is; their peaks judged at `headroom` percent. The
    targets are rendered once for both."""
    from planner.emit import launch, launch_pricing

    refused = launch.refusals(plan)
    lines = [
        f"launch --target {', '.join(targets)} refuses this plan: {message}"
        for message, targets in refused.items()
    ]
    if plan.job.framework != "megatron":
        return lines, []
    refused_targets = {t for ts in refused.values() for t in ts}
    notes = []
    if not refused_targets & set(launch_pricing.MEGATRON_LM_TARGETS):
        notes.append(launch_pricing.megatron_lm_launched_note(plan, headroom))
    if "megatron-bridge" not in refused_targets and not plan.job.pools:
        notes.append(launch_pricing.bridge_launched_note(plan, headroom))
    return lines, [n for n in notes if n is not None]


def launch_warnings(plan: Plan, headroom: float = DEFAULT_HEADROOM) -> list[str]:
    """`launch_lines` of a plan file: the refusals as warnings on stderr (`check` and `explain`
    PLAN: the memory still fits, and the exit code says so; the plan's first launch would find
    them), what the targets launch differently as notes (not a fault of the plan)."""
    lines, notes = launch_lines(plan, headroom)
    for line in lines:
        sys.stderr.write(f"planner: warning: {line}\n")
    for note in notes:
        sys.stderr.write(f"planner: note: {note}\n")
    return lines


def launch_notes(path: Path, headroom: float = DEFAULT_HEADROOM) -> None:
    """On stderr, `launch_lines` of the plan just written, after the warnings `check` gives
    the plan (`common.warn`)."""
    from planner.inputs.plan import load_plan

    plan = load_plan(path)
    warn(plan)  # what `check` warns about the plan, as it says it
    lines, notes = launch_lines(plan, headroom)
    for line in [*lines, *notes]:
        err.print(f"note: {line}")
