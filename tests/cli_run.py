"""The planner CLI run in-process, for the tests that drive it (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import pytest

from planner.cli.app import main

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
