"""The optimizer step's HBM passes that `stage_sync.optimizer_time` took too few or too many of:
Transformer Engine's FusedAdam round trips of its 16-bit states (`adam_step.state_pass_bytes`),
its in-kernel weight write in place of Megatron's copy back (`adam_step.weight_write_bytes`),
and fp16's unscaling of the main gradients (`loss_scale.unscale_bytes`).

Oracles (hand arithmetic per parameter of the shard, N / 8 at dp 8, ZeRO 1; the zeroing of the
buffer, grad bytes x N, as tests/model/test_optimizer_time.py):
- TransformerEngine 04912bf0 transformer_engine/pytorch/optimizers/fused_adam.py: `step` takes
  `get_unscaled_state` (`.float()` of a bf16 state: read 2, write 4; an fp16 one also `mul_`,
  4 + 4), the kernel reads and writes the fp32 copies (4 + 4) and writes the model weight,
  `_apply_scale` casts back (:265 `scaled_state.copy_(unscaled_state.bfloat16())`: 4 + 2 and
  2 + 2; fp16: `aminmax` 4, `mul_` 4 + 4, `copy_` 4 + 2).
- Megatron-LM d98e8a64 distrib_optimizer.py:2820-2823: on the decoupled precision-aware path
  `_copy_main_params_to_model_params` returns at once (no 4 + 2 copy back).
- Megatron-LM d98e8a64 optimizer.py:713-724 via :757-764: with fp16's grad scaler
  (optimizer/__init__.py:644-654) the shard's fp32 main gradients are unscaled in place
  (read 4, write 4).
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import adam_step, loss_scale, stage_sync
from planner.model.layer_time import gpu_of

N = 1.0e9
LAY = Layout(tp=1, pp=1, dp=8, zero_stage=1)


def _bytes(**kw: object) -> float:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, **kw)
    gpu = gpu_of(j)
    return stage_sync.optimizer_time(j, LAY, N, 0.0, gpu) * gpu.hbm


def test_bf16_moments_cost_more_than_fp32_ones() -> None:
    # fp32 moments, bf16 weights with the int16 remainder, fp32 gradient buffer read in place:
    # norm 4 + grad 4 + (remainder+weight 8 as the master) + moments 16 = 32 B x N / 8 = 4e9,
    # zeroing 4 N = 4e9: 8e9 (it read 8.75e9: the copy back 6 B, which the kernel makes)
    fp32 = _bytes(use_precision_aware_optimizer=True)
    assert fp32 == pytest.approx(8.0e9)
    # bf16 moments: each 2 + 4, 4 + 4, 4 + 2 + 2 + 2 = 24 B: 4 + 4 + 8 + 48 = 64 B x N / 8
    # = 8e9, + 4e9 zeroing: 12e9 (it read 8.25e9, below fp32 moments)
    bf16 = _bytes(use_precision_aware_optimizer=True, optimizer_state_dtype="bf16")
    assert bf16 == pytest.approx(12.0e9)
    assert bf16 > fp32


def test_fp16_master_round_trip() -> None:
    # fp16 params, fp16 master, fp32 moments, fp32 grads: norm 4 + grad 4 + master 8 + 32 of
    # its passes + moments 16 + the kernel's fp16 weight write 2 + fp16 unscaling of the
    # fp32 buffer 8 = 74 B x N / 8 = 9.25e9, zeroing 4e9
    kw = {"precision": "fp16", "use_precision_aware_optimizer": True, "main_params_dtype": "fp16"}
    assert _bytes(**kw) == pytest.approx(9.25e9 + 4.0e9)
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, **kw)
    assert adam_step.state_pass_bytes(j, 1) == 32.0
    assert adam_step.weight_write_bytes(j) == 2.0


def test_fp16_unscales_the_main_gradients() -> None:
    # plain distributed optimizer, fp16, fp32 buffers: 38 B as bf16 (test_optimizer_time) + 8
    # of unscaling = 46 B x N / 8 = 5.75e9, zeroing 4e9
    assert _bytes(precision="fp16") == pytest.approx(5.75e9 + 4.0e9)
    # bf16 buffers: the step's fp32 copies are what is unscaled (4 + 4)
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, precision="fp16", main_grad_dtype="bf16")
    assert loss_scale.unscale_bytes(j, 1) == 8.0
    # bf16 training has no grad scaler
    assert _bytes() == pytest.approx(8.75e9)
