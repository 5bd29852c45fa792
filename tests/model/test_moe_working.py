"""What a mixture-of-experts layer holds while it runs, and what its unfused activation keeps
(an audit of planner.model.moe_activations against Megatron-LM d98e8a64's MoE code found these
under-counted).

Oracles: the tensors Megatron-Core holds, counted from its source (moe_layer.py custom_forward
and routed_experts_compute, token_dispatcher.py MoEAlltoAllTokenDispatcher, experts.py
TEGroupedMLP bias_act_func, fused_bias_swiglu.py WeightedSwiGLUFunction.backward), by hand for
Qwen3-30B-A3B (hidden 2048, expert FFN 768, top-8 of 128 experts, no shared experts) at 4,096
tokens, tp 2 with sequence parallelism: 2,048 local tokens, pairs n = 8 x 2,048 x the routing
load 1.2 = 19,660.8.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jobs import job

from planner.emit import megatron
from planner.inputs import catalog, megatron_args
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import moe_activations as moe
from planner.model.moe_working import moe_working
from planner.model.shard import Shard
from planner.model.stage_activations import per_layer, shard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "emit"))
from megatron_plans import flags, make_plan

ARCH = catalog.get_model("qwen3-30b-a3b")
SH = Shard(tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2)
N = 8 * 2048 * 1.2  # token-expert pairs on the busiest GPU


def test_the_alltoall_forward_holds_the_local_tokens_and_three_copies_of_the_pairs() -> None:
    """custom_forward keeps the permuted local tokens (8 per local token) and the all-to-all's
    output as locals; routed_experts_compute adds the experts' output and its sort back by
    source rank: 2 bytes x 2,048 x (8 x 2,048 + 3 n) = 308,700,774 bytes (294.4 MiB; planner
    counted two copies of the pairs, 153.6 MiB)."""
    assert moe.forward_bytes(ARCH, SH, "alltoall", 8) == pytest.approx(2 * 2048 * (16384 + 3 * N))
    # the backward: two token gradients of the pairs, 2 x 2 x 2,048 x n, above the experts'
    # max(h + F, 2F) = 2,816 per pair
    assert moe.backward_bytes(ARCH, SH) == pytest.approx(2 * 2 * 2048 * N)
    assert moe.dispatch_working_bytes(ARCH, SH, "alltoall", 8) == pytest.approx(
        2 * 2048 * (16384 + 3 * N)
    )


def test_a_wide_experts_backward_holds_its_ffn_gradients() -> None:
    """Mixtral 8x7B (hidden 4096, expert FFN 14,336): WeightedSwiGLUFunction.backward holds fc2's
    input gradient (F wide) beside its own input's (2F) per pair (fused_bias_swiglu.py d98e8a64
    :279-286, weighted_swiglu_back :115-122): 3F > h + 2F > 2h, so the backward is 2 bytes x
    3 x 14,336 per pair, not the dispatcher's 2 x 4,096; with moe_act recomputed one F more."""
    arch = catalog.get_model("mixtral-8x7b")
    sh = Shard(tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2)
    pairs = 2 * 2048 * 1.2
    assert moe.backward_bytes(arch, sh) == pytest.approx(2 * 3 * 14336 * pairs)
    recomputed = Shard(
        tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2, recompute="core_attn",
        modules=frozenset({"moe_act"}),
    )  # fmt: skip
    assert moe.backward_bytes(arch, recomputed) == pytest.approx(2 * 4 * 14336 * pairs)


def test_an_unfused_swiglu_keeps_three_more_ffn_wide_tensors_per_pair() -> None:
    """--no-bias-swiglu-fusion: silu(x_glu) * (x_linear + glu_linear_offset) saves silu's output
    and the offset sum, and the product times the probabilities saves the product: 3 x 2 bytes
    x 768 x n = 90,596,966 bytes (86.4 MiB) more per layer; none with the activation
    recomputed (moe_act); torchtitan's experts, which weight the tokens outside, one (silu's)."""
    unfused = Shard(tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2, fused_swiglu=False)
    extra = moe.moe_bytes(ARCH, unfused) - moe.moe_bytes(ARCH, SH)
    assert extra == pytest.approx(3 * 2 * 768 * N)
    titan = Shard(
        tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2, fused_swiglu=False,
        weighted_experts=False,
    )  # fmt: skip
    # and its combine's fp32 copy of the routed outputs, over the block's TP-replicated tokens:
    # 4 x 4096 x 8 x 2048 (e347b1e5 models/moe/moe.py:541-549, llama4/infra/parallelize.py:523)
    combine = 4 * 4096 * 8 * 2048
    assert moe.moe_bytes(ARCH, titan) - moe.moe_bytes(ARCH, SH) == pytest.approx(
        2 * 768 * N + combine
    )
    act = {"recompute": "core_attn", "modules": frozenset({"moe_act"})}
    kept = Shard(tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2, **act)  # type: ignore[arg-type]
    kept_unfused = Shard(
        tokens=4096,
        tp=2,
        sequence_parallel=True,
        moe_load=1.2,
        fused_swiglu=False,
        **act,  # type: ignore[arg-type]
    )
    assert moe.moe_bytes(ARCH, kept_unfused) == moe.moe_bytes(ARCH, kept)


