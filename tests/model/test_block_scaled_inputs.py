"""The FP8 linear inputs a layer keeps for its weight gradient carry their block scales under
MXFP8 and blockwise scaling.

Oracle: TransformerEngine d0067d0d module/linear.py:616 keeps only the input's column-wise copy
(`update_usage(rowwise_usage=False, columnwise_usage=True)`); its scales are
tensor/mxfp8_tensor.py:139-175 (column-wise scale_inv [M/32, K], uint8: 1/32 byte per element)
and tensor/float8_blockwise_tensor.py:202-207 ([ceil(M/128), K], fp32: 4/128 = 1/32); delayed
and tensorwise scaling keep one scale per tensor. Hand arithmetic in the test.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import activations
from planner.model.stage_activations import shard

LAY = Layout(tp=2, dp=4, sequence_parallel=True)


@pytest.mark.parametrize(
    ("gpu", "recipe"), [("b200-sxm-180gb", "mxfp8"), ("h100-sxm-80gb", "blockwise")]
)
def test_block_scales_add_a_32nd_of_each_saved_fp8_input(gpu: str, recipe: str) -> None:
    per_tensor = job("llama3.1-8b", gpu, 8, 8192, 64, precision="fp8", fp8_recipe="tensorwise")
    blocked = job("llama3.1-8b", gpu, 8, 8192, 64, precision="fp8", fp8_recipe=recipe)
    sh_t, sh_b = shard(per_tensor, LAY), shard(blocked, LAY)
    assert (sh_t.linear_bytes, sh_b.linear_bytes) == (1.0, 1.0 + 1.0 / 32)
    # Llama 3.1 8B at tp 2 with SP: the FP8-saved inputs of QKV, fc1 and fc2 are (4096 + 4096 +
    # 14336) / 2 = 11,264 elements a token (the output projection keeps its 16-bit input under
    # both recipes: Megatron-LM d98e8a64 attention.py:428-444); a 32nd of a byte each is 352
    # bytes a token, x 8192 tokens = 2,883,584 bytes a layer
    arch = per_tensor.arch
    delta = activations.layer_bytes(arch, False, sh_b) - activations.layer_bytes(arch, False, sh_t)
    assert delta == pytest.approx(352 * 8192)
