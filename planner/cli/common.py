"""What every `planner` command shares: the console, JSON output, common options and checks."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console

from planner.inputs.errors import InputError
from planner.model import memory

out = Console(width=None if sys.stdout.isatty() else 160)

JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
HeadroomOpt = Annotated[float, typer.Option("--headroom", help="percent of GPU memory kept free")]
DEFAULT_HEADROOM = memory.DEFAULT_HEADROOM_PCT


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def check_headroom(headroom: float) -> None:
    if not 0 <= headroom < 100:
        raise InputError(f"--headroom: must be in [0, 100) percent (got {headroom})")
