"""Multi-latent attention under tensor parallelism, as Megatron-Core runs it: the down-projections
whole on every TP rank but on the rank's sequence shard, and the TP group gathering the latents,
not the h-wide input, for the column-parallel up-projections.

Oracle: Megatron-LM d98e8a64 megatron/core/transformer/multi_latent_attention.py
(`_qkv_down_projection`: Transformer Engine's "duplicated" linear on the [s / TP] input,
"q_compressed: [s / TP, b, q_lora_rank]"; the up-projections are column-parallel, so they gather
their latent input; k_pos_emb gathered with gather_from_sequence_parallel_region) and
gpt_layer_specs.py (the TE spec's backend.linear() down-projections); hand arithmetic in comments.
"""

from __future__ import annotations

import pytest
from jobs import h100_cluster, job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.model import comms, gemm_shapes, layer_time, layer_tp

DSV3 = catalog.get_model("deepseek-v3")  # h 7168, q_lora 1536, kv_lora 512, rope 64, 128 heads


def test_down_projections_run_on_the_sequence_shard() -> None:
    # 4096 tokens on tp 2: the q and kv down-projections (K = h) see 4096 / 2 = 2048 rows on the
    # shard, 4096 when duplicated on the whole input; the up-projections and the output projection
    # see all 4096 with their weights sliced
    shard = gemm_shapes.attention_gemms(DSV3, 4096.0, 2, latents_on_shard=True)
    whole = gemm_shapes.attention_gemms(DSV3, 4096.0, 2)
    assert [g[0] for g in shard] == [2048.0, 4096.0, 2048.0, 4096.0, 4096.0]
    assert [g[0] for g in whole] == [4096.0] * 5
    assert [g[1:] for g in shard] == [g[1:] for g in whole]
    assert shard[0][1:3] == (7168, 1536) and shard[2][1:3] == (7168, 512 + 64)
    # at tp 1 the shard is the whole sequence
    assert gemm_shapes.attention_gemms(DSV3, 4096.0, 1, True) == gemm_shapes.attention_gemms(
        DSV3, 4096.0, 1
    )


def test_gathered_width_is_the_latents() -> None:
    assert gemm_shapes.mla_gathered_width(DSV3) == 1536 + 512 + 64  # q latent, kv latent, rope key
    no_q = DSV3.model_copy(update={"q_lora_rank": None})
    assert (
        gemm_shapes.mla_gathered_width(no_q) == 7168 + 512 + 64
    )  # the whole query projection's input


def test_a_narrow_gather_by_hand() -> None:
    # tp 8 in an H100 node, S = 64 MB: a block gathering a quarter of S moves a quarter-width
    # all-gather forward, a quarter-width reduce-scatter and re-gather backward; its row-parallel
    # reduce-scatter forward and output-gradient gather stay S wide
    grp = comms.place(h100_cluster(8), 1, 8)
    half = comms.reduce_scatter(64e6, grp)
    quarter = comms.reduce_scatter(16e6, grp)
    args: dict = {"n_fwd": 1, "sequence_parallel": True, "windows": (0.0,)}
    args["overlap_backward"] = False
    wide = layer_tp.tensor_parallel_layer(h100_cluster(8), 8, 64e6, **args)
    narrow = layer_tp.tensor_parallel_layer(h100_cluster(8), 8, 64e6, widths=(0.25,), **args)
    ar = comms.all_reduce(64e6, grp)
    # forward: the input's gather and the output's reduce-scatter; backward: the output
    # gradient's gather, the input gradient's reduce-scatter and the input's re-gather
    assert wide == pytest.approx((2 * half + 3 * half, 0.0))
    assert narrow == pytest.approx((quarter + half + half + 2 * quarter, 0.0))
    # without sequence parallelism the backward all-reduce is of the narrow input's gradient
    args["sequence_parallel"] = False
    got = layer_tp.tensor_parallel_layer(h100_cluster(8), 8, 64e6, widths=(0.25,), **args)
    assert got == pytest.approx((ar + comms.all_reduce(16e6, grp), 0.0))


def test_megatron_mla_layer_moves_fewer_tp_bytes_than_an_h_wide_gather() -> None:
    # DeepSeek-V3 on 16 H100, tp 2 with SP: the attention block's gather is 2112 / 7168 of the
    # input, so the layer's TP traffic is below the same layer timed as torchtitan runs MLA (the
    # h-wide gather of the replicated attention input), and above none
    lay = Layout(tp=2, pp=1, dp=8, ep=8, etp=1, sequence_parallel=True)
    kind = DSV3.layer_kinds[0]
    mega = job("deepseek-v3", "h100-sxm-80gb", 16, 4096, 64)
    titan = job("deepseek-v3", "h100-sxm-80gb", 16, 4096, 64, framework="torchtitan")
    assert layer_tp.latents_gathered(mega, kind) and not layer_tp.latents_gathered(titan, kind)
    gpu = layer_time.gpu_of(mega)
    m = layer_time.layer_time(mega, lay, gpu, kind)
    t = layer_time.layer_time(titan, lay, layer_time.gpu_of(titan), kind)
    assert 0 < m.tp_traffic < t.tp_traffic
