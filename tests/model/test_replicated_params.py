"""What every TP rank holds whole: the parameters Megatron-Core does not split over tensor
parallelism, and a rank's share of its layers with them.

Oracle: hand arithmetic from Megatron-LM d98e8a64 (multi_latent_attention.py builds MLA's q and kv
down-projections as TELinear with parallel_mode "duplicated"; the MoE router module's
TopKRouter weight is a plain [E, h] parameter; norms are never split) on the zoo's published
shapes.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.hybrid import DENSE, MOE
from planner.inputs.layout import Layout
from planner.model import params
from planner.model.stage_params import decoder_params


def test_deepseek_v3_moe_layer_by_hand() -> None:
    # DeepSeek-V3 (h 7168, q-LoRA 1536, kv latent 512 + rope 64, RMSNorm, 256 experts): the two
    # block norms 2 x 7168, q down 7168 x 1536, kv down 7168 x 576, the latent norms 1536 + 512,
    # the router 7168 x 256
    arch = job("deepseek-v3", "h800-sxm-80gb", 8, 4096, 8).arch
    want = 2 * 7168 + 7168 * 1536 + 7168 * 576 + 1536 + 512 + 7168 * 256
    assert params.replicated_params(arch, MOE) == want == 16_990_208
    # a dense layer of it: the same but the router
    assert params.replicated_params(arch, DENSE) == want - 7168 * 256


def test_a_dense_transformer_layer_keeps_only_its_norms_whole() -> None:
    # Llama 3.1 8B: two RMSNorms of 4096; Qwen3 adds its q and k norms over the 128-wide head
    assert params.replicated_params(
        job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 8).arch, DENSE
    ) == (2 * 4096)
    qwen = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 8).arch
    assert params.replicated_params(qwen, MOE) == 2 * 2048 + 2 * 128 + 2048 * 128


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_ranks_layers_split_all_but_the_whole_part(tp: int) -> None:
    # one rank's 61 DeepSeek-V3 layers at tp: (all - whole) / tp + whole
    j = job("deepseek-v3", "h800-sxm-80gb", 64, 4096, 64)
    arch = j.arch
    lay = Layout(tp=tp, pp=1, dp=64 // tp, ep=8)
    dense, _ = decoder_params(j, lay, (range(arch.num_layers),))
    counts = arch.kind_counts((range(arch.num_layers),))
    table, whole = params.kind_table(arch), params.replicated_table(arch)
    total = sum(n * d for n, (d, _) in zip(counts, table, strict=True))
    kept = sum(n * w for n, w in zip(counts, whole, strict=True))
    assert dense == pytest.approx((total - kept) / tp + kept)
    assert kept == 3 * params.replicated_params(arch, DENSE) + 58 * 16_990_208


def test_the_mtp_layer_keeps_its_norms_and_inner_layer_whole() -> None:
    # DeepSeek-V3's one MTP layer: enorm, hnorm and its final norm (3 x 7168) and an MoE layer's
    # whole part (16,990,208); its eh_proj (2h x h) is column-parallel
    arch = job("deepseek-v3", "h800-sxm-80gb", 8, 4096, 8).arch
    assert params.mtp_replicated_params(arch) == 3 * 7168 + 16_990_208
    assert params.mtp_replicated_params(job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 8).arch) == 0
