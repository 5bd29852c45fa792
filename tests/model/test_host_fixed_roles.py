"""`host_memory.fixed_bytes` asks `rank_fixed_bytes` once per role of rank (first, last stage's,
MTP rank, its chunks' layer kinds in order) and takes the busiest, as the maximum over every rank
would.

Oracle: the brute force, `rank_fixed_bytes` of every pipeline rank and the first of the largest
sums (Python's `max` with `key=sum`), bit for bit, for each rounding, on DeepSeek-V3 (its first
three layers dense, MTP layers on the last rank) and Qwen3 30B-A3B with part of its optimizer
offloaded (its optimizer's pinned blocks as well as the checkpoint staging), and Nemotron 3 Super
(Mamba, attention and MoE layers: ranks whose chunks count the same kinds in another order, which
the exact walk tells apart), over even and uneven splits, interleaved or not, and ZeRO 0 and 1."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory
from planner.model.host_pinned import Rounding
from planner.model.job_memo import JobMemo

DSV3 = job("deepseek-v3", "h800-sxm-80gb", 256, 4096, 1024)
QWEN = replace(job("qwen3-30b-a3b", "h100-sxm-80gb", 64, 4096, 256), optimizer_offload_fraction=0.5)
NEMOTRON = job("nemotron3-super-120b-a12b", "h100-sxm-80gb", 64, 8192, 1024)

CASES: list[tuple[Job, Layout]] = [
    (DSV3, Layout(tp=2, pp=4, dp=32, ep=8, pipeline_layers=(16, 15, 15, 15))),
    (DSV3, Layout(tp=1, pp=8, dp=32, ep=16, pipeline_layers=(7, 8, 8, 8, 8, 8, 8, 6))),
    (DSV3, Layout(tp=2, pp=2, dp=64, ep=8, vpp=2)),
    (QWEN, Layout(tp=1, pp=4, dp=16, ep=8)),
    (QWEN, Layout(tp=2, pp=8, dp=4, ep=4, vpp=3)),
    (QWEN, Layout(tp=1, pp=16, dp=4, ep=4, pipeline_layers=(2,) + (3,) * 14 + (4,))),
    (NEMOTRON, Layout(tp=1, pp=8, dp=8, ep=8)),
    (NEMOTRON, Layout(tp=2, pp=4, dp=8, ep=8, vpp=2)),
]
ROUNDINGS: tuple[Rounding, ...] = ("exact", "floor", "ceiling")


def _brute(j: Job, lay: Layout, rounding: Rounding, only: set[int] | None = None) -> float:
    ranks = enumerate(lay.chunk_layers(j.arch.num_layers))
    each = [
        host_memory.rank_fixed_bytes(j, lay, r, c, rounding)
        for r, c in ranks
        if only is None or r in only
    ]
    return sum(max(each, key=sum))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_busiest_rank_is_the_brute_force(case: int) -> None:
    """Over all the ranks, and over every pair of them (`only`): a later rank of a pair that
    the roles took for the earlier one's would be missed where its bytes are more."""
    j, shape = CASES[case]
    for zero in (0, 1):
        lay = shape.with_(zero_stage=zero)
        pairs = [{a, b} for a in range(lay.pp) for b in range(a + 1, lay.pp)]
        for rounding in ROUNDINGS:
            for only in [None, *pairs]:
                JobMemo.forget_all()
                got = host_memory.fixed_bytes(j, lay, only, rounding)
                JobMemo.forget_all()
                assert got == _brute(j, lay, rounding, only), (lay.describe(), rounding, only)
                assert got > 0  # the job stages its checkpoints: something to compare


def test_each_role_is_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3 pp 8: rank 0 (the embedding, dense layers), ranks 1-6 (eight MoE layers each,
    one role), rank 7 (the output and MTP layers): three questions, not eight."""
    asked: list[int] = []
    real = host_memory.rank_fixed_bytes

    def counted(j: Job, lay: Layout, rank: int, *rest: object) -> tuple[float, float]:
        asked.append(rank)
        return real(j, lay, rank, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(host_memory, "rank_fixed_bytes", counted)
    lay = CASES[1][1].with_(zero_stage=1)
    host_memory.fixed_bytes(DSV3, lay, rounding="ceiling")
    assert asked == [0, 1, 7]
