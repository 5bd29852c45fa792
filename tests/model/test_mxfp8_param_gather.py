"""MXFP8 weights gathered through the gradient buffer (`stage_sync.gathers_in_grad_buffer`):
the distributed optimizer's all-gather moves bf16, not 1-byte FP8, and the buffer is zeroed a
second time after the gather.

Oracles: Megatron-LM d98e8a64 param_and_grad_buffer.py:1160-1179 (the quantised weights' buffer
is one shared buffer whose param_data is bf16: the buffer itself under bf16 gradients, a bf16
view of its first half under fp32 ones), distrib_optimizer.py:2904-2930 (the fp32 master
written into it, as bf16), param_and_grad_buffer.py:521 (the all-gather on param_data) and
:301-335 (`bucket.param_data.zero_()` after the gather); Llama 3.1 8B's shapes by hand.
"""

from __future__ import annotations

from typing import Any

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, stage_sync
from planner.model.layer_time import gpu_of
from planner.model.stage_params import decoder_params

B200 = "b200-sxm-180gb"

# Llama 3.1 8B decoder layer: q and o 4096 x 4096 each, k and v 4096 x 1024 each, gate / up /
# down 3 x 4096 x 14336, two RMSNorms of 4096 (counted with the quantised weights, as
# stage_params.quantised_decoder_params says): 33,554,432 + 8,388,608 + 176,160,768 + 8,192
# = 218,112,000 per layer, x 32 layers
LLAMA8B_DECODER = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096)


def _fp8(recipe: str, **kw: Any) -> Job:
    return job("llama3.1-8b", B200, 8, 8192, 64, precision="fp8", fp8_recipe=recipe, **kw)


def test_hand_count_of_the_decoder_weights() -> None:
    lay = Layout(dp=8, zero_stage=1)
    dense, expert = decoder_params(_fp8("mxfp8"), lay, lay.chunk_layers(32)[0])
    assert (dense, expert) == (LLAMA8B_DECODER, 0)


@pytest.mark.parametrize("grads", ["bf16", "fp32"])
def test_mxfp8_weights_are_gathered_in_bf16(grads: str) -> None:
    lay = Layout(dp=8, zero_stage=1)
    chunks = lay.chunk_layers(32)[0]
    j = _fp8("mxfp8", main_grad_dtype=grads)
    total = LLAMA8B_DECODER * 1.25  # the embedding and output layer besides, in bf16
    # param_data is bf16 under either gradient dtype (:1174-1178): 2 bytes for every parameter
    assert stage_sync.gathered_param_bytes(j, lay, chunks, total, 0.0) == (2.0, 2.0)
    # per-tensor FP8 maps its 1-byte data into the parameter buffer: decoder weights at 1, the
    # rest at 2: 2 - 1 x decoder / total = 2 - 1 / 1.25 = 1.2
    delayed = _fp8("delayed", main_grad_dtype=grads)
    got = stage_sync.gathered_param_bytes(delayed, lay, chunks, total, 0.0)[0]
    assert got == pytest.approx(1.2)


def test_the_grad_buffer_path_needs_the_param_gather_and_zero_1() -> None:
    # without fp8_param_gather the weights stay bf16 parameters (2 bytes either way); at ZeRO 2
    # (Megatron-FSDP) arguments.py:1137 turns the buffer reuse off
    assert stage_sync.gathers_in_grad_buffer(_fp8("mxfp8"), Layout(dp=8, zero_stage=1))
    off = _fp8("mxfp8", fp8_param_gather=False)
    assert not stage_sync.gathers_in_grad_buffer(off, Layout(dp=8, zero_stage=1))
    assert not stage_sync.gathers_in_grad_buffer(_fp8("mxfp8"), Layout(dp=8, zero_stage=2))
    assert not stage_sync.gathers_in_grad_buffer(_fp8("delayed"), Layout(dp=8, zero_stage=1))


def test_the_gather_buffer_is_zeroed_again_each_step() -> None:
    # the step's optimizer part under MXFP8 exceeds the per-tensor recipe's by the second zero
    # pass alone: 2 bytes (bf16 param_data) x 6,979,584,000 quantised weights / HBM bandwidth
    lay = Layout(dp=8, zero_stage=1, sequence_parallel=False)
    mx, delayed = _fp8("mxfp8"), _fp8("delayed")
    extra = cost.estimate(mx, lay).breakdown.optimizer
    extra -= cost.estimate(delayed, lay).breakdown.optimizer
    assert extra == pytest.approx(2.0 * LLAMA8B_DECODER / gpu_of(mx).hbm, rel=1e-9)
    assert extra > 0
