"""Activation bytes per layer against Korthikanti et al. 2022 (arXiv:2205.05198), Table 2.

Oracle: the paper's closed forms, for a GPT layer (MHA, 4h GELU MLP, LayerNorm, dropout) with
16-bit activations, written out here independently of planner.model.activations:

    no parallelism          sbh(34 + 5as/h)
    TP                      sbh(10 + 24/t + 5as/(ht))
    TP + SP                 sbh/t (34 + 5as/h)
    TP + selective          sbh(10 + 24/t)
    TP + SP + selective     34 sbh / t
    full recompute          2sbh
"""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.model import activations as act
from planner.model.loss_activations import GATHERED_LOSS_BYTES_PER_LOGIT, logits_bytes
from planner.model.shard import Shard

# GPT-3 175B's layer shape (Korthikanti Table 3 uses it): h 12288, a 96, s 2048.
GPT = ModelArch(
    name="gpt-layer",
    num_layers=96,
    hidden_size=12288,
    ffn_hidden_size=4 * 12288,
    num_attention_heads=96,
    vocab_size=51200,
    activation="gelu",
)
S, B, H, A = 2048, 1, 12288, 96

# Llama-3.1-8B's layer shape: h 4096, F 14336, 32 heads, 8 query groups, SwiGLU (the zoo entry)
LLAMA8 = catalog.get_model("llama3.1-8b")


def layer(t: int, sp: bool, recompute: str, flash: bool = False) -> float:
    sh = Shard(
        tokens=S * B,
        tp=t,
        sequence_parallel=sp,
        recompute=recompute,  # type: ignore[arg-type]
        flash_attention=flash,
        seq_per_cp_rank=S,
        micro_batch_size=B,
    )
    return act.layer_bytes(GPT, False, sh)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_table2_tensor_parallel(t: int) -> None:
    sbh = S * B * H
    assert layer(t, False, "none") == pytest.approx(sbh * (10 + 24 / t + 5 * A * S / (H * t)))


@pytest.mark.parametrize("t", [2, 4, 8])
def test_table2_sequence_parallel(t: int) -> None:
    sbh = S * B * H
    assert layer(t, True, "none") == pytest.approx(sbh / t * (34 + 5 * A * S / H))


def test_table2_no_parallelism() -> None:
    sbh = S * B * H
    assert layer(1, False, "none") == pytest.approx(sbh * (34 + 5 * A * S / H))


@pytest.mark.parametrize("t", [1, 2, 8])
def test_table2_selective(t: int) -> None:
    sbh = S * B * H
    assert layer(t, False, "core_attn") == pytest.approx(sbh * (10 + 24 / t))
    if t > 1:
        assert layer(t, True, "core_attn") == pytest.approx(34 * sbh / t)


def test_table2_full_recompute() -> None:
    # 2sbh: only the layer input is kept (without SP; Megatron splits it by t under SP)
    assert layer(8, False, "full") == pytest.approx(2 * S * B * H)
    assert layer(8, True, "full") == pytest.approx(2 * S * B * H / 8)


def test_flash_attention_drops_the_score_term() -> None:
    # with flash attention nothing of size s^2 is stored: the selective value, but for the
    # kernel's fp32 log-sum-exp, 4 bytes a head and token (a / t heads a rank)
    lse = 4 * S * B * A / 8
    assert layer(8, True, "none", flash=True) == pytest.approx(layer(8, True, "core_attn") + lse)


def test_gqa_and_swiglu_change_the_layer() -> None:
    # Llama-3.1-8B-like layer, t = 1, no SP, flash. By hand, in units of sbh (h = 4096):
    # attention: replicated 2 (QKV in) + 1 (mask) + 2 (norm in) = 5; Q,K,V = 2(32+16)128/4096 = 3;
    #            output projection input 2  -> 10
    # MLP: replicated 5; fc1 output 2 * 2 * 14336/4096 = 14; activation output 2 * 3.5 = 7 -> 26
    # and the flash kernel's fp32 log-sum-exp, 4 bytes x 32 heads a token
    sh = Shard(tokens=8192, seq_per_cp_rank=8192)
    assert act.layer_bytes(LLAMA8, False, sh) == pytest.approx(36 * 8192 * 4096 + 4 * 8192 * 32)


