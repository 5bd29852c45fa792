"""Lines in a pipeline rank's count of decoder layers that its tail is never below: the tail is
what `planner.model.cost.estimate` adds after the pipeline for the rank (`Performance.tails`:
`rank_sync.stage_sync`'s exposed sync e plus optimizer step o, the step taking the largest), and
the pooled search's bounds (`planner.search.pool_tails`) add them to the pipeline's.

Optimizer: o = `stage_sync.optimizer_time` plus MXFP8's second zeroing of its gather buffer and
Muon's Newton-Schulz iterations (each >= 0), and optimizer_time >= rd x dense + re x expert
(`stage_sync.optimizer_rates`: memory-bound passes over the parameters; a CPU-offloaded share's
host step is in a max with the GPU's update), with (dense, expert) the rank's `stage_params`, 0
for a frozen model below ZeRO 3 (nothing is updated, `rank_sync.stage_sync`).

Sync: e = x + share h + the word embedding's all-reduce (>= 0), x what the data-parallel
traffic shows beyond its windows and h what hides (`rank_sync.stage_sync`), both >= 0: e >= 0
always. Where it runs as Megatron's DDP buckets (`dp_sync.data_parallel`: ZeRO 0 / 1, one model
chunk, no optimizer instances, no replicas across pools), a tier t of traffic R_t shows
x_t >= R_t - (w_f + w_b) of it (`dp_sync.windowed`: max(red - bwd + bwd frac, last bucket) >=
red - bwd, red itself where the window is off; the gathers alike) and hides h_t = R_t - x_t, so
e >= (1 - share) x_t + share R_t >= R_t - k (w_f + w_b), k = 1 - share (`comms.sm_share`). The
windows (`stage_sync.sync_windows`) are the stage's forward and backward (c + rec:
`rank_mix.mix_sums`, the output layer, a vision encoder, a deferred drain added to both
alike) plus at most its exposed TP, CP, EP and offload seconds, all in the rank's stage time t:
e >= R_t - k t. R_t is at least each bucket's collectives' calls and bandwidth terms
(`_sync_rates`), linear in the parameters.

Both are linear in the rank's parameters, its decoder layers' (`decoder_params`: each layer's by
its kind, so they add up layer by layer) and its edge's (`edge_params`: the embedding on rank 0,
the output layer, final norm and MTP layers on theirs). So at y decoder layers, whichever they
are, the tail is at least o0 + o1 y, and at least o0 + o1 y + s0 + s1 y - k t (`tail_lines`), each
slope the least over the model's decoder layer kinds."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import dp_buckets, dp_instances, dp_sync
from planner.model.comms import collective_floor, sm_share
from planner.model.fp32 import value_bytes
from planner.model.job_memo import ModelMemo
from planner.model.layer_time import gpu_of
from planner.model.nccl_shares import ALL_REDUCE
from planner.model.shard import BF16
from planner.model.stage_params import decoder_params, edge_params
from planner.model.stage_sync import gathers_in_grad_buffer, optimizer_rates

TailLine = tuple[float, float, float, float, float]
"""A rank's (o0, o1, s0, s1, k), seconds but k: its tail at y decoder layers and stage time t
(per micro-batch) is at least o0 + o1 y and o0 + o1 y + s0 + s1 y - k t, 0 <= k <= 1."""


def tail_lines(job: Job, lay: Layout) -> tuple[TailLine, ...]:
    """Each pipeline rank's tail lines (module docstring) on the job's GPU and links. `lay`
    places the embedding, the output layer and the MTP layers (`edge_params`:
    `Layout.output_rank`, `Layout.mtp_rank`) as the splits the lines bound do; the layers'
    count and kinds are free."""
    if job.frozen_model and lay.zero_stage < 3:  # `rank_sync.stage_sync`: no update, no sync
        return ((0.0, 0.0, 0.0, 0.0, 0.0),) * lay.pp
    rates = (optimizer_rates(job, lay, gpu_of(job)), _sync_rates(job, lay))
    k = 1.0 - sm_share(job.cluster, job.gemm_sm_margin)
    firsts = _FIRSTS.get(job.arch, 0, lambda: _first_of_each_kind(job.arch.layer_kinds))
    layers = [decoder_params(job, lay, (range(i, i + 1),)) for i in firsts]
    o1, s1 = (min(rd * d + re * e for d, e in layers) for rd, re in rates)
    out = []
    for rank in range(lay.pp):
        first, (last_d, last_e) = edge_params(job, lay, rank)
        o0, s0 = (rd * (first + last_d) + re * last_e for rd, re in rates)
        out.append((o0, o1, s0, s1, k))
    return tuple(out)


_FIRSTS: ModelMemo[int, tuple[int, ...]] = ModelMemo()
"""`_first_of_each_kind` per model."""


def _first_of_each_kind(kinds: Sequence[object]) -> tuple[int, ...]:
    """The first decoder layer of each kind among `kinds` (`ModelArch.layer_kinds`)."""
    return tuple({k: i for i, k in reversed(tuple(enumerate(kinds)))}.values())


def _sync_rates(job: Job, lay: Layout) -> tuple[float, float]:
    """Seconds per dense and per expert parameter of one tier's DDP bucket traffic (module
    docstring): the dense group's tier (the expert group's where the dense group is one rank),
    each kind whose group is on it; (0, 0) where the sync does not run as those buckets. Each
    bucket's collectives pay their calls (`comms.collective_floor`), and a kind of n parameters
    makes max(1, ceil(n / B)) >= n / B buckets of Megatron's default B (`dp_sync.
    default_bucket`); a bucket size the layout sets (`dp_buckets.explicit_bucket`, which reads the
    stage's parameters) leaves the calls out."""
    if (
        job.framework != "megatron"
        or lay.zero_stage > 1
        or lay.vpp > 1
        or lay.dp_pools > 1
        or dp_instances.applies(job, lay)
    ):
        return 0.0, 0.0
    groups = dp_sync.data_parallel_groups(job.cluster, lay)
    tier = (groups[0] if groups[0].size > 1 else groups[1]).tier_name
    default = lay.ddp_bucket_size is None and lay.ddp_num_buckets is None
    rates = []
    for grp in groups:
        if lay.zero_stage == 0:  # each bucket all-reduced
            per_byte, call = collective_floor(grp, ALL_REDUCE)
            per, calls = job.grad_bytes * per_byte, call
        else:  # reduce-scattered, and the parameters gathered back
            per_byte, call = collective_floor(grp)
            per, calls = (job.grad_bytes + _least_gather_bytes(job, lay)) * per_byte, 2 * call
        per += calls / dp_buckets.default_bucket(grp.size) if default else 0.0
        rates.append(per if grp.tier_name == tier else 0.0)
    return rates[0], rates[1]


def _least_gather_bytes(job: Job, lay: Layout) -> float:
    """The fewest bytes per parameter of the distributed optimizer's all-gather at ZeRO 1
    (`stage_sync.gathered_param_bytes`): bf16 through MXFP8's gradient buffer; with the FP8 /
    NVFP4 param gathers, a quantised weight's 1 or 1/2 (a stage all of whose parameters were
    quantised: its mean is no less); else the parameters' dtype (`fp32.value_bytes`)."""
    if gathers_in_grad_buffer(job, lay):
        return BF16
    if job.low_precision_params and lay.zero_stage in (1, 2):
        return 0.5 if job.precision == "fp4" else 1.0
    return value_bytes(job)
