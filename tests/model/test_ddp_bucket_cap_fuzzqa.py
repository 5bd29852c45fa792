"""A ddp_bucket_size larger than the stage's parameters (fuzz QA: ddp_bucket_size = 1e12 under ZeRO
2 showed 4 TiB of "other" memory, and exit 1, for llama3.1-8b: the transient gradient bucket was
counted at 1e12 parameters).

Oracle: Megatron-LM d98e8a64 megatron/core/distributed/param_and_grad_buffer.py
`_compute_default_per_buffer_param_layout`: parameters are walked in backprop order and a bucket
closes once it holds `bucket_size` parameters, or at the buffer's last parameter; a bucket size
above the buffer makes one bucket of the whole buffer (`_buckets` below transliterates it). Each
model chunk is its own DDP with its own buffers, so a bucket holds at most a chunk's parameters:
the same as --ddp-num-buckets 1 (training.py resolve_ddp_bucket_size: the chunk's parameters //
1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.model import dp_buckets, memory

PLAN = """[model]
name = "llama3.1-8b"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16

[training]
seq_length = 8192
global_batch_size = 128

[parallel]
tp = 1
pp = 1
dp = 16
micro_batch_size = 1
zero_stage = 2
{bucket}
"""


def _buckets(numels: list[int], bucket_size: int | None) -> list[int]:
    """Megatron's `_compute_default_per_buffer_param_layout` (d98e8a64), the bucket sizes only."""
    sizes, start, end, open_params = [], 0, 0, 0
    for n in reversed(numels):
        end += n
        open_params += 1
        if bucket_size is not None and end - start >= bucket_size:
            sizes.append(end - start)
            start, open_params = end, 0
    if open_params:
        sizes.append(end - start)
    return sizes


def _stage(tmp_path: Path, bucket: str) -> memory.StageMemory:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(bucket=bucket))
    plan = load_plan(path)
    return memory.estimate(plan.job, plan.require_layout()).stages[0]


def test_megatron_makes_one_bucket_of_the_buffer() -> None:
    numels = [4096 * 14336] * 6 + [4096] * 3
    assert _buckets(numels, 10**12) == [sum(numels)]
    assert _buckets(numels, None) == [sum(numels)]
    assert len(_buckets(numels, 4096 * 14336)) == 6


def test_a_bucket_beyond_the_parameters_is_the_parameters(tmp_path: Path) -> None:
    huge = _stage(tmp_path, "ddp_bucket_size = 1000000000000")
    one = _stage(tmp_path, "ddp_num_buckets = 1")
    assert huge.other == one.other
    assert huge.other < 64 * 2**30  # 8.03e9 fp32 gradients are 30 GiB, not 4 TiB
    assert huge.other > _stage(tmp_path, "").other  # one bucket of everything, not 40M


def test_explicit_bucket_is_capped_at_a_chunks_parameters() -> None:
    assert dp_buckets.explicit_bucket(Layout(ddp_bucket_size=10**12), 8e9, 32) == 8e9
    assert dp_buckets.explicit_bucket(Layout(pp=2, vpp=2, ddp_bucket_size=10**12), 8e9, 16) == 4e9
    assert dp_buckets.explicit_bucket(Layout(ddp_bucket_size=10**8), 8e9, 32) == 10**8


def test_check_counts_the_capped_bucket(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = {}
    for name, bucket in (
        ("huge", "ddp_bucket_size = 1000000000000"),
        ("one", "ddp_num_buckets = 1"),
    ):
        path = tmp_path / f"{name}.toml"
        path.write_text(PLAN.format(bucket=bucket))
        code, out, err = run(["check", str(path), "--json"], capsys)
        assert code in (0, 1), err
        other[name] = json.loads(out)["memory"]["stages"][0]["other_gib"]
    assert other["huge"] == other["one"] < 64  # was 4,099 GiB
