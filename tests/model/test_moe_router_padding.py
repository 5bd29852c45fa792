"""Megatron's FP8 / FP4 expert-segment padding (`planner.model.moe_padding`): router padding
(--moe-router-padding-for-quantization, its alias --moe-router-padding-for-fp8) read, refused
where Megatron refuses it, written back by the launch, and what it does to memory; the experts'
own padding copy under DeepEP; the allgather dispatcher's FP8 tokens in flight.

Oracles: Megatron-LM d98e8a64 (token_dispatcher.py:649-654 pads each source rank's routing map
before the alltoall dispatch, moe_utils.py:731-763 `pad_routing_map`; experts.py:890-903 pads
the experts' input unless moe_utils.py:1494-1509 `skip_routed_expert_padding`; fp8_utils.py
:356-361 aligns FP8 other than MXFP8 to 16 rows; transformer_config.py:2641-2659 the alias and
the refusals; token_dispatcher.py allgather :281-353 and moe_layer.py:547-569 the tokens the
allgather layer holds), and hand arithmetic written out beside each assertion.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.emit import megatron
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import moe_activations as ma
from planner.model.stage_activations import shard

# The QA's base case: 256 experts (top 8) of 512 on 8 H100, ep 8, alltoall, tensorwise FP8,
# h 1024, one micro-batch of 4096 tokens
LINE = (
    "--num-layers 4 --hidden-size 1024 --ffn-hidden-size 4096 --num-attention-heads 8 "
    "--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
    "--global-batch-size 64 --swiglu --normalization RMSNorm --disable-bias-linear "
    "--position-embedding-type rope --vocab-size 32000 --bf16 --transformer-impl "
    "transformer_engine --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 512 "
    "--expert-model-parallel-size 8 --moe-grouped-gemm --fp8-format e4m3 --fp8-recipe tensorwise"
)
A2A = " --moe-token-dispatcher-type alltoall"
PAD = " --moe-router-padding-for-quantization"
T = 4096
ROUTED = 8 * T * 1.2  # k x T x the memory's learned-routing load (shard.MOE_LOAD_IMBALANCE)


def _plan(extra: str):  # type: ignore[no-untyped-def]
    return parse_plan(megatron_args.to_plan(LINE + extra, "h100-sxm-80gb", 8))


@pytest.mark.parametrize("flag", [PAD, " --moe-router-padding-for-fp8"])
def test_router_padding_is_read_and_launched(flag: str) -> None:
    # the alias turns moe_router_padding_for_quantization on (transformer_config.py:2641-2647)
    plan = _plan(A2A + flag)
    assert plan.job.moe_router_padding
    assert "--moe-router-padding-for-quantization" in megatron.arguments(plan).flat()
    assert not _plan(A2A).job.moe_router_padding


BF16_LINE = LINE.replace(" --fp8-format e4m3 --fp8-recipe tensorwise", "")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (LINE + PAD, "allgather dispatcher"),  # Megatron's default dispatcher (arguments.py)
        (LINE + " --moe-token-dispatcher-type allgather" + PAD, "allgather dispatcher"),
        (BF16_LINE + A2A + PAD, "needs --fp8-format or --fp4-format"),
    ],
)
def test_router_padding_refused_where_megatron_raises(line: str, why: str) -> None:
    # transformer_config.py:2649-2659: no fp8 / fp4, or the allgather dispatcher, raises
    with pytest.raises(InputError, match=why):
        megatron_args.to_plan(line, "h100-sxm-80gb", 8)


def test_router_padding_pairs_and_kept_bytes_by_hand() -> None:
    # Without router padding the experts pad their own segments: at most 16 - 1 rows for each of
    # the 256 / 8 = 32 local experts, 480. With it each of the 8 source ranks pads each of the 32
    # experts up to 15 rows: 8 x 32 x 15 = 3,840 (the bound; memory takes it, moe_padding).
    plain, padded = _plan(A2A), _plan(A2A + PAD)
    sh0, sh1 = shard(plain.job, plain.require_layout()), shard(padded.job, padded.require_layout())
    arch = plain.job.arch
    assert ma.pairs(arch, sh0) == pytest.approx(ROUTED + 32 * 15)
    assert ma.pairs(arch, sh1) == pytest.approx(ROUTED + 8 * 32 * 15)
    assert sh0.expert_padding and not sh1.expert_padding  # skip_routed_expert_padding
    # kept per pair: fc1's FP8 input h = 1024, fc1's output 2 x 2F = 2048 (gated), the
    # probability 4, fc2's FP8 input F = 512 (the fused weighted SwiGLU keeps nothing more):
    # 3,588 bytes a pair, for 3,840 - 480 = 3,360 more pairs
    assert ma.moe_bytes(arch, sh1) - ma.moe_bytes(arch, sh0) == pytest.approx(3360 * 3588)


def test_router_padding_forward_skips_the_experts_padding_copy() -> None:
    # alltoall, FP8, router padding: n = 43,161.6 pairs; no padded copy, so the moments are
    # fc2's end, received n + bf16 input n + fc2 output n + the activation n x 512 / 1024 =
    # 3.5 n, and the combine, received + input + output + sort back = 4 n; with the permuted
    # local tokens k x T = 32,768 and router padding's rows on the sender, 256 experts x 15 =
    # 3,840: 4 n + 36,608 rows of 2 x 1024 bytes (no shared experts)
    plan = _plan(A2A + PAD)
    sh = shard(plan.job, plan.require_layout())
    n = ROUTED + 8 * 32 * 15
    hand = 2 * 1024 * (4 * n + 8 * T + 256 * 15)
    assert ma.forward_bytes(plan.job.arch, sh, "alltoall", 8) == pytest.approx(hand)


def test_deepep_experts_pad_unless_the_router_did() -> None:
    # DeepEP: the experts pad their input under FP8 (experts.py:890-903) unless the router
    # padded (moe_utils.py:1500-1501), which DeepEP does at the destination (token_dispatcher.py
    # :1433-1436): up to 15 rows for each of the 32 local experts either way. HybridEP pads in
    # its own dispatch (moe_utils.py:1502-1506; pad_multiple, token_dispatcher.py:1142-1163):
    # no copy in the experts, the same 15 rows a local expert.
    flex = replace(
        _plan(A2A).require_layout(),
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="deepep",
    )
    j = _plan(A2A).job
    assert shard(j, flex).expert_padding
    assert not shard(replace(j, moe_router_padding=True), flex).expert_padding
    assert ma.pairs(j.arch, shard(replace(j, moe_router_padding=True), flex)) == pytest.approx(
        ROUTED + 32 * 15
    )
    hybrid = replace(flex, moe_flex_dispatcher_backend="hybridep")
    assert not shard(j, hybrid).expert_padding
    assert ma.pairs(j.arch, shard(j, hybrid)) == pytest.approx(ROUTED + 32 * 15)


def test_fp8_allgather_holds_the_bf16_input_and_the_padding_copies() -> None:
    # Qwen3-30B-A3B (h 2048, 128 experts top 8 of 768), tensorwise FP8, allgather, ep 8, one
    # micro-batch of 4096: G = 4096 x 8 = 32,768 gathered tokens; n = 8 x 4096 x 1.2 + 16 local
    # experts x 15 = 39,561.6 pairs; the activation n x 768 / 2048 rows of h. At the unpadding:
    # G + bf16 input n + padded copy n + padded fc2 output n + unpadded output n + activation;
    # at the combine 2 G + 2 n (the G rows unpermuted into, the input, the output)
    j = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, T, 64, precision="fp8", fp8_recipe="tensorwise")
    lay = Layout(tp=1, pp=1, dp=8, ep=8, moe_token_dispatcher_type="allgather")
    sh = shard(j, lay)
    G, n = 8.0 * T, 8 * T * 1.2 + 16 * 15
    rows = max(G + 4 * n + n * 768 / 2048, 2 * G + 2 * n)
    assert ma.forward_bytes(j.arch, sh, "allgather", 8) == pytest.approx(2 * 2048 * rows)


def test_bf16_allgather_holds_the_shared_experts_output() -> None:
    # custom_forward (moe_layer.py d98e8a64) runs the shared experts before the dispatch and adds
    # their output after the combine: 2h a local token in flight beside the allgather's G
    # gathered and G unpermuted rows and the n expert outputs. DeepSeek-V3 in bf16 (no padding:
    # align 0, moe_utils.py:1479-1480), ep 8, one micro-batch of 4096: G = 32,768,
    # n = 8 x 4096 x 1.2 = 39,321.6, h 7168
    j = job("deepseek-v3", "h100-sxm-80gb", 8, T, 64)
    lay = Layout(tp=1, pp=1, dp=8, ep=8, moe_token_dispatcher_type="allgather")
    hand = 2 * 7168 * (2 * 8 * T + 8 * T * 1.2) + 2 * 7168 * T
    assert ma.forward_bytes(j.arch, shard(j, lay), "allgather", 8) == pytest.approx(hand)


def test_the_experts_pad_to_the_recipe_under_the_op_fuser() -> None:
    # experts.py:305-314 (d98e8a64): Fp8Padding's align_size is get_align_size_for_quantization's
    # 256 only under moe_use_grouped_tensor, else None, which Transformer Engine d0067d0d takes
    # as the recipe's 16 (fp8_padding.py:117-119); and the experts pad only under FP8 / FP4 or
    # the grouped tensor (experts.py:736, :896). Qwen3-30B-A3B (128 experts) at ep 8, alltoall:
    # 16 local experts x (16 - 1) = 240 rows with the op fuser in FP8, none in bf16
    lay = Layout(tp=1, pp=1, dp=8, ep=8, moe_token_dispatcher_type="alltoall")
    fp8 = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, T, 64, precision="fp8", fp8_recipe="tensorwise")
    fused = replace(fp8, moe_fused_grouped_mlp=True)
    assert shard(fused, lay).pad_pairs == 16 * 15 and shard(fused, lay).expert_padding
    assert shard(replace(fused, moe_grouped_tensor=True), lay).pad_pairs == 16 * 255
    bf16 = replace(job("qwen3-30b-a3b", "h100-sxm-80gb", 8, T, 64), moe_fused_grouped_mlp=True)
    assert shard(bf16, lay).pad_pairs == 0 and not shard(bf16, lay).expert_padding


def test_nvfp4_experts_pad_to_transformer_engines_128() -> None:
    # Transformer Engine d0067d0d quantization.py:274-278: Fp8Padding without an align_size (as
    # Megatron builds it outside the grouped tensor, experts.py:305-314) takes 128 rows under
    # NVFP4. Qwen3-30B-A3B (128 experts) at ep 8: 16 local experts x (128 - 1) = 2,032 rows
    lay = Layout(tp=1, pp=1, dp=8, ep=8, moe_token_dispatcher_type="alltoall")
    fp4 = job("qwen3-30b-a3b", "b200-sxm-180gb", 8, T, 64, precision="fp4")
    assert shard(fp4, lay).pad_pairs == 16 * 127 and shard(fp4, lay).expert_padding