def test_a_recomputed_moe_block_is_rebuilt_in_its_backward() -> None:
    """Selective recompute of "moe" runs custom_forward under tensor_parallel.checkpoint: the
    backward rebuilds the block (what the layer did not keep) with the forward's tokens in
    flight again, on top of what the stage keeps; planner counted only the dispatcher's
    backward copies."""
    sh = Shard(
        tokens=4096, tp=2, sequence_parallel=True, moe_load=1.2, recompute="core_attn",
        modules=frozenset({"moe"}),
    )  # fmt: skip
    per = per_layer(ARCH, sh)
    # the whole block as no recompute keeps it, less what the checkpoint kept (its input)
    rebuilt = moe.moe_bytes(ARCH, SH) - moe.moe_bytes(ARCH, sh)
    lay = Layout(tp=2, ep=8, sequence_parallel=True)
    expected = rebuilt + moe.forward_bytes(ARCH, sh, "alltoall", 8)
    assert moe_working(ARCH, sh, lay, per.full) == pytest.approx(expected)
    # the block rebuilt is more than the tokens in flight alone (what planner counted)
    assert rebuilt > 0 and expected > moe.dispatch_working_bytes(ARCH, sh, "alltoall", 8)


def test_the_activation_fusion_is_launched_as_it_was_timed() -> None:
    """training.fused_swiglu false on a SwiGLU model is Megatron's --no-bias-swiglu-fusion
    (argument_utils.py: bias_activation_fusion = args.bias_swiglu_fusion); an MoE model's squared
    ReLU experts run fused only with --use-fused-weighted-squared-relu (off by default, which a
    command line without it reads as fused_swiglu false)."""
    unfused = make_plan("llama3.1-8b", 8, {"tp": 2}, fused_swiglu=False)
    assert "--no-bias-swiglu-fusion" in flags(unfused)
    assert "--no-bias-swiglu-fusion" not in flags(make_plan("llama3.1-8b", 8, {"tp": 2}))
    relu2 = make_plan("nemotron3-nano-30b-a3b", 8, {"ep": 8})
    assert "--use-fused-weighted-squared-relu" in flags(relu2)  # fused_swiglu's default
    eager = make_plan("nemotron3-nano-30b-a3b", 8, {"ep": 8}, fused_swiglu=False)
    assert "--use-fused-weighted-squared-relu" not in flags(eager)
    line = " ".join(w for arg in megatron.arguments(relu2).flat_args() for w in arg)
    bare = line.replace("--use-fused-weighted-squared-relu", "")
    assert parse_plan(megatron_args.to_plan(bare, "h100-sxm-80gb", 8)).job.fused_swiglu is False
    assert parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8)).job.fused_swiglu is True


def test_offloading_expert_fc1_under_fp8_keeps_its_bf16_input() -> None:
    """experts.py sets save_original_input on fc1 when expert_fc1 is offloaded under an FP8
    recipe other than MXFP8: fc1 saves (and the offload moves) 2 bytes x 2,048 per pair, not
    the 8-bit copy's 1 x 2,048; MXFP8, or no offload, keeps the copy (MXFP8's with its E8M0
    scale per 32 values, TE d0067d0d mxfp8_tensor.py:139-175: 2,048 x 33/32 = 2,112)."""
    lay = Layout(ep=8, offload_modules=("expert_fc1",))
    for recipe, per_pair in (("delayed", 2 * 2048), ("tensorwise", 2 * 2048), ("mxfp8", 2112)):
        j = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 64, precision="fp8", fp8_recipe=recipe)
        sh = shard(j, lay)
        assert moe.expert_input_bytes(ARCH, sh) == pytest.approx(moe.pairs(ARCH, sh) * per_pair)
    kept = shard(job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 64, precision="fp8"), Layout(ep=8))
    assert moe.expert_input_bytes(ARCH, kept) == pytest.approx(moe.pairs(ARCH, kept) * 2048)


def test_the_shared_experts_input_as_their_fc1_saves_it() -> None:
    """shared_experts.py (d98e8a64): under --moe-shared-expert-overlap with TP, SharedExpertMLP
    gathers the sequence-parallel tokens itself and runs fc1 without its parallel mode, so fc1
    saves the gathered input, 2 bytes x hidden per token of the TP group; without the overlap
    fc1 saves the local norm output the router already keeps (nothing more in bf16), plus its
    8-bit copy under delayed-scaling FP8; under another FP8 recipe save_original_input drops that
    copy. Hand count for DeepSeek-V3 (hidden 7,168, shared FFN 2,048) at 4,096 tokens, tp 4:
    1,024 local tokens."""
    dsv3 = catalog.get_model("deepseek-v3")
    h, tokens, local = 7168, 4096, 1024

    def extra(precision: str, recipe: str, overlap: bool) -> float:
        j = job("deepseek-v3", "h100-sxm-80gb", 256, tokens, 256, precision=precision,
                fp8_recipe=recipe)  # fmt: skip
        lay = Layout(tp=4, ep=8, sequence_parallel=True, moe_shared_expert_overlap=overlap)
        return moe.shared_input_bytes(dsv3, shard(j, lay))

    assert extra("bf16", "delayed", overlap=False) == 0
    assert extra("fp8", "delayed", overlap=False) == pytest.approx(1 * h * local)
    assert extra("fp8", "tensorwise", overlap=False) == 0
    assert extra("bf16", "delayed", overlap=True) == pytest.approx(2 * h * tokens)
    assert extra("fp8", "delayed", overlap=True) == pytest.approx(1 * h * tokens)
    assert extra("fp8", "mxfp8", overlap=True) == pytest.approx(2 * h * tokens)
    # the layer's whole activations grow by that input (2 x 7,168 x 4,096 = 58.7 MB)
    j = job("deepseek-v3", "h100-sxm-80gb", 256, tokens, 256)
    lays = [
        Layout(tp=4, ep=8, sequence_parallel=True, moe_shared_expert_overlap=o)
        for o in (False, True)
    ]
    off, on = (moe.moe_bytes(dsv3, shard(j, lay)) for lay in lays)
    assert on - off == pytest.approx(2 * h * tokens)
