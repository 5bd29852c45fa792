"""Pooled `suggest` prints the twins folded into each row ('#3 also: cp 2 x mbs 2 ...'), as the
one-kind search does (README: "so the top K rows are K different layouts", the rest named).

Oracle: the pooled search's own folded twins (`PoolSearch.twins`; tests/search/
test_pool_search_rows.py checks them against the brute force)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.plan import load_plan
from planner.search import pool_search

JOB = """[model]
name = "llama3.1-8b"

[cluster]
[[cluster.pools]]
name = "l40s"
gpu = "l40s-48gb"
num_gpus = 8

[[cluster.pools]]
name = "a100"
gpu = "a100-sxm-40gb"
num_gpus = 8

[cluster.between_pools]
bandwidth_gb_per_s_per_gpu = 25.0
latency_us = 10

[training]
seq_length = 8192
global_batch_size = 64
"""


def test_folded_twins_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    res = pool_search.search(load_plan(path).job, 3.0, top=5)
    expected = [
        f"#{i} also: "
        + ", ".join(f"cp {t.layout.cp} x mbs {t.layout.micro_batch_size}" for t in twins)
        for i, twins in enumerate(res.twins, 1)
        if twins
    ]
    assert expected  # the QA's pair
    code, out, _ = run(["suggest", str(path), "--top", "5"], capsys)
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines() if " also: " in line]
    assert len(lines) == len(expected)
    for line, want in zip(lines, expected, strict=True):
        assert line.startswith(want.split(", ")[0]), (line, want)
