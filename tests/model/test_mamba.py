"""A hybrid stack's Mamba-2 layer on a tiny config, by hand: parameters, FLOPs, activation bytes,
the SSD scan's time, and how the other layer kinds (attention, MLP, MoE alone) compose.

Oracle: hand arithmetic from Megatron-LM d98e8a64 megatron/core/ssm/mamba_mixer.py (the module
shapes) and mamba_ssm's MambaSplitConv1dScanCombinedFn (what the training path saves), written
out in the comments independently of planner.model.mamba.

Tiny config: h 64, head dim P 16, heads H = 2h / P = 8 (expand 2), d = H P = 128, groups g 2,
state n 8, RMSNorm (one weight per channel):
    in_proj width 2d + 2gn + H = 256 + 32 + 8 = 296
"""

from __future__ import annotations

import pytest

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import ATTENTION, MAMBA, MLP, MOE_MLP
from planner.model import activations as act
from planner.model import flops, gemm_shapes, mamba, params
from planner.model.gemm import Gpu
from planner.model.shard import Shard

TINY = ModelArch(
    name="tiny-hybrid",
    num_layers=4,
    hidden_size=64,
    ffn_hidden_size=256,
    num_attention_heads=4,
    vocab_size=1000,
    normalization="RMSNorm",
    add_bias_linear=False,
    position_embedding_type="none",
    hybrid_layer_pattern="M*-E",
    num_moe_experts=4,
    moe_router_topk=2,
    mamba_head_dim=16,
    mamba_num_groups=2,
    mamba_state_dim=8,
)


def test_mamba_mixer_shape() -> None:
    assert (TINY.mamba_heads, TINY.mamba_inner) == (8, 128)
    assert mamba.in_proj_width(TINY) == 296


def test_mamba_layer_parameters_by_hand() -> None:
    # in_proj 64 x 296 = 18944; conv1d (d + 2gn) x (4 + 1) = 160 x 5 = 800 (weight + bias);
    # dt_bias, A_log, D 3 x 8 = 24; gated norm d = 128; out_proj 128 x 64 = 8192
    assert mamba.mixer_params(TINY) == 18944 + 800 + 24 + 128 + 8192
    # the layer adds its norm (fused into in_proj): h = 64
    assert params.kind_params(TINY, MAMBA) == (28088 + 64, 0)


def test_single_block_layers_are_their_block_and_one_norm() -> None:
    h = 64
    # attention: QKV 64 x (64 + 2 x 64) + output 64 x 64 (MHA, head dim 16, no biases)
    assert params.kind_params(TINY, ATTENTION) == (64 * 192 + 64 * 64 + h, 0)
    # MLP: fc1 64 x 256 + fc2 256 x 64 (GELU, no GLU)
    assert params.kind_params(TINY, MLP) == (2 * 64 * 256 + h, 0)
    # MoE: router 64 x 4, four experts of 2 x 64 x 256 each
    assert params.kind_params(TINY, MOE_MLP) == (64 * 4 + h, 4 * 2 * 64 * 256)
    kinds = [MAMBA, ATTENTION, MLP, MOE_MLP]
    layers = sum(sum(params.kind_params(TINY, k)) for k in kinds)
    # embedding 1000 x 64, tied output, final norm 64
    assert params.params_total(TINY) == layers + 1000 * 64 + 64


def test_mamba_forward_flops_by_hand() -> None:
    # Megatron's count: in_proj 2 x 64 x 296, scan 7 x d x n = 7 x 128 x 8, out_proj 2 x 128 x 64
    assert mamba.mixer_forward(TINY) == 2 * 64 * 296 + 7 * 128 * 8 + 2 * 128 * 64
    assert flops.layer_forward(TINY, 32, MAMBA) == 37888 + 7168 + 16384


def test_mamba_activation_bytes_by_hand() -> None:
    T = 512
    sh = Shard(tokens=T, seq_per_cp_rank=T)
    # replicated: norm input 2h, in_proj's input 2h, dropout mask h = 5 x 64 = 320 per token;
    # split by tp: zxBCdt 2 x 296 = 592, out_x 2d = 256, gated norm input 2d = 256 and rstd
    # 4g = 8, out_proj's input 2d = 256: 1368 per token
    assert act.linear_mixer_bytes(TINY, sh, mamba) == pytest.approx(T * (320 + 1368))
    assert act.layer_bytes(TINY, MAMBA, sh) == pytest.approx(T * 1688)
    # TP 2 with sequence parallelism splits all of it
    sp = Shard(tokens=T, tp=2, sequence_parallel=True, seq_per_cp_rank=T)
    assert act.layer_bytes(TINY, MAMBA, sp) == pytest.approx(T * 1688 / 2)
    # FP8: in_proj's and out_proj's saved inputs in 8 bits (64 and 128 bytes less per token)
    fp8 = Shard(tokens=T, linear_bytes=1.0, seq_per_cp_rank=T)
    assert act.layer_bytes(TINY, MAMBA, fp8) == pytest.approx(T * (1688 - 64 - 128))
    # full recompute keeps the layer input, 2h
    full = Shard(tokens=T, recompute="full", seq_per_cp_rank=T)
    assert act.layer_bytes(TINY, MAMBA, full) == pytest.approx(T * 128)


