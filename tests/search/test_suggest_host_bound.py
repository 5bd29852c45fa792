"""When every layout that fits the GPUs is over its host share, `suggest` names host memory as
the binding limit and proposes host-side changes, each confirmed by the search (QA: it named
the leanest layout's 9.8 GiB GPU peak "needed" against 77.3 GiB available, a contradiction,
with the host rejections only in the counts).

Oracle: hand arithmetic. Llama 3.1 8B (8.03e9 parameters) on 8 H100 with nodes of 300 GiB of
host memory (300 / 8 - 32 reserved = 5.5 GiB usable a GPU) and the optimizer wholly offloaded:
the layout that pins least (tp 8, ZeRO 3 over dp 1) pins 16 B x 8.03e9 / 8 = 14.96 GiB a GPU,
so nodes need (14.96 + 32) x 8 = 375.7 -> 376 GiB; with the optimizer on the GPU nothing is
pinned. That is not the GPU-leanest layout, since Megatron-FSDP keeps the offloaded share's fp32
main weights on the GPU: the node size is bisected to the least that fits, not read off it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

JOB = """[model]
name = "llama3.1-8b"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
host_memory_gib_per_node = {host}

[training]
seq_length = 16384
global_batch_size = 16
optimizer_offload_fraction = {fraction}
"""


def _suggest(tmp_path: Path, capsys: pytest.CaptureFixture[str], **kw: object) -> tuple[int, dict]:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(**{"host": 300, "fraction": 1.0, **kw}))
    code, out, _ = run(["suggest", str(path), "--json"], capsys)
    return code, json.loads(out)


def test_host_memory_binds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = _suggest(tmp_path, capsys)
    assert code == 1 and not doc["candidates"]
    assert doc["binding"].startswith("host memory:")
    assert "GiB a GPU, 5.5 usable" in doc["binding"]
    assert doc["changes"] == [
        "training.optimizer_offload_fraction 0 (the optimizer on the GPU)",
        "nodes with at least 376 GiB of host memory (host_memory_gib_per_node)",
    ]


def test_the_changes_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _suggest(tmp_path, capsys, fraction=0.0)[0] == 0
    assert _suggest(tmp_path, capsys, host=376)[0] == 0
    assert _suggest(tmp_path, capsys, host=375)[0] == 1  # 375.7 rounds up
