"""The pinned blocks' ceiling (`host_pinned.rank_rounding(ceiling=True)`) from each chunk's
parameter count and elements alone (`host_pinned.chunk_totals`), not the lists of sizes: the
same figures, bit for bit, as `rounding_ceiling` of each chunk's `chunk_sizes` list weighted by
its elements (the oracle, written out below), on dense, MoE, MTP and hybrid models, every rank
and chunk of pipelined, interleaved and V-shaped splits."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_pinned
from planner.model.job_memo import JobMemo
from planner.model.schedule import Chunks

CASES = [
    (
        job("llama3.1-8b", "h100-sxm-80gb", 64, 8192, 64),
        [
            Layout(tp=8, pp=1, dp=8, zero_stage=1),
            Layout(tp=2, pp=4, dp=8, vpp=2, zero_stage=1),
            Layout(tp=1, pp=2, dp=32, zero_stage=0, overlap_grad_reduce=True),
        ],
    ),
    (
        job("deepseek-v3", "h800-sxm-80gb", 256, 4096, 512),
        [
            Layout(tp=1, pp=8, dp=32, ep=32, zero_stage=1),
            Layout(tp=2, pp=4, dp=32, ep=16, etp=1, vpp=2, zero_stage=1),
            Layout(tp=4, pp=16, dp=4, ep=8, zero_stage=1, overlap_grad_reduce=True),
        ],
    ),
    (
        job("nemotron3-super-120b-a12b", "h100-sxm-80gb", 64, 8192, 64),
        [Layout(tp=4, pp=2, dp=8, ep=8, zero_stage=1), Layout(tp=2, pp=4, dp=8, zero_stage=1)],
    ),
]


def _oracle(
    j: Job, lay: Layout, rank: int, chunks: Chunks, dps: tuple[int, int]
) -> tuple[float, float]:
    """`rank_rounding(ceiling=True)` as it read the lists: each chunk's rounding_ceiling of its
    sizes times their sum, over the sums."""
    weighted, totals = [0.0, 0.0], [0.0, 0.0]
    for i in range(len(chunks)):
        size = host_pinned.bucket_size(j, lay, rank, i)
        for k, sizes in enumerate(host_pinned.chunk_sizes(j, lay, rank, i, chunks)):
            weighted[k] += host_pinned.rounding_ceiling(sizes, size, dps[k]) * sum(sizes)
            totals[k] += sum(sizes)
    d, e = (w / t if t > 0 else 1.0 for w, t in zip(weighted, totals, strict=True))
    return d, e


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_ceiling_from_the_totals_is_the_lists_own(case: int) -> None:
    j, lays = CASES[case]
    for lay in lays:
        for v in (False, True) if lay.pp > 1 and lay.vpp == 2 else (False,):
            lay_v = lay.with_(v_stages=v) if v else lay
            ranks = lay_v.chunk_layers(j.arch.num_layers)
            for rank, chunks in enumerate(ranks):
                for i in range(len(chunks)):
                    dense, expert = host_pinned.chunk_sizes(j, lay_v, rank, i, chunks)
                    want = ((sum(dense), len(dense)), (sum(expert), len(expert)))
                    assert host_pinned.chunk_totals(j, lay_v, rank, i, chunks) == want
                for whole in (False, True):
                    dps = (1, 1) if whole else (lay_v.dense_dp, max(lay_v.expert_dp, 1))
                    JobMemo.forget_all()
                    got = host_pinned.rank_rounding(j, lay_v, rank, chunks, whole, ceiling=True)
                    assert got == _oracle(j, lay_v, rank, chunks, dps), (lay_v.describe(), rank)
