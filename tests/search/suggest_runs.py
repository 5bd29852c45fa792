"""`planner suggest --json` run in-process, and the layout fields its rows are compared by,
shared by the test_suggest*.py files.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_run import run

LAYOUT_KEYS = ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch_size", "zero_stage", "recompute")


def suggest_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["suggest", *argv, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data
