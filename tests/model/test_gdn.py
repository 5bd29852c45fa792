"""A transformer's gated delta net (linear-attention) layers on a tiny config, by hand: which
layers they are, parameters, FLOPs, activation bytes, the chunked kernels' time; Qwen3-Next's
totals. (NVIDIA's ten Qwen3-Next benchmark layouts are judged to fit in
tests/bench/test_recipes.py, rows X1-X10.)

Oracle: hand arithmetic from Megatron-LM d98e8a64 megatron/core/ssm/gated_delta_net/ (gdn.py,
common.py: the module shapes; training.py `gdn_layer_flops`), experimental_attention_variant_
module_specs.py `get_linear_attention_pattern` (which layers) and FLA bc3b101d's chunked kernels
(what they save), written out in the comments independently of planner.model.gdn.

Tiny config: h 64, 4 attention heads of 16 (2 KV groups), RMSNorm, no biases, a dense 256-wide
MLP; the gated delta net with n_k 2 key heads of d_k 16 and n_v 4 value heads of d_v 32, conv
width 4: qk = 32, vd = 128,
    in_proj width 2qk + 2vd + 2n_v = 64 + 256 + 8 = 328, conv channels 2qk + vd = 192
"""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import DENSE, DENSE_GDN, GDN
from planner.model import activations as act
from planner.model import flops, gdn, gemm_shapes, params
from planner.model.gemm import Gpu
from planner.model.shard import Shard

TINY = ModelArch(
    name="tiny-gdn",
    num_layers=4,
    hidden_size=64,
    ffn_hidden_size=256,
    num_attention_heads=4,
    num_query_groups=2,
    vocab_size=1000,
    normalization="RMSNorm",
    add_bias_linear=False,
    linear_attention_freq=2,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=32,
)


def test_which_layers_are_gated_delta_nets() -> None:
    # Megatron's int N: layer k (from 1) keeps softmax attention iff k % N == 0
    assert TINY.layer_kinds == (DENSE_GDN, DENSE, DENSE_GDN, DENSE)
    listed = TINY.model_copy(update={"linear_attention_freq": (1, 1, 0, 0)})
    assert listed.layer_kinds == (DENSE_GDN, DENSE_GDN, DENSE, DENSE)
    # the MTP layer is built from the last layer's spec
    mtp = TINY.model_copy(update={"mtp_num_layers": 1})
    assert mtp.mtp_kinds == (DENSE,)
    last_gdn = TINY.model_copy(update={"linear_attention_freq": (0, 0, 0, 1), "mtp_num_layers": 1})
    assert last_gdn.mtp_kinds == (DENSE_GDN,)


def test_gdn_parameters_by_hand() -> None:
    # in_proj 64 x 328 = 20992; conv1d 192 x 4 = 768 (no bias); dt_bias, A_log 2 x 4 = 8;
    # out_norm over one value head 32; out_proj 128 x 64 = 8192
    assert gdn.mixer_params(TINY) == 20992 + 768 + 8 + 32 + 8192
    # the layer: the mixer, two norms (2 x 64) and the MLP 2 x 64 x 256
    assert params.kind_params(TINY, DENSE_GDN) == (29992 + 128 + 32768, 0)


def test_gdn_forward_flops_by_hand() -> None:
    # Megatron's count: 2 x [h x 328 + w x 192 + 4 n_v d_v^2 + vd x h]
    #                 = 2 x [20992 + 768 + 16384 + 8192] = 92672
    assert gdn.mixer_forward(TINY) == 92672
    # the layer adds the MLP's 2 x 2 x 64 x 256 = 65536; no sequence-length term
    assert flops.layer_forward(TINY, 4096, DENSE_GDN) == 92672 + 65536
    assert flops.layer_forward(TINY, 32, DENSE_GDN) == 92672 + 65536


def test_gdn_gemms_by_hand() -> None:
    # in_proj (column-parallel) then out_proj (row-parallel), at tp 2
    gemms = gemm_shapes.linear_gemms(TINY, 10.0, 2, 1, 1, DENSE_GDN)
    assert gemms[:2] == [(10.0, 64, 328 / 2, 1), (10.0, 128 / 2, 64, 1)]
    assert [b for b, _ in gemm_shapes.gemm_blocks(TINY, DENSE_GDN)] == ["gdn", "dense"]


