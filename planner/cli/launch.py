"""`planner launch`: the plan's launch file (Megatron-LM arguments, torchrun, Slurm, Kubernetes, a
torchtitan config or a Megatron-Bridge override), to stdout or written under `--out`
(`planner.emit.launch`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from planner.cli.common import path_given
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
) -> None:
    """Write the plan's launch file: Megatron-LM arguments, torchrun, Slurm, Kubernetes,
    torchtitan or Megatron-Bridge."""
    done = launch_files.launch(plan_path, target, out_dir, job_name, force)
    if done.warning is not None:
        print(f"planner: warning: {done.warning}", file=sys.stderr)
    if done.note is not None:
        print(f"note: {done.note}", file=sys.stderr)
    if done.path is None:
        sys.stdout.write(done.text)
    else:
        print(done.path)
