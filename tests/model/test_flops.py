"""Tests for planner.model.flops.

Oracles: Korthikanti et al. 2022 eq.(7) (model FLOPs of an MHA GPT with a 4h MLP); Narayanan et al.
2021 (SC21) eq.(3) (hardware FLOPs with full recompute); Megatron-Core r0.8.0
`num_floating_point_operations` (conventions.md item 3) for a GQA SwiGLU model; hand arithmetic
in comments for MoE and recompute.
"""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.model import flops, gemm_shapes


def gpt(L: int, h: int, a: int, V: int = 51200, s: int = 2048) -> ModelArch:
    """An SC21/Korthikanti GPT: MHA, 4h GELU MLP, LayerNorm, biases, learned positions, tied."""
    return ModelArch(
        name="gpt-test",
        num_layers=L,
        hidden_size=h,
        ffn_hidden_size=4 * h,
        num_attention_heads=a,
        vocab_size=V,
        max_position_embeddings=s,
        position_embedding_type="learned_absolute",
    )


LLAMA3_8B = ModelArch(
    name="llama3-8b-test",
    num_layers=32,
    hidden_size=4096,
    ffn_hidden_size=14336,
    num_attention_heads=32,
    num_query_groups=8,
    vocab_size=128256,
    gated_linear_unit=True,
    activation="swiglu",
    normalization="RMSNorm",
    add_bias_linear=False,
    untie_embeddings_and_output_weights=True,
)


def test_causal_attention_not_halved() -> None:
    # conventions.md: Megatron-Core r0.8 / Korthikanti eq.(7) count the full s x s matrix.
    assert flops.CAUSAL_HALVED is False


@pytest.mark.parametrize(
    ("L", "h", "a", "B"),
    [(96, 12288, 96, 1536), (48, 6144, 64, 4), (128, 25600, 160, 512)],
)
def test_korthikanti_eq7_model_flops(L: int, h: int, a: int, B: int) -> None:
    # Korthikanti 2022 eq.(7): 72*B*L*s*h^2*(1 + s/(6h) + V/(12*h*L)), s = 2048, V = 51200.
    s, V = 2048, 51200
    expected = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert flops.model_flops(gpt(L, h, a), s, B) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("L", "h", "a", "B"), [(24, 2304, 24, 512), (105, 20480, 128, 2520)])
def test_sc21_eq3_hardware_flops_with_full_recompute(L: int, h: int, a: int, B: int) -> None:
    # SC21 eq.(3): 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) counts one extra forward of every
    # transformer layer (not of the logits).
    s, V = 2048, 51200
    expected = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    got = flops.hardware_flops(gpt(L, h, a), s, B, "full")
    assert got == pytest.approx(expected, rel=1e-12)


def test_megatron_r08_formula_gqa_swiglu() -> None:
    # conventions.md item 3 (Megatron-Core r0.8.0), by hand for Llama-3-8B at s = 8192, B = 1:
    # 12*B*s*L*h^2*[(1 + g/n + s/h)*(Q/h) + (F/h)*(3/2) + V/(2*L*h)]
    # g/n = 8/32 = 0.25, s/h = 2, Q/h = 1, F/h = 14336/4096 = 3.5, V/(2Lh) = 128256/262144
    B, s, L, h = 1, 8192, 32, 4096
    bracket = (1 + 0.25 + 2.0) * 1.0 + 3.5 * 1.5 + 128256 / (2 * 32 * 4096)
    expected = 12 * B * s * L * h**2 * bracket
    assert flops.model_flops(LLAMA3_8B, s, B) == pytest.approx(expected, rel=1e-12)


