"""The pooled search gives one answer (issue 25): two processes (different hash seeds) print the
same table and JSON for the two-pool example, whose layouts have many splits that tie in the
solver's objective (twin pools, ranks of equal per-layer time).

Oracle: the output of one run, byte for byte, in the other."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools-two-datacentres-h100.toml"


def suggest(seed: str, *extra: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed, "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "planner", "suggest", str(EXAMPLE), *extra],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout


def test_two_runs_give_identical_output() -> None:
    first, second = suggest("1", "--json"), suggest("2", "--json")
    assert first == second and '"layers_per_stage"' in first
    assert suggest("3") == suggest("4")
