"""`planner launch`: the plan's launch file (Megatron-LM arguments, torchrun, Slurm, Kubernetes, a
torchtitan config or a Megatron-Bridge override), to stdout or written under `--out`
(`planner.emit.launch`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import DEFAULT_HEADROOM, HeadroomOpt, check_headroom, path_given
from planner.emit import launch as launch_files


def launch(
    plan_path: Annotated[
        Path, typer.Argument(metavar="PLAN", parser=path_given, help="plan file (TOML)")
    ],
    target: Annotated[
        str, typer.Option("--target", help=f"one of {', '.join(launch_files.TARGETS)}")
    ],
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", parser=path_given, help="write into this directory (default: stdout)"
        ),
    ] = None,
    job_name: Annotated[
        str | None, typer.Option("--job-name", help="job name (default: the plan file's stem)")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
    headroom: HeadroomOpt = DEFAULT_HEADROOM,
) -> None:
    """Write the plan's launch file: Megatron-LM arguments, torchrun, Slurm, Kubernetes,
    torchtitan or Megatron-Bridge. --headroom: the one the plan was ranked with (its header
    says so), which decides what the launch may use and whether it fits (the file header's
    verdict, which names it where it is not 3%, and the stderr warning)."""
    check_headroom(headroom)
    done = launch_files.launch(plan_path, target, out_dir, job_name, force, headroom)
    if done.warning is not None:
        print(f"planner: warning: {done.warning}", file=sys.stderr)
    if done.note is not None:
        print(f"note: {done.note}", file=sys.stderr)
    if done.path is None:
        sys.stdout.write(done.text)
    else:
        print(done.path)
