"""Synchronous against asynchronous checkpoints (planner.ops.resilience).

Oracles: hand arithmetic for the blocking times (a synchronous save copies each GPU's shard to
host memory and then writes it; an asynchronous one blocks for the copy alone), and a
metamorphic relation: asynchronous save blocks no longer and trains no less of the wall clock
than synchronous save, over a grid that includes storage faster than the host copy (400 GB/s
per node), where the old model (the synchronous save timed as the write alone) had --async-
checkpoint lower goodput and block twice as long (QA repro_3).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import OpsParams


def make_job(model: str = "llama3.1-8b", num_gpus: int = 8) -> Job:
    return job(model, "h100-sxm-80gb", num_gpus, 8192, 128)


_PERF = cost.estimate(make_job(num_gpus=8), Layout(tp=8))


def perf_with_step(step_time_s: float) -> Performance:
    """A real Performance with a round step time (operations read only the step time)."""
    return replace(_PERF, step_time_s=step_time_s)


LLAMA_8B_CHECKPOINT_BYTES = 8_030_261_248 * 14
"""params_total(llama3.1-8b) x 14 bytes (bf16 weights, fp32 master, Adam m and v)."""


def test_a_synchronous_save_blocks_for_the_copy_and_the_write() -> None:
    """8B on 8 H100 (one node) at 400 GB/s per node: 112,423,657,472 B
    write  = 112,423,657,472 / 400e9          = 0.281059 s
    copy   = 112,423,657,472 / 8 / 25e9       = 0.562118 s (each GPU its eighth, 25 GB/s)
    sync blocks copy + write                  = 0.843177 s (the old model: 0.281 s, the write)
    async blocks the copy                     = 0.562118 s (its write 0.28 s < the interval)."""
    job = make_job(num_gpus=8)
    fast = OpsParams(storage_gb_per_s_per_node=400.0)
    sync = resilience.resilience(job, 2.0, fast)
    asyn = resilience.resilience(
        job, 2.0, OpsParams(storage_gb_per_s_per_node=400.0, async_checkpoint=True)
    )
    assert sync.checkpoint_bytes == LLAMA_8B_CHECKPOINT_BYTES
    assert sync.checkpoint_write_s == pytest.approx(0.281059, rel=1e-5)
    assert sync.checkpoint_blocking_s == pytest.approx(0.843177, rel=1e-5)
    assert asyn.checkpoint_blocking_s == pytest.approx(0.562118, rel=1e-5)
    assert asyn.goodput > sync.goodput
    # at the default 1 GB/s the write dominates: 112.42 s + 0.56 s
    slow = resilience.resilience(job, 2.0, OpsParams())
    assert slow.checkpoint_blocking_s == pytest.approx(112.423657 + 0.562118, rel=1e-6)


GRID = [
    (model, n, storage, rate, step)
    for model in ("llama3.1-8b", "llama3.1-70b")
    for n in (8, 64, 1024, 16_384)
    for storage in (0.05, 1.0, 25.0, 400.0, 4000.0)
    for rate in (4.74e-4, 0.01, 0.3)
    for step in (0.5, 4.0)
]


@pytest.mark.parametrize(("model", "n", "storage", "rate", "step"), GRID)
def test_asynchronous_save_never_loses_to_synchronous(
    model: str, n: int, storage: float, rate: float, step: float
) -> None:
    """Metamorphic: the same job, storage and failures with --async-checkpoint block no longer
    and reach no lower goodput (nor fewer effective tokens/s) than without. Where the settings
    leave no progress at all both are refused, or asynchronous save alone still trains."""
    job = make_job(model=model, num_gpus=n)
    base = OpsParams(storage_gb_per_s_per_node=storage, failure_rate_per_gpu_day=rate)
    asyn_params = OpsParams(
        storage_gb_per_s_per_node=storage, failure_rate_per_gpu_day=rate, async_checkpoint=True
    )
    try:
        sync = resilience.resilience(job, step, base)
    except resilience.NoProgress:
        sync = None
    try:
        asyn = resilience.resilience(job, step, asyn_params)
    except resilience.NoProgress:
        assert sync is None, "async save refused where sync save trains"
        return
    if sync is None:
        return
    assert asyn.checkpoint_blocking_s <= sync.checkpoint_blocking_s
    assert asyn.goodput >= sync.goodput
    perf = perf_with_step(step)
    e_sync = ops.operations(job, perf, None, base).effective_tokens_per_s
    assert ops.operations(job, perf, None, asyn_params).effective_tokens_per_s >= e_sync
