"""Each MTP depth's projection (Megatron's eh_proj) in the MTP rank's time.

Oracle: Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py
(`_concat_embeddings`: the normed embedding and hidden state concatenated to 2h, a column-parallel
eh_proj to h, its output gathered over TP's last dimension, then scattered to the sequence shard;
the spec's `eh_proj=column_parallel_linear_impl`); hand arithmetic in comments.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import comms, layer_time, output_time
from planner.model.gemm import gemm_time
from planner.model.rank_mix import rank_mix
from planner.model.stage_time import layout_times

LAY = Layout(tp=2, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True)


def test_projection_by_hand() -> None:
    # DeepSeek-V3 (h 7168) on 64 H100, tp 2 with SP, 4096 tokens: forward GEMM M 4096, K 14336,
    # N 3584; backward dgrad and wgrad; collectives: the output's gather of [4096, 7168], the
    # input's gather and re-gather and its gradient's reduce-scatter of [4096, 14336], and the
    # scatter's backward gather of [4096, 7168], in bf16
    j = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)
    gpu = layer_time.gpu_of(j)
    p = output_time.mtp_projection(j, LAY, gpu)
    fwd = gemm_time(4096, 14336, 3584, gpu.peak_linear, gpu.ridge, gpu.e_linear)
    grp = comms.place(j.cluster, 1, 2)
    wide, narrow = 4096 * 14336 * 2, 4096 * 7168 * 2
    comm = 2 * comms.all_gather(narrow, grp) + 2 * comms.all_gather(wide, grp)
    comm += comms.reduce_scatter(wide, grp)
    # and the depth's own embedding lookup's dense backward: V_padded / tp x h x 12 B at the
    # HBM rate (bf16 gradient written and read, fp32 main gradient read and written)
    lookup = 129280 // 2 * 7168 * 12 / gpu.hbm
    assert (p.fwd, p.bwd) == pytest.approx((fwd, 2 * fwd + lookup))
    assert p.tp == p.tp_traffic == p.tp_plain == pytest.approx(comm)
    # tp 1: the GEMM alone, whole
    one = output_time.mtp_projection(j, LAY.with_(tp=1, sequence_parallel=False), gpu)
    assert one.tp == 0 and one.fwd == pytest.approx(
        gemm_time(4096, 14336, 7168, gpu.peak_linear, gpu.ridge, gpu.e_linear)
    )


def test_only_the_mtp_rank_runs_it_once_per_depth() -> None:
    j = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)  # one MTP depth, on the last rank
    t = layout_times(j, LAY)
    assert t.mtp_rank == 3 and t.mtp_proj is not None
    for rank, chunks in enumerate(LAY.chunk_layers(j.arch.num_layers)):
        mix, _ = rank_mix(j, LAY, rank, chunks, t)
        projections = [n for k, n in mix if k is t.mtp_proj]
        assert projections == ([1] if rank == 3 else [])
    # a model without MTP has none
    assert layout_times(job("llama3.1-70b", "h100-sxm-80gb", 64, 4096, 64), LAY).mtp_proj is None
