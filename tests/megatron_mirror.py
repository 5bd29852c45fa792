"""Megatron-LM's source at the commit planner reads (d98e8a64), from a local git mirror where the
machine has one (tests that check planner's tables against the source skip without it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

MIRROR = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
COMMIT = "d98e8a64"


def source(path: str) -> str:
    """The text of `path` at COMMIT in the mirror."""
    out = subprocess.run(
        ["git", "--git-dir", str(MIRROR), "show", f"{COMMIT}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout
