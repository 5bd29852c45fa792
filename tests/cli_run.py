"""The planner CLI run in-process, for the tests that drive it (pytest puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.cli.app import main
from planner.inputs.plan import Plan, load_plan

STAGE_KEYS = {
    "weights_gib",
    "grads_gib",
    "optimizer_gib",
    "activations_gib",
    "other_gib",
    "total_gib",
}
"""The memory keys of each pipeline stage in the JSON of check, explain and suggest."""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """main(argv) in-process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    captured = capsys.readouterr()
    return (code if isinstance(code, int) else 0 if code is None else 1), captured.out, captured.err


def suggest_plan(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Plan, str]:
    """`planner suggest argv --write-plan` in-process: (the written first pick, stdout with its
    line breaks as spaces, as the notes are read across rich's wrapping)."""
    path = tmp_path / "plan.toml"
    code, out, err = run([*argv, "--write-plan", str(path)], capsys)
    assert code == 0, err
    return load_plan(path), out.replace("\n", " ")
