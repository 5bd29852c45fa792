"""Gated attention (Megatron --attention-output-gate, `ModelArch.attention_output_gate`).

Oracles: Megatron-LM d98e8a64 megatron/core/transformer/attention.py (linear_qkv's output grows by
num_attention_heads x kv_channels, split off as `gate`, reshaped into a contiguous copy, and
`_apply_output_gate`'s x * sigmoid(gate) feeds linear_proj), training.py
`num_floating_point_operations` (gate_projection_size in the QKV term), and hand arithmetic in the
comments (Qwen3-30B-A3B's attention: hidden 2,048, 32 heads of 128, 4 KV groups)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.emit import megatron
from planner.inputs import catalog, megatron_args
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import activations, flops, gemm_shapes, params
from planner.model.stage_activations import shard

BASE = catalog.get_model("qwen3-30b-a3b")
GATED = BASE.model_copy(update={"attention_output_gate": True})
QD = 32 * 128  # the query width, a x d = 4,096


def test_the_gate_is_a_query_sized_slice_of_the_qkv_projection() -> None:
    # 2,048 x 4,096 = 8,388,608 more weights a layer, and 2 x that many forward FLOPs a token
    assert params.attention_params(GATED) - params.attention_params(BASE) == 2048 * QD
    extra = flops.attention_linear_forward(GATED) - flops.attention_linear_forward(BASE)
    assert extra == 2 * 2048 * QD
    # tp 4: linear_qkv's N is (4,096 + 4,096) / 4 + 2 x 1 x 128 (one KV group a rank), not
    # 4,096 / 4 + 256
    (_, _, n, _), _ = gemm_shapes.attention_gemms(GATED, 1.0, 4)
    assert n == 2 * QD / 4 + 2 * 128


@pytest.mark.parametrize(("precision", "extra_copies"), [("bf16", 2.0), ("fp8", 1.0)])
def test_the_gate_and_the_projections_own_input_are_kept(
    precision: str, extra_copies: float
) -> None:
    # bf16 with flash attention: the output (kept by the kernel and the gating), the gate, and
    # linear_proj's gated input, 3 copies of T x 4,096 / tp in 16 bits where 1 was kept; FP8: the
    # projection kept a 1-byte copy before too, so the gate's 2 bytes are what is new (2 + 2 + 1
    # against 2 + 1)
    lay = Layout(tp=2, pp=1, dp=4, sequence_parallel=True)
    base = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 64, precision=precision)
    gated = replace(base, arch=GATED)
    sh, sh_g = shard(base, lay), shard(gated, lay)
    diff = activations.attention_bytes(GATED, sh_g) - activations.attention_bytes(BASE, sh)
    assert diff == pytest.approx(extra_copies * 2 * 4096 * QD / 2)


LINE = (
    "--num-layers 4 --hidden-size 2048 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 4 --kv-channels 128 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --bf16 --vocab-size 151936 "
)


def test_the_flag_is_read_and_launched() -> None:
    plan = parse_plan(megatron_args.to_plan(LINE + "--attention-output-gate", "h100-sxm-80gb", 8))
    assert plan.job.arch.attention_output_gate
    flags = megatron.arguments(plan).flat()
    assert "--attention-output-gate" in flags
    again = parse_plan(megatron_args.to_plan(" ".join(flags), "h100-sxm-80gb", 8))
    assert again.job.arch.attention_output_gate
    plain = parse_plan(megatron_args.to_plan(LINE, "h100-sxm-80gb", 8))
    assert "--attention-output-gate" not in megatron.arguments(plain).flat()


def test_with_multi_latent_attention_it_is_refused_as_megatron_does() -> None:
    # MLATransformerConfig.__post_init__: "Output gate is not supported for MLA yet."
    line = LINE + "--attention-output-gate --multi-latent-attention --kv-lora-rank 512 "
    line += "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128"
    with pytest.raises(InputError, match="attention_output_gate"):
        parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8))
