"""`rank_sync.stage_sync` remembers what of a rank's sync reads no window (`rank_sync._SETUPS`,
keyed on every layout field but `rank_sync.SYNC_UNREAD`): each answer against the sync composed
afresh from its pieces (the oracle: `stage_params`, `stage_sync.gathered_param_bytes`,
`pools.data_parallel` or `dp_instances.data_parallel`, `embedding_grads.sync_time`,
`stage_sync.optimizer_time` and `gather_zero_time`, nothing remembered), bit for bit, after the
memo was filled by every layout of the problem at ZeRO 0, 1 and (without pipelining) 3: a key
that left out something its value reads would hand one layout another's figures."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, dp_instances, dp_sync, pools, rank_sync
from planner.model.embedding_grads import sync_time
from planner.model.interleaved_sync import RankChunks
from planner.model.job_memo import JobMemo
from planner.model.layer_time import Layer
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.schedule import Chunks
from planner.model.stage_params import chunk_params, stage_params
from planner.model.stage_sync import gather_zero_time, gathered_param_bytes, optimizer_time
from planner.model.stage_time import LayoutTimes, layout_times
from tests.search.brute_force import MEMO_JOBS, memo_problem


@dataclass(frozen=True)
class Call:
    """`stage_sync`'s arguments for one rank."""

    job: Job
    lay: Layout
    rank: int
    chunks: Chunks
    mix: list[tuple[Layer, int]]
    t: LayoutTimes
    groups: tuple[comms.Group, comms.Group]
    share: float
    fwd: float
    bwd: float

    def remembered(self) -> tuple[float, float, float]:
        c = self
        args = (c.job, c.lay, c.rank, c.chunks, c.mix, c.t, c.groups, c.share, c.fwd, c.bwd)
        return rank_sync.stage_sync(*args)

    def composed(self) -> tuple[float, float, float]:
        """The oracle: a Megatron rank's sync from its pieces, each computed afresh."""
        job, lay, rank, chunks = self.job, self.lay, self.rank, self.chunks
        dense, expert = stage_params(job, lay, rank, chunks)
        layers = sum(n for k, n in self.mix if k is not self.t.mtp_proj)
        p_bytes = gathered_param_bytes(job, lay, chunks, dense, expert)
        own = RankChunks(rank, chunk_params(job, lay, rank, chunks)) if lay.vpp > 1 else None
        w = (self.fwd, self.bwd, self.t.m, layers, p_bytes, own)
        if dp_instances.applies(job, lay):
            e, hid = dp_instances.data_parallel(job, lay, dense, expert, *w)
        else:
            e, hid = pools.data_parallel(job, self.groups, lay, dense, expert, *w)
        e += self.share * hid + sync_time(job, lay, rank)
        o = optimizer_time(job, lay, dense, expert, self.t.gpu)
        o += gather_zero_time(job, lay, rank, chunks, self.t.gpu)
        return e, hid, o


def calls(job: Job, lay: Layout) -> list[Call]:
    """One `Call` per rank of the layout, its windows the rank's own forward and backward (as
    `cost.estimate` passes them before the other links' waits)."""
    t = layout_times(job, lay)
    groups = dp_sync.data_parallel_groups(job.cluster, lay)
    share = comms.sm_share(job.cluster, job.gemm_sm_margin)
    out: list[Call] = []
    for rank, chunks in enumerate(lay.chunk_layers(job.arch.num_layers)):
        mix, _ = rank_mix(job, lay, rank, chunks, t)
        _, fwd, bwd, *_ = mix_sums(mix)
        out.append(Call(job, lay, rank, chunks, mix, t, groups, share, fwd, bwd))
    return out


def twins(lay: Layout) -> list[Layout]:
    """The layout after layouts that differ from it in `SYNC_UNREAD` fields alone, as the
    search's bases and rungs of one split do (another micro-batch size and group, token
    dispatcher, TP and EP overlap, memory saver): each shares its `_SETUPS` entries."""
    other = "flex" if lay.moe_token_dispatcher_type == "alltoall" else "alltoall"
    return [
        lay.with_(micro_batch_size=2 * lay.micro_batch_size, microbatch_group_size_per_vp_stage=7),
        lay.with_(moe_token_dispatcher_type=other, moe_flex_dispatcher_backend="hybridep"),
        lay.with_(tp_comm_overlap=not lay.tp_comm_overlap, ep_comm_overlap=not lay.ep_comm_overlap),
        lay.with_(recompute="full", recompute_method="block", recompute_num_layers=1),
        lay.with_(recompute="selective", offload_modules=("core_attn",)),
        lay,
    ]


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_rank_sync_from_the_memo_is_composed_afresh(name: str) -> None:
    job, lays = memo_problem(name)
    zeros = [(lay, z) for lay in lays[::5] for z in (0, 1, 3) if z < 2 or lay.pp == lay.cp == 1]
    asked = [c for lay, z in zeros for x in twins(lay.with_(zero_stage=z)) for c in calls(job, x)]
    JobMemo.forget_all()
    warm = [c.remembered() for c in asked]
    assert len(rank_sync._SETUPS.of(job)) <= len(asked) / 6  # each twin's shared
    for c, got in zip(asked, warm, strict=True):
        assert got == c.composed(), (c.lay.describe(), c.rank)
    JobMemo.forget_all()


def test_a_second_micro_batch_size_reuses_the_collectives(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step at a second micro-batch size, token dispatcher and overlap of the same split and
    ZeRO stage times no DP collective again (each estimate did, before `_SETUPS`)."""
    job, lays = memo_problem("deepseek-v3-256xh800")
    lay = next(x for x in lays if x.pp > 1 and x.zero_stage == 1 and x.micro_batch_size == 1)
    counted = 0
    real = dp_sync._per_bucket

    def per_bucket(*args: object) -> float:
        nonlocal counted
        counted += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(dp_sync, "_per_bucket", per_bucket)
    JobMemo.forget_all()
    cost.estimate(job, lay)
    first = counted
    assert first > 0
    other = lay.with_(micro_batch_size=2, ep_comm_overlap=not lay.ep_comm_overlap)
    cost.estimate(job, other)
    assert counted == first
    JobMemo.forget_all()