def test_fp8_keeps_the_linear_inputs_in_8_bits() -> None:
    # GPT layer, t = 1, flash attention (34 sbh in bf16). Under FP8 the norm outputs that QKV and
    # fc1 save go from 2 to 1 byte (-1 sbh each) and fc2's input from 8 to 4 (-4 sbh); the
    # attention output stays 16-bit for flash attention's backward and the output projection
    # keeps an 8-bit copy beside it (+1 sbh): 5 sbh saved.
    base = Shard(tokens=S, seq_per_cp_rank=S)
    fp8 = Shard(tokens=S, seq_per_cp_rank=S, linear_bytes=1.0)
    saved = act.layer_bytes(GPT, False, base) - act.layer_bytes(GPT, False, fp8)
    assert saved == pytest.approx(5 * S * H)


def test_core_attn_recompute_drops_flash_attentions_16_bit_output_under_fp8() -> None:
    # GPT layer, t = 1, flash attention. Recomputing core attention keeps its inputs (q, k, v)
    # and what the output projection saves of its output, not what the kernel saved: in bf16
    # that is the same 16-bit tensor (nothing saved: Megatron warns the module is not needed),
    # under FP8 only the 8-bit copy stays, so the 16-bit output goes: 2 sbh saved (2 bytes x s x
    # a x d, a x d = h). It used to be kept, as if nothing were recomputed. Either way the
    # kernel's fp32 log-sum-exp (4 bytes a head and token) goes with the checkpoint.
    def one(recompute: str, linear_bytes: float) -> float:
        sh = Shard(
            tokens=S,
            seq_per_cp_rank=S,
            recompute=recompute,  # type: ignore[arg-type]
            linear_bytes=linear_bytes,
        )
        return act.layer_bytes(GPT, False, sh)

    assert one("none", 2.0) - one("core_attn", 2.0) == pytest.approx(4 * S * A)
    assert one("none", 1.0) - one("core_attn", 1.0) == pytest.approx(2 * S * H + 4 * S * A)


def test_logits_are_split_by_tp() -> None:
    # (2 + 4) bytes per logit over t ranks, plus the final norm's input and output (the output
    # layer's input), 2sbh each (split under SP)
    sh = Shard(tokens=S, tp=8, sequence_parallel=True, seq_per_cp_rank=S)
    assert logits_bytes(GPT, 51200, sh) == pytest.approx(6 * S * 51200 / 8 + 4 * S * H / 8)


@pytest.mark.parametrize("t", [1, 4])
def test_per_op_checkpointing_keeps_every_other_matmul_output(t: int) -> None:
    # Llama-3.1-8B layer, T tokens, no SP. torchtitan's policy saves the 1st, 3rd, ... matmul of
    # the block in the order wq, wk, wv, wo, w1, w3, w2. By hand, bytes per token:
    #   layer input 2h = 8192 (replicated without SP)
    #   attention output 2 x 32 x 128 / t + log-sum-exp 4 x 32 / t = (8192 + 128) / t
    #   kept matmul outputs: wq 2 x 32 x 128 / t = 8192 / t, wv 2 x 8 x 128 / t = 2048 / t (8
    #   query groups, not replicated at t <= 8), w1 2 x 14336 / t = 28672 / t, and w2 2h = 8192
    #   (a partial sum before the all-reduce: full width); wk, wo and w3 are re-run
    T = 4096
    sh = Shard(tokens=T, tp=t, recompute="per_op", seq_per_cp_rank=T)
    per_token = 8192 + 8320 / t + 38912 / t + 8192
    assert act.layer_bytes(LLAMA8, False, sh) == pytest.approx(per_token * T)
    # Megatron's selective keeps every saved tensor with flash attention: 36 sbh at t = 1
    core = Shard(tokens=T, recompute="core_attn", seq_per_cp_rank=T)
    assert act.layer_bytes(LLAMA8, False, core) == pytest.approx(36 * 4096 * T)


def test_per_op_working_set_is_the_whole_layer() -> None:
    T = 4096
    sh = Shard(tokens=T, recompute="per_op", seq_per_cp_rank=T)
    whole = 36 * 4096 * T + 4 * 32 * T  # test_gqa_and_swiglu's layer, its log-sum-exp included
    assert act.layer_bytes(LLAMA8, False, sh, recompute=False) == pytest.approx(whole)