def test_gdn_activation_bytes_by_hand() -> None:
    T = 512
    sh = Shard(tokens=T, seq_per_cp_rank=T)
    # split by tp, per token: qkvzba 2 x 328 = 656; the L2 norm's output 4 qk = 128 and rstd
    # 8 n_k = 16; the kernel's q and k 4 n_v d_k = 256, v 2 vd = 256, g 4 n_v = 16, beta 2 n_v
    # = 8, A 2 x 64 x n_v = 512; its output 2 vd = 256, the norm's rstd 4 n_v = 16, the norm's
    # output 256, the gate's copy 256; out_proj's input 256: 2888, of which out_proj's input 256.
    # The convolution's input adds nothing: Megatron-LM d98e8a64 gdn.py:187/:191/:295 hand FLA's
    # causal_conv1d (:232-240) a strided view of qkvzba, and FLA bc3b101d skips the contiguous
    # copy for x (fla/modules/conv/causal_conv1d.py:16, conv/triton/ops.py:369
    # `no_guard_contiguous=["x"]`) and saves x itself (ops.py:392; v0.5.1 :366, :389): the
    # view's storage is the qkvzba counted above (a 2 x 192 = 384 copy was counted before)
    assert gdn.saved_widths(TINY) == (2888.0, 256.0)
    # replicated as every block's: norm input 2h, in_proj's input 2h, dropout mask h = 320
    block = act.layer_bytes(TINY, GDN, sh)
    assert block == pytest.approx(T * (320 + 2888))
    mlp = act.mlp_bytes(TINY, 256, sh)
    assert act.layer_bytes(TINY, DENSE_GDN, sh) == pytest.approx(block + mlp)
    # TP 2 with sequence parallelism splits all of it
    sp = Shard(tokens=T, tp=2, sequence_parallel=True, seq_per_cp_rank=T)
    assert act.layer_bytes(TINY, GDN, sp) == pytest.approx(T * 3208 / 2)
    # --recompute-modules gdn_norm_out drops the norm's output 2 vd = 256, its rstd 4 n_v = 16
    # and out_proj's input 256: 528 per token; the other modules leave the mixer alone
    norm_out = Shard(tokens=T, recompute="core_attn", modules=frozenset({"gdn_norm_out"}))
    assert act.layer_bytes(TINY, GDN, norm_out) == pytest.approx(T * (3208 - 528))
    others = Shard(tokens=T, recompute="core_attn", modules=frozenset({"layernorm", "mlp"}))
    assert act.layer_bytes(TINY, GDN, others) == pytest.approx(T * 3208)


def test_qwen3_next_gdn_saved_bytes_by_hand() -> None:
    # Qwen3-Next (h 2048, n_k 16, n_v 32, d_k = d_v = 128: qk 2048, vd 4096), tp 1, per token:
    # in_proj's output qkvzba 2 (2 x 2048 + 2 x 4096 + 2 x 32) = 24704 (the conv's input a view
    # of it: no copy, as above); the L2 norm's output 4 qk = 8192 and rstd 8 n_k = 128; the
    # kernel's q and k 4 n_v d_k = 16384, v 2 vd = 8192, g 4 n_v = 128, beta 2 n_v = 64, A
    # 2 x 64 x 32 = 4096; its output 8192, the norm's rstd 128, the norm's output 8192, the
    # gate's copy 8192; out_proj's input 8192: 94784
    arch = catalog.get_model("qwen3-next-80b-a3b")
    assert gdn.saved_widths(arch) == (94784.0, 8192.0)
    # with the block's norm input 2h, in_proj's input 2h and dropout mask h (5 x 2048 = 10240):
    # 105024 a token (121408 with a 2 x 8192 = 16384 copy of the conv's input)
    T = 512
    sh = Shard(tokens=T, seq_per_cp_rank=T)
    assert act.linear_mixer_bytes(arch, sh, gdn) == pytest.approx(T * 105024)


def test_gdn_backward_working_set_by_hand() -> None:
    # At its peak, FLA bc3b101d fla/ops/gated_delta_rule/chunk.py:233 (prepare_wy_repr_bwd),
    # the locals of chunk_gated_delta_rule_bwd are alive: w (:147) 2 n_v d_k = 128, u 2 vd =
    # 256, the states h and their gradients dh (:160, :202) 2 x 2 x n_v d_k d_v / 64 = 128,
    # v_new and the dv dh updates (:160, :202) 2 x 256, dq, dk, dw (:217) 3 x 128 = 384 and dg
    # (fp32, chunk_o.py:741) 4 n_v = 16; prepare_wy_repr_bwd adds (wy_fast.py:318-321) dk2
    # 2 n_v d_k = 128, a new dv 256, dg2 (fp32, like g) 16 and db 2 n_v = 8:
    # 128 + 256 + 128 + 512 + 384 + 16 + 128 + 256 + 16 + 8 = 1832 per token
    assert gdn.backward_working(TINY, 100, 1) == pytest.approx(100 * 1832)
    assert gdn.backward_working(TINY, 100, 2) == pytest.approx(100 * 916)


