"""When every layout that fits the GPUs is over its host share, `suggest` names host memory as
the binding limit and proposes host-side changes, each confirmed by the search (QA: it named
the leanest layout's 9.8 GiB GPU peak "needed" against 77.3 GiB available, a contradiction,
with the host rejections only in the counts).

Oracle: hand arithmetic. Llama 3.1 8B (8.03e9 parameters) on 8 H100 with nodes of 300 GiB of
host memory (300 / 8 - 32 reserved = 5.5 GiB usable a GPU) and the optimizer wholly offloaded:
the layout that pins least (tp 8, ZeRO 3 over dp 1) pins 16 B x 8.03e9 / 8 = 14.96 GiB a GPU,
and the round-up of its pinned fp32 master and gradient (8 of the 16 B) to powers of two, a
block a parameter: 4352 / 3832 of those bytes (tests/model/test_host_pinned.py's hand sum of
Llama 3.1 8B's tp-8 blocks), 15.99 GiB a GPU, so nodes need (15.99 + 32) x 8 = 383.9 -> 384
GiB (its synchronous ZeRO 3 save stages nothing pinned); with the optimizer on the GPU nothing
is pinned. That is not the GPU-leanest layout, since Megatron-FSDP keeps the offloaded share's fp32
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
        "nodes with at least 384 GiB of host memory (host_memory_gib_per_node)",
    ]


def test_the_changes_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _suggest(tmp_path, capsys, fraction=0.0)[0] == 0
    assert _suggest(tmp_path, capsys, host=384)[0] == 0
    assert _suggest(tmp_path, capsys, host=383)[0] == 1  # 383.9 rounds up


ASYNC = JOB + "async_save = {async_save}\n"


def test_the_checkpoint_staging_binds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing offloaded, but --async-save: every save, ZeRO 2/3's too, stages a GPU's share of
    the checkpoint in pinned host memory (`host_checkpoint`; Megatron-LM d98e8a64
    filesystem_async.py:243), over 8 GPUs of one 8.03e9-parameter model more than the 5.5 GiB
    usable (2 B of bf16 weights a parameter alone: 2 x 8.03e9 / 8 = 1.87 GiB, and the optimizer
    state besides). The binding names the staging as all there is (nothing offloaded) and the
    change to synchronous saves, which ZeRO 2/3 make without pinned copies; that job fits."""
    path = tmp_path / "job.toml"
    path.write_text(ASYNC.format(host=300, fraction=0.0, async_save="true"))
    code, out, _ = run(["suggest", str(path), "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["binding"].startswith("host memory:")
    assert doc["binding"].endswith("it fits but for the pinned staging of its checkpoint saves")
    assert "(checkpoint staging " in doc["binding"]
    assert doc["changes"][0] == (
        "training.async_save false (ZeRO 2/3's synchronous saves stage nothing)"
    )
    path.write_text(ASYNC.format(host=300, fraction=0.0, async_save="false"))
    assert run(["suggest", str(path), "--json"], capsys)[0] == 0


SMALL_GPUS = JOB.replace("num_gpus = 8\n", "num_gpus = 8\nmemory_gib = 3\n")


def test_gpu_and_host_memory_both_bind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On GPUs of 3 GiB (2.91 usable) the same job fits neither: every GPU keeps at least an
    eighth of the parameters' bf16 weights and fp32 gradients, 6 B x 8.03e9 / 8 = 5.6 GiB
    (by hand), and every layout is over the host share whatever the GPU memory (above). The
    leanest layout named is one the host refuses, and said to be; GPU memory alone is not
    offered, as no GPU size fits a layout the host holds (`test_host_memory_binds`: none at
    80 GiB)."""
    path = tmp_path / "job.toml"
    path.write_text(SMALL_GPUS.format(host=300, fraction=1.0))
    code, out, _ = run(["suggest", str(path), "--json"], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["binding"].startswith("memory: the leanest layout")
    needs = float(doc["binding"].split(" needs ")[1].split(" GiB")[0])
    assert needs >= 5.6
    assert doc["binding"].endswith("and pins more host memory than a GPU's share holds")
    assert not any(c.startswith("GPUs with at least") for c in doc["changes"])
