"""`python -m planner` in a subprocess, to see exactly what a script or CI job would see; and
the bundled example plan the test_cli*.py files run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from paths import REPO

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"


def run_subprocess(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