def test_single_block_activations_are_their_blocks() -> None:
    sh = Shard(tokens=256, seq_per_cp_rank=256)
    assert act.layer_bytes(TINY, ATTENTION, sh) == act.attention_bytes(TINY, sh)
    assert act.layer_bytes(TINY, MLP, sh) == act.mlp_bytes(TINY, 256, sh)
    assert act.layer_bytes(TINY, MOE_MLP, sh) == act.moe_bytes(TINY, sh)


def test_mamba_backward_working_set_by_hand() -> None:
    # state-spaces/mamba 0048fbf2 (Megatron-LM d98e8a64 pyproject.toml:250), mamba_ssm/ops/
    # triton/ssd_combined.py MambaSplitConv1dScanCombinedFn.backward: recomputed xBC (:919-923)
    # 2 x (d + 2gn) = 320; dzxbcdt = torch.empty_like(zxbcdt) (:928) 2 x 296 = 592; dxBC =
    # torch.empty_like(xBC) (:930) 2 x 160 = 320. Alive at its peak, inside _state_passing_bwd
    # (:461-471): dt.clone() (:440) 2H = 16; the fp32 dA_cumsum and dt (:441,
    # ssd_chunk_state.py:724-725) 8H = 64; C B^T in fp32 (:443) 4 Q g = 1024; dout_x (:450,
    # ssd_chunk_scan.py:1386 torch.empty_like(dout)) 2d = 256; per state element (d n / Q =
    # 128 x 8 / 128 = 8 a token) the fp32 states (:444-447) 4, the fp32 dstates (:455) 4, and
    # bf16 dstates and states_converted (ssd_state_passing.py:241, :243) 2 + 2: 12 x 8 = 96.
    # 320 + 592 + 320 + 16 + 64 + 1024 + 256 + 96 = 2688 per token
    assert mamba.backward_working(TINY, 100, 1) == pytest.approx(100 * 2688)
    assert mamba.backward_working(TINY, 100, 2) == pytest.approx(100 * 1344)


def test_nemotron_h_backward_working_set_by_hand() -> None:
    # Nemotron-H 56B (d 16384, H 256, g 8, n 256), tp 1, per token, the same lines as above:
    # xBC 2 x (16384 + 4096) = 40960, dzxbcdt 2 x 37120 = 74240, dxBC 40960, dout_x 2d = 32768,
    # dt's clone 2H = 512, fp32 dA_cumsum and dt 8H = 2048, C B^T 4 x 128 x 8 = 4096, states
    # 12 x 16384 x 256 / 128 = 393216: 588800 (before: 10 bytes a state element, no dout_x,
    # dt's clone or fp32 dt: 487936)
    from planner.inputs import catalog

    arch = catalog.get_model("nemotronh-56b")
    assert mamba.backward_working(arch, 1, 1) == pytest.approx(588800)


def test_ssd_scan_time_by_hand() -> None:
    gpu = Gpu(peak_bf16=1e12, peak_linear=1e12, hbm=1e9, ridge=1000, e_bf16=0.5, e_linear=0.5)
    # forward FLOPs per token 2Qgn + 2Qd + 4nd = 4096 + 32768 + 4096 = 40960; 1000 tokens at
    # 0.5 x 1e12: 81.92 us; chunk states d n / Q = 8 per token, 8000 elements x 12 bytes at 1e9
    # bytes/s: 96 us
    fwd, bwd = mamba.scan_time(TINY, gpu, 1000, 1)
    assert fwd == pytest.approx(81.92e-6 + 96e-6)
    # backward FLOPs 10nd + 6Qd + 6Qgn = 10240 + 98304 + 12288 = 120832: 241.664 us; states
    # 8000 x 34 bytes: 272 us
    assert bwd == pytest.approx(241.664e-6 + 272e-6)


def test_gemm_blocks_follow_the_kind() -> None:
    # a Mamba layer's GEMMs are in_proj (column-parallel) then out_proj (row-parallel)
    gemms = gemm_shapes.linear_gemms(TINY, 10.0, 2, 1, 1, MAMBA)
    assert gemms == [(10.0, 64, 296 / 2, 1), (10.0, 128 / 2, 64, 1)]
    assert gemm_shapes.gemm_blocks(TINY, MAMBA) == (("mamba", range(2)),)
    assert gemm_shapes.gemm_blocks(TINY, MLP) == (("dense", range(2)),)
    assert [b for b, _ in gemm_shapes.gemm_blocks(TINY, True)] == ["attention", "moe"]


def test_nemotron3_nano_parameter_counts() -> None:
    # NVIDIA's model card of Nemotron 3 Nano 30B-A3B (as quoted in the Megatron-Bridge docs,
    # models/llm/nemotron3): "3.5B active parameters and 30B parameters in total" (rounded; the
    # name says 30B). Counted here: the Megatron-LM configuration of the zoo entry.
    from planner.inputs import catalog

    arch = catalog.get_model("nemotron3-nano-30b-a3b")
    assert params.params_total(arch) == pytest.approx(31.6e9, rel=0.02)
    assert params.params_active(arch) == pytest.approx(3.5e9, rel=0.05)