def test_recompute_adds_exactly_one_forward() -> None:
    arch, s, B = LLAMA3_8B, 4096, 8
    model = flops.model_flops(arch, s, B)
    tokens = s * B
    # full: one more forward of the decoder layers (3x forward is the model count), by hand per
    # token and layer: 2 x (QKV 4096 x 6144 + proj 4096^2 + MLP 3 x 4096 x 14336) = 436,207,616
    # for the projections and 4 x s x Q = 4 x 4096 x 4096 = 67,108,864 for QK^T and AV:
    # 503,316,480 x 32 layers
    full = flops.hardware_flops(arch, s, B, "full")
    assert full - model == pytest.approx(tokens * 32 * 503_316_480, rel=1e-12)
    # selective: one more forward of QK^T and AV, 4*s*Q per token per layer (Q = 4096)
    sel = flops.hardware_flops(arch, s, B, "core_attn")
    assert sel - model == pytest.approx(tokens * 32 * 4 * s * 4096, rel=1e-12)
    assert flops.hardware_flops(arch, s, B, "none") == model
    # per-op selective (torchtitan "op"): the policy re-runs every second matmul of a block, in
    # the order wq, wk, wv, wo, w1, w3, w2: wk (4096 x 1024), wo (4096^2) and w3 (4096 x 14336),
    # per token per layer 2 x (4,194,304 + 16,777,216 + 58,720,256) = 159,383,552 FLOPs (not half
    # of the 436,207,616 of all seven)
    per_op = flops.hardware_flops(arch, s, B, "per_op")
    assert per_op - model == pytest.approx(tokens * 32 * 159_383_552, rel=1e-12)


def test_moe_counts_topk_shared_and_dense_layers() -> None:
    # 4 layers, the first dense (moe_layer_freq list), h = 1024, 8 experts top-2 of width 512,
    # shared experts of total width 1024, dense ffn 4096, SwiGLU (3 matrices), MHA 8 heads.
    arch = ModelArch(
        name="moe-test",
        num_layers=4,
        hidden_size=1024,
        ffn_hidden_size=4096,
        num_attention_heads=8,
        vocab_size=1000,
        gated_linear_unit=True,
        activation="swiglu",
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=512,
        moe_shared_expert_intermediate_size=1024,
        moe_layer_freq=[0, 1, 1, 1],
    )
    s = 256
    h = 1024
    attn = 2 * (h * (h + 2 * h) + h * h) + 4 * s * h  # MHA: QKV 3h^2 + O h^2, core 4sh
    dense = 2 * 3 * h * 4096
    moe = 2 * 3 * h * (2 * 512 + 1024)
    per_token = 4 * attn + dense + 3 * moe + 2 * h * 1000
    assert flops.forward_per_token(arch, s) == pytest.approx(per_token, rel=1e-12)


def test_mla_projections_and_core() -> None:
    # DeepSeek-style MLA, by hand: h 1024, a 8, q_lora 256, kv_lora 128, d_qk 64, d_r 32, d_v 64.
    arch = ModelArch(
        name="mla-test",
        num_layers=1,
        hidden_size=1024,
        ffn_hidden_size=2048,
        num_attention_heads=8,
        vocab_size=1000,
        multi_latent_attention=True,
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_head_dim=64,
        qk_pos_emb_head_dim=32,
        v_head_dim=64,
    )
    q = 256 * (1024 + 8 * 96)
    kv = 1024 * (128 + 32) + 128 * 8 * (64 + 64)
    out = 8 * 64 * 1024
    assert flops.attention_linear_forward(arch) == 2 * (q + kv + out)
    # core: 2*s*a*(d_qk + d_r) + 2*s*a*d_v at s = 100
    assert flops.attention_core_forward(arch, 100) == 2 * 100 * 8 * 96 + 2 * 100 * 8 * 64


# A small MoE layer for the expert-TP arithmetic: h 64, 8 experts of width 32 (plain GELU MLP,
# fc1 h -> F and fc2 F -> h), top-2, MHA 4 heads, no shared experts.
SMALL_MOE = ModelArch(
    name="small-moe",
    num_layers=1,
    hidden_size=64,
    ffn_hidden_size=128,
    num_attention_heads=4,
    vocab_size=1000,
    num_moe_experts=8,
    moe_router_topk=2,
    moe_ffn_hidden_size=32,
)


def _expert_flops(tp: int, ep: int, etp: int, t: float = 1024.0) -> float:
    """Forward FLOPs of one GPU's routed-expert GEMMs (the shapes after the attention ones)."""
    n_attn = len(gemm_shapes.attention_gemms(SMALL_MOE, t, tp))
    shapes = gemm_shapes.linear_gemms(SMALL_MOE, t, tp, ep, etp, moe=True)[n_attn:]
    return sum(2 * m * k * n * c for m, k, n, c in shapes)