def test_gdn_scan_time_by_hand() -> None:
    gpu = Gpu(peak_bf16=1e12, peak_linear=1e12, hbm=1e9, ridge=1000, e_bf16=0.5, e_linear=0.5)
    # forward FLOPs per token and value head 6 d_k d_v + 6 C d_k + 4 C d_v = 3072 + 6144 + 8192
    # = 17408, x 4 heads = 69632; 1000 tokens at 0.5 x 1e12: 139.264 us. Bytes: states n_v d_k
    # d_v / 64 = 32 per token x 4 = 128,000; per token-head 12 (d_k + d_v) + 2 x 64 = 704,
    # x 4000 = 2,816,000; at 1e9 bytes/s: 2944 us
    fwd, bwd = gdn.scan_time(TINY, gpu, 1000, 1)
    assert fwd == pytest.approx(139.264e-6 + 2944e-6)
    # backward 14 d_k d_v + 14 C d_k + 8 C d_v = 7168 + 14336 + 16384 = 37888, x 4 = 151552:
    # 303.104 us; states 32,000 x 8 = 256,000; per token-head 32 x 48 + 4 x 64 = 1792, x 4000
    # = 7,168,000: 7424 us; all of it at the backward's roofline fraction (FLA's GB200 kernels)
    assert bwd == pytest.approx((303.104e-6 + 7424e-6) / gdn.BWD_ROOFLINE_FRACTION)


def test_gdn_context_parallel_bytes_by_hand() -> None:
    # qkvzba (328) there and the norm's output (128) back, 2 bytes, each way: 912 per token
    assert gdn.context_parallel_bytes(TINY, 10, 1) == (9120.0, 9120.0)


def test_arch_checks() -> None:
    with pytest.raises(ValueError, match="linear_num_value_heads"):
        ModelArch.model_validate({**TINY.model_dump(), "linear_num_value_heads": 3})
    with pytest.raises(ValueError, match="entries but num_layers"):
        ModelArch.model_validate({**TINY.model_dump(), "linear_attention_freq": (1, 0)})
    with pytest.raises(ValueError, match="window_size"):
        ModelArch.model_validate({**TINY.model_dump(), "window_size": 128})
    # a hybrid stack's G layers are held to the same head rule (and, without M layers, not to
    # the Mamba mixer's)
    hybrid = {**TINY.model_dump(), "linear_attention_freq": None, "hybrid_layer_pattern": "G*G-"}
    assert ModelArch.model_validate(hybrid).layer_kinds[0] == GDN
    with pytest.raises(ValueError, match="must be a multiple of linear_num_key_heads"):
        ModelArch.model_validate({**hybrid, "linear_num_key_heads": 3})


def test_qwen3_next_totals() -> None:
    # HF card Qwen/Qwen3-Next-80B-A3B-Instruct: 80B in total, 79B without the embeddings (the
    # word embedding and the untied output layer, 2 x 151936 x 2048); the shared expert's gate
    # (h per layer) is not counted
    arch = catalog.get_model("qwen3-next-80b-a3b")
    total = params.params_total(arch)
    assert total == pytest.approx(80e9, rel=0.01)
    assert total - 2 * 151936 * 2048 == pytest.approx(79e9, rel=0.01)
    assert [k.name for k in arch.layer_kinds[:4]] == ["moe-gdn"] * 3 + ["moe"]


def test_qwen3_5_totals() -> None:
    # HF card Qwen/Qwen3.5-397B-A17B: 397B in total (with its vision encoder, which the zoo's
    # language model leaves out), 17B active; the language model is 396.3B here, 17.3B active
    arch = catalog.get_model("qwen3.5-397b-a17b")
    assert params.params_total(arch) == pytest.approx(397e9, rel=0.01)
    assert params.params_active(arch) == pytest.approx(17e9, rel=0.03)
    assert [k.name for k in arch.layer_kinds].count("moe-gdn") == 45
