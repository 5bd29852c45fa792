"""The Adam step's time (planner.model.stage_sync.optimizer_time): the memory passes Megatron-Core's
optimizer makes over the shard a GPU updates and over the gradient buffer it holds.

Oracle: hand arithmetic, pass by pass, from Megatron-Core d98e8a64: the bf16 gradient shard
copied into an fp32 main gradient (read 2, write 4; `shard_model_grad.float()`, nothing with fp32
buffers), the gradient norm's read of the shard's main gradients (4), Adam (gradient 4, master
weight and two fp32 moments read and written, 2 x 12), the master weight copied back to the
16-bit weight (read 4, write 2), then the whole buffer zeroed (2 or 4 per parameter)."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import stage_sync
from planner.model.layer_time import gpu_of

N = 1.0e9  # the stage's parameters, all dense


def _seconds(grads: str, zero: int, dp: int = 8) -> tuple[float, float]:
    """(model's optimizer seconds, HBM bandwidth) for N dense parameters on dp ranks."""
    j = job("llama3.1-8b", "h100-sxm-80gb", dp, 4096, 64, main_grad_dtype=grads)
    lay = Layout(tp=1, pp=1, dp=dp, zero_stage=zero)
    gpu = gpu_of(j)
    return stage_sync.optimizer_time(j, lay, N, 0.0, gpu), gpu.hbm


def test_distributed_optimizer_with_bf16_gradients() -> None:
    # shard N / 8: copy 6 + norm 4 + Adam 4 + 24 + master -> weight 6 = 44 bytes each;
    # zeroing the bf16 buffer 2 bytes x N: 5.5e9 + 2.0e9 = 7.5e9 bytes
    t, hbm = _seconds("bf16", 1)
    assert t * hbm == pytest.approx(7.5e9)


def test_distributed_optimizer_with_fp32_gradients() -> None:
    # no copy: 38 bytes x N / 8 = 4.75e9, zeroing 4 x N = 4.0e9
    t, hbm = _seconds("fp32", 1)
    assert t * hbm == pytest.approx(8.75e9)


def test_without_zero_every_rank_updates_everything() -> None:
    # 38 x N + 4 x N = 4.2e10 bytes (fp32 gradients, the shard is the whole stage)
    t, hbm = _seconds("fp32", 0)
    assert t * hbm == pytest.approx(4.2e10)


def test_the_norm_reads_the_shard_not_the_buffer() -> None:
    # what grows with dp is only the zeroing: 64 ranks leave 38 x N / 64 + 4 N = 4.59e9 bytes,
    # against 4.2e10 unsharded, so the step approaches the zeroing pass alone (4 N)
    t, hbm = _seconds("fp32", 1, dp=64)
    assert t * hbm == pytest.approx(38 * N / 64 + 4 * N)
    assert t * hbm < 1.2 * 4 * N


def test_zero_2_is_never_faster_than_zero_1() -> None:
    """The buffer is zeroed whole at every stage (the search's stops rely on the dominance)."""
    assert _seconds("bf16", 2)[0] == _seconds("bf16", 1)[0]


def test_fsdp2_updates_its_fp32_shard_in_place() -> None:
    """torchtitan's FSDP2: the fp32 parameter shard is the master (no copy back), gradients are
    reduced into fp32 shards and freed, not zeroed: norm 4 + Adam 28 = 32 bytes x N / 8 = 4e9."""
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, framework="torchtitan")
    gpu = gpu_of(j)
    t = stage_sync.optimizer_time(j, Layout(tp=1, pp=1, dp=8, zero_stage=3), N, 0.0, gpu)
    assert t * gpu.hbm == pytest.approx(4.0e9)