@pytest.mark.parametrize(
    ("tp", "ep", "etp", "expected"),
    [
        # t = 1,024 tokens per micro-batch, top-2, 8 experts, one expert's two GEMMs cost
        # 2 x (64 x 32 + 32 x 64) = 8,192 FLOPs per token at full width.
        # tp 1, ep 1, etp 1: every token's 2 copies on this GPU: 1,024 x 2 x 8,192
        (1, 1, 1, 1024 * 2 * 8192),
        # tp 4, etp 4 (Megatron's default etp = tp): each rank holds 256 tokens (SP); the 4
        # expert-TP ranks gather all 1,024 and each runs a quarter of every expert's width:
        # 1,024 x 2 x 8,192 / 4
        (4, 1, 4, 1024 * 2 * 8192 / 4),
        # tp 4, etp 1 (parallel folding): each rank routes only its own 256 tokens, at full
        # width: 256 x 2 x 8,192 -- the same per-GPU FLOPs as etp 4, not 4 x more
        (4, 1, 1, 256 * 2 * 8192),
        # tp 4, ep 4, etp 1: the 4 EP ranks exchange tokens; each holds 2 of the 8 experts and
        # receives, on average, 4 ranks x 256 tokens x 2 copies x 2/8 = 512 token-expert pairs:
        # 512 x 8,192
        (4, 4, 1, 512 * 8192),
        # tp 2, ep 2, etp 2: 512 tokens per rank, gathered over 2 expert-TP ranks (1,024), sent
        # over 2 EP ranks holding 4 experts each: 2 x 1,024 x 2 x 4/8 = 2,048 pairs at half width
        (2, 2, 2, 2048 * 8192 / 2),
    ],
)
def test_expert_flops_per_gpu_follow_the_tokens_each_rank_holds(
    tp: int, ep: int, etp: int, expected: float
) -> None:
    assert _expert_flops(tp, ep, etp) == pytest.approx(expected, rel=1e-12)


def test_every_gpu_together_runs_every_token_through_top_k_experts_once() -> None:
    # Summed over the whole expert grid (tp x ep ranks, dp = 1 here, etp <= tp) the experts'
    # forward FLOPs are the model's: t x top_k x one expert's 8,192, whatever the layout.
    t = 1024.0
    for tp, ep, etp in [(4, 1, 1), (4, 1, 2), (4, 1, 4), (4, 4, 1), (4, 2, 2), (8, 8, 1)]:
        assert tp * _expert_flops(tp, ep, etp, t) == pytest.approx(t * 2 * 8192, rel=1e-12)


def test_latent_moe_experts_run_at_the_latent_width() -> None:
    # SMALL_MOE (h 64, 8 experts of width 32, top-2, GELU) with a latent width L = 16: each
    # routed copy's two GEMMs cost 2 x (16 x 32 + 32 x 16) = 2,048 FLOPs (8,192 at h), and each
    # token adds the down- and up-projections 2 x (64 x 16 + 16 x 64) = 4,096 (moe_layer.py
    # fc1_latent_proj / fc2_latent_proj). Megatron-LM's own count (training.py
    # num_floating_point_operations, moe_layer_flops) is the same per token: 4 L F_e k + 4 h L
    # = 4 x 16 x 32 x 2 + 4 x 64 x 16 = 4,096 + 4,096
    arch = SMALL_MOE.model_copy(update={"moe_latent_size": 16})
    assert flops.moe_mlp_forward(arch) == 2 * 2048 + 4096
    assert flops.moe_mlp_forward(SMALL_MOE) == 2 * 8192
    # per GPU, tp 4 ep 4 etp 1, t = 1,024: 512 routed pairs (the case above) at 2,048 each, and
    # the projections on the rank's 256 sequence-parallel tokens, whole on every TP rank
    t = 1024.0
    n_attn = len(gemm_shapes.attention_gemms(arch, t, 4))
    shapes = gemm_shapes.linear_gemms(arch, t, 4, 4, 1, moe=True)[n_attn:]
    parts = gemm_shapes.linear_gemm_parts(arch, True)[n_attn:]
    assert parts == ("expert", "expert", "latent", "latent")
    assert shapes[2:] == [(256.0, 64, 16, 1), (256.0, 16, 64, 1)]
    total = sum(2 * m * k * n * c for m, k, n, c in shapes)
    assert total == pytest.approx(512 * 2048 + 256 * 4096, rel=1e-12)


