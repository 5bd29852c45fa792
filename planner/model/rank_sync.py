"""One pipeline rank's data-parallel sync and optimizer step, as `planner.model.cost.estimate`
adds them after the pipeline (`stage_sync`; the pieces are `planner.model.stage_sync`'s), with
what reads no window remembered (`_SETUPS`).

Of a rank's sync only the part hidden under its forward and backward windows reads them (and
the micro-batches, the schedule's micro-batch group and vpp: `dp_sync.shown`); the rank's
parameters, the collectives' seconds (`dp_sync.traffic`), the embedding's gradient all-reduce
and the optimizer step read the degrees, the split, the ZeRO stage and the DDP settings, not
the micro-batch size, the memory savers, the token dispatcher or the overlaps. The search times
each ZeRO stage of a structure's split at several micro-batch sizes, token dispatchers and
overlaps, and a rank of each: that part is computed once for all of them.
"""

from __future__ import annotations

from dataclasses import fields
from operator import itemgetter

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_buckets, dp_instances, dp_sync, fsdp2, muon_time, pools
from planner.model.embedding_grads import sync_time as embedding_sync_time
from planner.model.interleaved_sync import RankChunks
from planner.model.job_memo import JobMemo
from planner.model.layer_time import Layer
from planner.model.rank_mix import rank_layers
from planner.model.schedule import Chunks
from planner.model.stage_params import chunk_params, quantised_params, stage_params
from planner.model.stage_sync import gather_zero_time, gathered_param_bytes, optimizer_time
from planner.model.stage_time import LayoutTimes

SYNC_UNREAD = frozenset(
    {
        "micro_batch_size",
        "microbatch_group_size_per_vp_stage",
        "recompute",
        "recompute_modules",
        "recompute_method",
        "recompute_num_layers",
        "recompute_every",
        "cpu_offloading_num_layers",
        "offload_modules",
        "activation_offload_fraction",
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "moe_flex_dispatcher_num_sms",
        "tp_comm_overlap",
        "ep_comm_overlap",
    }
)
"""The layout fields `_setup` does not read: the micro-batch size and group (only the windows
and `dp_sync.shown`'s chunk launches read them, and `fp32.pipeline_message_bytes`, which no
sync reads), the memory savers (a rank's decoder blocks, the FSDP units, are the same count
under every recompute: `rank_mix.rank_mix` splits them between recomputed and plain layers),
the token dispatcher (`comms.ep_sm_share`, the all-to-all's, is no DP collective's) and the TP
and EP overlaps. `stage_params` keys on the degrees, pp, the output and MTP ranks and the
rank's chunks; `gathered_param_bytes`, `optimizer_time` and `gather_zero_time` read the ZeRO
stage, the data-parallel sizes and the chunks' quantised weights; `dp_sync.traffic` the groups,
the ZeRO stage, the DDP bucket settings and vpp; `embedding_grads.sync_time` pp, the pipeline
stride and the ZeRO stage; `muon_time.step_time` the degrees and the ZeRO stage
(tests/model/test_rank_sync_memo.py: the same figures computed afresh for layouts that differ
in every one of these fields)."""

_SYNC_READ = itemgetter(*(f.name for f in fields(Layout) if f.name not in SYNC_UNREAD))

_Setup = tuple[
    float, float, tuple[float, float], RankChunks | None, dp_sync.Traffic | None, float, float
]
_SETUPS: JobMemo[tuple[object, ...], tuple[tuple[object, ...], _Setup]] = JobMemo()
"""`_setup` per job, the layout's fields but `SYNC_UNREAD`, the rank and its decoder blocks,
with the collectives' constants it read (`comms.constants`: a value computed under others is
computed again)."""