def test_loss_bytes_per_logit_by_implementation() -> None:
    # per local logit: Megatron's fused kernel 2 + 4 = 6; torch cross_entropy on fp32 logits 12
    # at tp 1 (log-softmax output, its incoming gradient, the input gradient); under TP PyTorch's
    # loss_parallel 16 (its backward (zeros_like(x) + exp(x)) x grad: the saved fp32 log-softmax,
    # the zeroed gradient, their sum and the product, 4 each); gathered over TP: the bf16 local
    # logits plus GATHERED_LOSS_BYTES_PER_LOGIT on the full vocabulary
    V = 51200

    def loss(kind: str, t: int = 8) -> float:
        sh = Shard(tokens=S, tp=t, sequence_parallel=True, cross_entropy=kind)  # type: ignore[arg-type]
        return logits_bytes(GPT, V, sh) - 4 * S * H / t

    assert loss("fused") == pytest.approx(6 * S * V / 8)
    assert loss("pytorch", t=1) == pytest.approx(12 * S * V)
    assert loss("pytorch") == pytest.approx(16 * S * V / 8)
    gathered = 2 * S * V / 8 + GATHERED_LOSS_BYTES_PER_LOGIT * S * V
    assert loss("gathered") == pytest.approx(gathered)


def test_eager_swiglu_also_keeps_the_silu_output() -> None:
    # silu(x) * gate in eager PyTorch saves silu(x) for the multiplication: + 2 x F bytes per
    # token, split by t. Llama-3.1-8B layer at t = 2: 2 x 14336 / 2 = 14336 bytes per token
    T = 4096
    fused = Shard(tokens=T, tp=2, seq_per_cp_rank=T)
    eager = Shard(tokens=T, tp=2, seq_per_cp_rank=T, fused_swiglu=False)
    extra = act.layer_bytes(LLAMA8, False, eager) - act.layer_bytes(LLAMA8, False, fused)
    assert extra == pytest.approx(14336 * T)


def test_dtensor_sequence_parallel_keeps_the_gathered_linear_inputs() -> None:
    # Megatron SP keeps 1/t of the QKV and fc1 inputs (2Th each) and re-gathers in backward;
    # keeping the gathered input adds (1 - 1/t) of each: 2 x 2 x 4096 x 3/4 = 12288 bytes per
    # token at t = 4
    T = 4096
    sp = Shard(tokens=T, tp=4, sequence_parallel=True, seq_per_cp_rank=T)
    kept = Shard(
        tokens=T, tp=4, sequence_parallel=True, seq_per_cp_rank=T, sp_keeps_gathered_input=True
    )
    extra = act.layer_bytes(LLAMA8, False, kept) - act.layer_bytes(LLAMA8, False, sp)
    assert extra == pytest.approx(12288 * T)
    # without SP there is nothing to gather
    no_sp = Shard(tokens=T, tp=4, seq_per_cp_rank=T, sp_keeps_gathered_input=True)
    assert act.layer_bytes(LLAMA8, False, no_sp) == act.layer_bytes(
        LLAMA8, False, Shard(tokens=T, tp=4, seq_per_cp_rank=T)
    )


def test_local_cuda_graphs_keep_nothing_more_per_layer_te_whole_layers_one_input() -> None:
    """Megatron's own graphed layer holds no static buffer after capture (cuda_graphs.py
    :1632-1635 d98e8a64: its static gradients and forward buffers weak references in the one
    pool); a layer Transformer Engine's graphs capture whole keeps its static output beside the
    next layer's input (graph_buffers.TE_GRAPH_OUTPUT_COPIES): 2 bytes x T x h, split by tp
    under sequence parallelism (hand arithmetic)."""
    from dataclasses import replace

    arch = catalog.get_model("llama3.1-8b")
    sh = Shard(tokens=8192, tp=2, sequence_parallel=True, seq_per_cp_rank=8192)
    eager = act.layer_bytes(arch, False, sh)
    graphed = act.layer_bytes(arch, False, replace(sh, cuda_graphs=True))
    assert graphed == eager
    te = replace(sh, cuda_graphs=True, cuda_graph_impl="transformer_engine")
    assert act.layer_bytes(arch, False, te) - eager == 2 * 8192 * 4096 / 2
