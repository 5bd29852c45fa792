"""What an MoE layer holds while it runs, checked against hand arithmetic from Megatron-LM's
source (d98e8a64): the experts' backward, FP8's bf16 tokens and padding copies, pad-to-capacity,
a recomputed MoE layer's rebuilt activations beside its tokens in flight, and the
expert-data-parallel communicator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import buffers, moe_working, routing_load, stage_activations
from planner.model import moe_activations as ma
from planner.model.stage_activations import per_layer, shard

GIB = 2**30
T = 4096  # tokens per micro-batch (seq 4096, micro-batch 1)


def test_glu_expert_backward_holds_gated_gradient_beside_fc2_input_gradient() -> None:
    # WeightedSwiGLUFunction.backward (fused_bias_swiglu.py:279-286, weighted_swiglu_back
    # :115-122) holds fc2's input gradient (F) beside its gated input gradient (2F); fc1's
    # backward then h + 2F. Mixtral 8x7B: h 4096, F 14336, k 2, ep 8, the running layer's load
    # the step's expected busiest rank (1.39 at 8 ranks of one expert, above the kept 1.2):
    # pairs p = 2 x 4096 x load; max(2h, h+F, 3F, h+2F) = 3F = 43008 words a pair.
    j = job("mixtral-8x7b", "h100-sxm-80gb", 8, T, 64)
    lay = Layout(tp=1, pp=1, dp=8, ep=8)
    sh = shard(j, lay)
    load = routing_load.step_load(j, lay)
    assert sh.moe_work_load == load and 1.35 < load < 1.45
    p = 2 * T * load
    assert ma.backward_bytes(j.arch, sh) == pytest.approx(2 * p * 3 * 14336)


def test_fp8_alltoall_forward_holds_bf16_input_and_padding_copies() -> None:
    # DeepSeek-V3, blockwise FP8, alltoall, ep 32: n = 8 x 4096 x 1.2 = 39321.6 pairs and the
    # experts' own padding, at most 16 - 1 rows for each of the 256 / 32 = 8 local experts
    # (fp8_utils.py:356-361: 16 for FP8 other than MXFP8), h 7168, F 2048. At the unpadding
    # (experts.py:1042-1044): permuted local k x T, received n, the bf16 input
    # routed_experts_compute holds (moe_layer.py:547-569) n, its padded copy (experts.py:896-903)
    # n, the padded fc2 output n, the unpadded output n = kT + 5n rows of 2h bytes, with the
    # bf16 activation output (F wide, 2 bytes) and the shared experts' output (2h a local
    # token).
    j = job("deepseek-v3", "h800-sxm-80gb", 256, T, 1024, precision="fp8", fp8_recipe="blockwise")
    lay = Layout(tp=1, pp=8, dp=32, ep=32, moe_token_dispatcher_type="alltoall")
    sh = shard(j, lay)
    # the running layer's load: the step's busiest of 32 ranks of 8 experts, 1.2 (as kept)
    assert sh.moe_work_load == pytest.approx(max(1.2, routing_load.step_load(j, lay)))
    n = 8 * T * sh.moe_work_load + 8 * 15
    hand = 2 * 7168 * (8 * T + 5 * n) + 2 * 2048 * n + 2 * 7168 * T
    assert ma.forward_bytes(j.arch, sh, "alltoall", 32) == pytest.approx(hand)
    # DeepEP: the experts pad too (experts.py:890-903: skip_routed_expert_padding, moe_utils.py
    # :1494-1509, holds for DeepEP only with a grouped tensor and a TE whose fused permute pads),
    # so its unpadding holds received, bf16 input, padded copy, padded and unpadded fc2 outputs
    # = 5n with the activation, above the combine's 4n (received, input, output, restore)
    deepep = replace(lay, moe_token_dispatcher_type="flex", moe_flex_dispatcher_backend="deepep")
    hand_flex = 2 * 7168 * 5 * n + 2 * 2048 * n + 2 * 7168 * T
    assert ma.forward_bytes(j.arch, shard(j, deepep), "flex", 32) == pytest.approx(hand_flex)


def test_pad_to_capacity_sizes_the_senders_permuted_tokens() -> None:
    # token_dispatcher.py:518-525: num_out_tokens = capacity x E, capacity = k T / E x cf:
    # the permuted local tokens are k T cf, as are the pairs received (routing_load: padding
    # runs exactly cf). Mixtral 8x7B bf16, cf 1.5, ep 8: 2h x (3n + k T cf), n = 2 x 4096 x 1.5.
    j = job(
        "mixtral-8x7b",
        "h100-sxm-80gb",
        8,
        T,
        64,
        moe_expert_capacity_factor=1.5,
        moe_pad_expert_input_to_capacity=True,
    )
    sh = shard(j, Layout(tp=1, pp=1, dp=8, ep=8))
    n = 2 * T * 1.5
    assert ma.forward_bytes(j.arch, sh, "alltoall", 8) == pytest.approx(2 * 4096 * (3 * n + n))


def test_full_recompute_adds_the_rebuilt_moe_layer_to_its_tokens_in_flight() -> None:
    # A recomputed MoE layer holds its rebuilt activations and its tokens in flight together;
    # a kept one sits in `stored` under the working set. DeepSeek-V3 pp 8 rank 0 (3 dense, 5
    # MoE layers, not the loss's stage): without the MoE working set the rank holds stored +
    # rebuilt (the MoE layer, the larger kind); with it, stored + rebuilt + tokens in flight.
    j = job("deepseek-v3", "h800-sxm-80gb", 256, T, 1024)
    lay = Layout(tp=1, pp=8, dp=32, ep=8, recompute="full")
    sh, chunks = shard(j, lay), lay.chunk_layers(j.arch.num_layers)[0]
    per = per_layer(j.arch, sh)
    assert max(per.full) == per.full[[k.moe for k in j.arch.kinds].index(True)]
    tokens = moe_working.moe_working(j.arch, sh, lay, per.full)
    acts = stage_activations.stage_activations(j, lay, 0, chunks, sh, per)
    orig = stage_activations.moe_working
    stage_activations.moe_working = lambda *a: 0.0  # type: ignore[assignment]
    try:
        without = stage_activations.stage_activations(j, lay, 0, chunks, sh, per)
    finally:
        stage_activations.moe_working = orig
    assert acts - without == pytest.approx(tokens)


def test_selective_moe_recompute_adds_the_rebuilt_block_to_the_backwards_tokens() -> None:
    # Mixtral 8x7B, recompute_modules moe: the backward (3F a pair, above) exceeds the
    # forward's tokens; the rebuilt block is alive under either (moe_layer.py:701-715).
    j = job("mixtral-8x7b", "h100-sxm-80gb", 8, T, 64)
    lay = Layout(tp=1, pp=1, dp=8, ep=8, recompute="selective", recompute_modules=("moe",))
    sh = shard(j, lay)
    assert sh.drops("moe")
    whole = replace(sh, modules=sh.modules - {"moe"})
    rebuilt = ma.moe_bytes(j.arch, whole) - ma.moe_bytes(j.arch, sh)
    bwd, fwd = ma.backward_bytes(j.arch, sh), ma.forward_bytes(j.arch, sh, "alltoall", 8)
    assert bwd > fwd
    full = per_layer(j.arch, sh).full
    assert moe_working.moe_working(j.arch, sh, lay, full) == pytest.approx(rebuilt + bwd)


def test_expert_data_parallel_communicator_counted() -> None:
    # parallel_state.py:1457-1471 creates EXPERT_DATA_PARALLEL_GROUP; DDP reduces the expert
    # buffers over it (distributed_data_parallel.py:286). tp1 pp16 ep64 dp128 on 2048 GPUs:
    # expert-dp 2048 / (64 x 16) = 2; groups: the default, pp, ep, dp, expert-dp = 5.
    lay = Layout(tp=1, pp=16, dp=128, ep=64)
    assert lay.expert_dp == 2
    assert buffers.context_bytes(lay) == pytest.approx(0.8 * GIB + 5 * 0.25 * GIB)
    # without EP there is no expert-dp communicator of its own: default, pp, dp
    assert buffers.context_bytes(Layout(tp=1, pp=16, dp=128)) == pytest.approx(
        0.8 * GIB + 3 * 0.25 * GIB
    )
