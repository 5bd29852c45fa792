"""What the attention block keeps of its output and of Q, K, V under the FP8 recipes
(planner.model.activations: `_attention_out`, `qkv_bytes`; the Shard fields make_shard sets,
`proj_keeps_original`, `attention_fp8`).

Oracles, hand arithmetic per token from the sources at their commits:
- Megatron-LM d98e8a64 attention.py:428-444 sets save_original_input on the output projection
  under FP8 recipes other than delayed and under NVFP4; Transformer Engine d0067d0d
  module/linear.py:597-598 then saves the 16-bit input itself, the tensor flash attention
  already keeps: the attention output counts once, 2 bytes an element (1 more for the 8-bit copy
  under delayed scaling, and the copy alone under core_attn recompute).
- TE dot_product_attention/backends.py:1582-1587: FP8 attention saves Q, K, V in 8 bits (MXFP8:
  row- and column-wise, each with an E8M0 scale a 32, 2 + 2/32), its output in 16 bits under
  current scaling and MXFP8 and in 8 bits under delayed scaling (the projection then keeps its
  own 8-bit copy).

Llama 3.1 8B: h 4096, 32 heads of d 128 (a d = 4096), 8 query groups: Q, K, V 48 x 128 = 6144
wide. Per token, tp 2 with SP (everything halves): the norm's input 2h, QKV's saved input
(linear bytes) h, the dropout mask h, Q K V, the output, and flash attention's fp32 statistics
4 x 32 = 128 (gone under core_attn recompute).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model.layout_shard import make_shard

S = 8192
H, AD, QKV, STATS = 4096, 4096, 6144, 4 * 32


def _job(recipe: str, gpu: str = "h100-sxm-80gb", **kw: object) -> Job:
    return job("llama3.1-8b", gpu, 8, S, 64, precision="fp8", fp8_recipe=recipe, **kw)


def _attn(j: Job, recompute: str = "none", tp: int = 2, **lay: object) -> float:
    layout = Layout(tp=tp, dp=8 // tp, sequence_parallel=tp > 1, recompute=recompute, **lay)  # type: ignore[arg-type]
    return act.attention_bytes(j.arch, make_shard(j, layout))


def _per_token(linear: float, qkv: float, out: float, stats: float = STATS) -> float:
    """Bytes a token, before the tp 2 split: norm input, QKV's input, mask, Q K V, output."""
    return 2 * H + linear * H + H + qkv * QKV + out + stats


def test_tensorwise_counts_the_attention_output_once() -> None:
    # p03 (QA): tensorwise, no recompute: the projection saves flash attention's own 16-bit
    # output, 2 x 4096 = 8192 a token (it was 8192 + 4096 for an 8-bit copy beside it)
    got = _attn(_job("tensorwise"))
    assert got == pytest.approx(S * _per_token(1.0, 2, 2 * AD) / 2)


def test_delayed_scaling_keeps_the_8_bit_copy_beside_it() -> None:
    # delayed scaling: no save_original_input (attention.py:437), the 8-bit copy stays: 2 + 1
    got = _attn(_job("delayed"))
    assert got == pytest.approx(S * _per_token(1.0, 2, 3 * AD) / 2)


def test_selective_core_attn_under_mxfp8_keeps_the_16_bit_projection_input() -> None:
    # u70 (QA) in small: MXFP8 with core_attn recomputed: the checkpoint keeps bf16 Q, K, V, the
    # projection its 16-bit input (2 bytes, not the MXFP8 copy's 1 + 1/32), no statistics;
    # QKV's input is the MXFP8 copy, 1 + 1/32
    got = _attn(_job("mxfp8", "b200-sxm-180gb"), "selective")
    assert got == pytest.approx(S * _per_token(1 + 1 / 32, 2, 2 * AD, stats=0) / 2)
    # delayed scaling, core_attn recomputed: the 8-bit copy only
    got = _attn(_job("delayed"), "selective")
    assert got == pytest.approx(S * _per_token(1.0, 2, AD, stats=0) / 2)


def test_nvfp4_projection_keeps_its_16_bit_input() -> None:
    # NVFP4 (attention.py:439): the projection's input in 16 bits; QKV's input 0.5 + 1/16
    j = job("llama3.1-8b", "b200-sxm-180gb", 8, S, 64, precision="fp4")
    got = _attn(j, "selective")
    assert got == pytest.approx(S * _per_token(0.5 + 1 / 16, 2, 2 * AD, stats=0) / 2)


@pytest.mark.parametrize(
    ("recipe", "qkv", "out"),
    [
        ("tensorwise", 1.0, 2 * AD),  # 8-bit Q K V; the 16-bit output shared with the projection
        ("delayed", 1.0, AD + AD),  # the kernel's 8-bit output and the projection's 8-bit copy
        ("mxfp8", 2 + 2 / 32, 2 * AD),  # both MXFP8 copies with their scales
    ],
)
def test_fp8_attention_keeps_q_k_v_as_the_kernel_saves_them(
    recipe: str, qkv: float, out: float
) -> None:
    j = _job(recipe, "b200-sxm-180gb", fp8_attention=True)
    linear = 1 + 1 / 32 if recipe == "mxfp8" else 1.0
    assert _attn(j) == pytest.approx(S * _per_token(linear, qkv, out) / 2)


def test_fp8_attention_under_core_attn_recompute_keeps_16_bit_inputs() -> None:
    # the checkpoint keeps the kernel's inputs, bf16 Q K V; the projection its 16-bit input
    j = _job("tensorwise", "b200-sxm-180gb", fp8_attention=True)
    assert _attn(j, "selective") == pytest.approx(S * _per_token(1.0, 2, 2 * AD, stats=0) / 2)


def test_output_gate_under_tensorwise_keeps_the_gated_input_in_16_bits() -> None:
    # the gate keeps the output and the gate (2 + 2), the projection the gated product: 16 bits
    # under tensorwise, an 8-bit copy under delayed: one byte an element apart
    def gated(recipe: str) -> float:
        j = _job(recipe)
        return _attn(replace(j, arch=j.arch.model_copy(update={"attention_output_gate": True})))

    assert gated("tensorwise") - gated("delayed") == pytest.approx(S * AD / 2)


def test_all_to_all_cp_under_delayed_keeps_the_kernel_output_and_the_copy() -> None:
    # cp 2 with the all-to-all exchange, tp 1: 4096 tokens a rank. The kernel keeps its
    # head-sharded 16-bit output (context_parallel.py:4566), the projection the 8-bit copy of the
    # tensor the all-to-all returns, which nothing else keeps: 2 + 1, not 2 + 2 + 1
    j = _job("delayed")
    got = _attn(j, tp=1, cp=2, cp_comm_type="a2a")
    assert got == pytest.approx(S / 2 * _per_token(1.0, 2, 3 * AD))