def stage_sync(
    job: Job,
    lay: Layout,
    rank: int,
    chunks: Chunks,
    mix: list[tuple[Layer, int]],
    t: LayoutTimes,
    groups: tuple[comms.Group, comms.Group],
    share: float,
    fwd: float,
    bwd: float,
) -> tuple[float, float, float]:
    """(exposed, hidden, optimizer) seconds per step of pipeline rank `rank` (its decoder layers
    `chunks`, its `mix` from `rank_mix.rank_mix`): its data-parallel traffic over `groups`
    (`dp_sync.data_parallel_groups`) beyond the forward and backward windows `fwd` and `bwd`, the
    exposed part also holding `share` (`comms.sm_share`) of the hidden part's SMs, and its
    optimizer step."""
    layers = sum(n for k, n in mix if k is not t.mtp_proj)  # decoder blocks: FSDP units
    memo = _SETUPS.of(job)
    key = (*_SYNC_READ(lay.__dict__), rank, layers)
    consts = comms.constants()
    hit = memo.get(key)
    if hit is None or hit[0] != consts:
        hit = memo[key] = consts, _setup(job, lay, rank, chunks, t, groups, layers)
    dense, expert, p_bytes, own, made, emb, o = hit[1]
    if fsdp2_sync(job, lay):  # FSDP2's gathers and reduce-scatters (torchtitan, Megatron's)
        fp8 = quantised_params(job, lay, rank, chunks)[0]
        out = fsdp2.output_share(job, lay, rank)
        e, hid = fsdp2.data_parallel_time(
            job, lay, dense, expert, fwd, bwd, t.m, layers, fp8, output=out
        )
    elif made is not None:  # `pools.data_parallel`'s one pool: `dp_sync.data_parallel`
        e, hid = dp_sync.shown(made, lay, fwd, bwd, t.m, layers, own)
    elif dp_instances.applies(job, lay):  # over --num-distributed-optimizer-instances
        e, hid = dp_instances.data_parallel(
            job, lay, dense, expert, fwd, bwd, t.m, layers, p_bytes, own
        )
    else:
        e, hid = pools.data_parallel(
            job, groups, lay, dense, expert, fwd, bwd, t.m, layers, p_bytes, own
        )
    # the hidden part holds comms.sm_share of the SMs of the compute it runs under; then, after
    # the DP sync, the first and last ranks' word-embedding gradient all-reduce
    e += share * hid + emb
    return e, hid, o


def _setup(
    job: Job,
    lay: Layout,
    rank: int,
    chunks: Chunks,
    t: LayoutTimes,
    groups: tuple[comms.Group, comms.Group],
    layers: int,
) -> _Setup:
    """What `stage_sync` reads of the rank beyond its windows: its (dense, expert) parameters,
    the bytes per gathered parameter and its chunks' shares (Megatron), the collectives
    (`dp_sync.traffic`, where `pools.data_parallel` takes `dp_sync.data_parallel`'s path: one
    pool, not over optimizer instances; else None), the embedding's gradient all-reduce and
    the optimizer step."""
    dense, expert = stage_params(job, lay, rank, chunks)
    if job.frozen_model and lay.zero_stage < 3:  # no gradient, no update to gather
        dense = expert = 0.0
    p_bytes, own, made = (0.0, 0.0), None, None
    if not fsdp2_sync(job, lay):
        p_bytes = gathered_param_bytes(job, lay, chunks, dense, expert)
        # interleaved: each model chunk's share of the sync is its parameters'
        own = RankChunks(rank, chunk_params(job, lay, rank, chunks)) if lay.vpp > 1 else None
        one_pool = lay.dp_pools <= 1 or job.between_pools is None
        if one_pool and not dp_instances.applies(job, lay):
            grads = dp_buckets.reduced_bytes(job, lay)
            made = dp_sync.traffic(groups, lay, dense, expert, grads, layers, p_bytes, own)
    emb = embedding_sync_time(job, lay, rank)
    o = optimizer_time(job, lay, dense, expert, t.gpu)
    o += gather_zero_time(job, lay, rank, chunks, t.gpu)  # MXFP8's gather buffer, zeroed again
    if job.optimizer == "muon":  # the stage's matrices' Newton-Schulz iterations
        counts = rank_layers(job, lay, rank, chunks, t)[0]
        o += muon_time.step_time(job, lay, counts, t.gpu)
    return dense, expert, p_bytes, own, made, emb, o


def fsdp2_sync(job: Job, lay: Layout) -> bool:
    """Whether the rank's data-parallel traffic is PyTorch FSDP2's (`fsdp2.data_parallel_time`):
    torchtitan's, and Megatron-LM's --use-torch-fsdp2 (`Layout.use_torch_fsdp2`): per
    micro-batch, as no_sync does nothing there (Megatron-LM d98e8a64
    data_parallel_base.py:24-32), each unit gathered before its forward and, resharded after
    it, again before its backward, its gradient reduce-scattered after it in the parameters'
    dtype (`fsdp2.dtypes`); nothing gathered after the optimizer step."""
    return job.framework == "torchtitan" or lay.use_torch_fsdp2