def test_per_op_split_counts_each_block_from_its_first_matmul() -> None:
    # torchtitan's per-op policy keeps the 1st, 3rd, ... matmul of a block. GPT-3 (MHA, no gated
    # unit, h = 12288), one token at tp 1: wq, wk, wv, wo, fc1, fc2 -> kept wq, wv, fc1 outputs
    # h + h + 4h = 6h elements (half of all nine h-wide outputs would be 4.5h); re-run wk, wo,
    # fc2: 2 (h^2 + h^2 + 4h^2) = 12 h^2 FLOPs of all 2 (4h^2 + 8h^2) = 24 h^2 (half, for MHA)
    h = 12288
    gpt = catalog.get_model("gpt3-175b")
    saved, rerun, whole = gemm_shapes.per_op_split(
        gpt, gemm_shapes.linear_gemms(gpt, 1.0, 1, 1, 1, False), 1, False
    )
    assert (saved, rerun, whole) == pytest.approx((6 * h, 12 * h * h, 24 * h * h), rel=1e-12)
    # Mixtral 8x7B (GQA 32 / 8 heads of 128, top-2 of 8 experts of 14336): the attention's wq
    # (4096) and wv (1024) kept; the experts' grouped GEMMs keep nothing (aten._grouped_mm is
    # not on the save list, e347b1e5 models/qwen3/infra/parallelize.py:39-53): 5,120 per token
    mix = catalog.get_model("mixtral-8x7b")
    saved, _, _ = gemm_shapes.per_op_split(
        mix, gemm_shapes.linear_gemms(mix, 1.0, 1, 1, 1, True), 1, True
    )
    assert saved == pytest.approx(4096 + 1024, rel=1e-12)


def test_sliding_window_layers_count_their_window() -> None:
    # gpt-oss-20b: 64 heads x 64 = 4,096 wide, window_size 127 (itself and 127 before: 128 keys).
    # Hand arithmetic: a full layer's QK^T and AV are 2 x s x (4,096 + 4,096) FLOPs a token, a
    # windowed one's 2 x 128 x 8,192; at s = 131,072 they differ by 2 x (131,072 - 128) x 8,192.
    # Counting the whole sequence put gpt-oss above 100% MFU at 131k tokens.
    from planner.inputs.hybrid import MOE, MOE_WINDOW

    arch = catalog.get_model("gpt-oss-20b")
    s = 131072
    full = flops.layer_forward(arch, s, MOE)
    windowed = flops.layer_forward(arch, s, MOE_WINDOW)
    assert full - windowed == pytest.approx(2 * (s - 128) * 8192)
    # a sequence shorter than the window attends to all of it
    assert flops.layer_forward(arch, 64, MOE_WINDOW) == flops.layer_forward(arch, 64, MOE)


def test_recomputed_core_attention_counts_each_layers_window() -> None:
    # gpt-oss-20b at s = 131,072: 12 full-attention layers attend the whole sequence, 12
    # windowed ones 128 keys; core attention re-run under selective recompute is, per token,
    # 12 x core(s) + 12 x core(128), not 24 x core(s) (QA: HFU overstated by 20.6%)
    arch = catalog.get_model("gpt-oss-20b")
    s = 131_072
    kinds = [k for k in arch.layer_kinds if k.mixer == "attention"]
    n_win = sum(k.window for k in kinds)
    assert (len(kinds), n_win) == (24, 12)
    want = 12 * flops.attention_core_forward(arch, s) + 12 * flops.attention_core_forward(arch, 128)
    assert flops.recompute_flops_per_token(arch, s, "core_attn") == pytest.approx(want)
