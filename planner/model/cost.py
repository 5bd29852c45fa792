"""Step time of a layout: compute, communication, pipeline bubble, optimizer.

`estimate(job, layout)` is pure and cheap (one pass over two layer types and pp stages); the search
calls it thousands of times, and bounds it from below by `compute_floor`. Every time is per GPU,
per step, in seconds. Each stage's layers and their times come from `planner.model.stage_time`.

Communication (planner.model.comms, each group on the tier it spans in Megatron's tp-cp-ep-dp-pp
order): TP two all-reduces (SP: all-gather + reduce-scatter) per layer per forward and backward (SP
adds Megatron's backward re-gather), the forward ones exposed, the column-parallel backward ones
under their dgrad / wgrad GEMMs (`layer_tp.tensor_parallel_layer`; all exposed when the training
code's collectives block), and with `tp_comm_overlap` each collective pipelined with or beside its
own GEMM as Transformer Engine's userbuffers run it (`tp_overlap.layer_traffic`); CP's K/V ring
hops, hidden behind the attention kernels; EP dispatch and combine per token dispatcher and routing
limit (`dispatch.moe_dispatch`: NCCL all-to-all of t x top_k copies, DeepEP / HybridEP once per node
and GPU reached, all-gather), exposed, or with `ep_comm_overlap` hidden under the merged other
micro-batch's compute where the schedule pairs them, taking `comms.sm_share` of the SMs from it
(`stage_time.ep_exposed`); CPU offloading's host transfers beyond the next layer's forward and
backward, fine-grained offloading's reloads beyond the copies out and the backward of the layer
after (`stage_offload.offload_exposed`); FP8 weights quantised once per step (in compute); PP one
activation send forward and one gradient send backward per micro-batch (t x h values, /tp with SP:
bf16, fp32 in fp32 training, `fp32.value_bytes`), on the critical path in 1F1B (blocking sends;
one exchange a micro-batch on the first and last stages, two between: `_exchanges`; with the MTP
layers on their own stage (1 + D) x as much from it to the loss stage, each exchange after a
shape swap: `mtp_hops`);
when interleaved the sends overlap compute and the fill and drain expose up to one hop per chunk
boundary, 2 (pp vpp - 1), and the slowest rank's waits on its forward sends past pp micro-batches
(`schedule.interleaved_p2p_exposed` at the schedule's micro-batch group, torch's round under
torchtitan), or without that overlap every chunk's blocking exchange (`blocking_p2p`); torch's
V schedules and its looped ones below pp micro-batches read them off torch's order (all:
`pipeline_p2p`); DP gradient reduce-scatter / all-reduce and parameter
all-gather (per DDP bucket; ZeRO-3: per layer and micro-batch, rings over the whole group,
prefetched one layer ahead), exposed beyond their overlap windows (`dp_sync.data_parallel`; the
gradients' window is the last micro-batch's backward; under the interleaved schedule each
chunk's buckets launch whole during the cooldown, each chunk's share its parameters', and what
outlasts it is exposed, `interleaved_sync.chunk_exposed`; where the links are
slower than the compute, also the first bucket's share of it, before which nothing could be
sent: `dp_sync.windowed`; each window also holds the stage's waits on the exposed traffic of
links other than DP's, `stage_sync.other_link_seconds`, less the seconds DP's own link carries
other hidden traffic, `stage_sync.dp_link_hidden`). Hidden
TP, EP and DP traffic still holds `comms.sm_share` of the SMs: that share of it counts as exposed
(under TP overlap's userbuffers, their SM margin on the GEMMs they run beside instead). On GPUs
without NVLink every transfer shares the GPU's one PCIe link: the step is at least that link's
busy time (`planner.model.shared_link`; the excess is `link_shared`).

Pipeline (planner.model.schedule): T = m x max_r t_r + (sum_r t_r - max_r t_r) / vpp with t_r each
stage's time per micro-batch (compute + exposed TP/CP/EP/PP traffic); the last stage also runs the
output layer and loss, less the weight gradients Megatron's --defer-embedding-wgrad-compute moves
to the flush (`output_time.deferred_wgrad`), which show in `bubble` where they outlast the other
stages' cooldown (`schedule.flush_exposed`; the search never sets the deferral and its floors
count the output layer whole). The breakdown reports the slowest stage; `bubble` is the second
term (torchtitan's schedules: `schedule.schedule_bubble`, some from torch's own order). The DP
traffic and optimizer of the stage where they take longest are added after the pipeline.

Optimizer and DP sync: `planner.model.stage_sync` (the stage where the two take longest, after the
pipeline; Muon's Newton-Schulz iterations in `planner.model.muon_time`).
Other: `step_overhead_s` per step (data loading, logging, launch latencies), on the job's host,
with the weight-hash check's share (`planner.model.weight_hash`).

Calibration: the five fitted constants live in planner/model/layer_time.py; everything here is a
documented physical or measured constant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    comms,
    dp_sync,
    flops,
    host,
    pools,
    rank_sync,
    shared_link,
    stage_sync,
    t5,
    titan_accumulation,
    weight_hash,
    wgrad_accumulation,
)
from planner.model.fp32 import pipeline_message_bytes
from planner.model.interleaved_sync import chunk_counts
from planner.model.job_memo import ModelMemo
from planner.model.mtp_hops import Hops, standalone_hops
from planner.model.output_time import deferred_wgrad
from planner.model.param_tensors import max_rank_tensors
from planner.model.performance import Performance, StepBreakdown, peak_label
from planner.model.pipeline_p2p import interleaved_exposed
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.schedule import (
    flush_exposed,
    schedule_bubble,
    schedule_name,
)
from planner.model.stage_offload import offload_exposed, offload_one_way
from planner.model.stage_time import a2a_floor, ep_exposed, layout_times

STEP_OVERHEAD_S = 0.01
"""Per-step fixed host time on the reference host (`host.HOST_CPU_SLOWDOWN`): the data
loader's hand-off, the loss and gradient-norm all-reduces and their reads back to the host,
logging, the optimizer's launches. An estimate, not a fit (the functional tests, which would
fit it, all log gradient statistics too: GRAD_STATS_S)."""
GRAD_STATS_S = 1.33e-4
"""What `Job.log_grad_stats` adds per step and per parameter tensor of the busiest pipeline rank
(`param_tensors.max_rank_tensors`) on the reference host: Megatron's --log-num-zeros-in-grad
counts each gradient's zeros tensor by tensor (clip_grads.py count_zeros_fp32: a count_nonzero, a
subtraction, the running sum and the per-parameter checks in Python), --log-params-norm filters
the parameters one by one before its batched norm; both are all-reduced and read back. The value
is benchmarks/fit_host.py's per-step fit (16.7 ms) over the 148 tensors of the 12-layer GPT most
functional tests run, 4.5 operations at host.KERNEL_ISSUE_S. fit_host.py, refitting everything
with it per tensor, moves it to 1.75e-4 (and MLA_ISSUE up, MAMBA_ISSUE down), lowering its
objective but raising the median error (11.5% against 10.1% on the 302 runs): kept."""


def step_overhead_s(job: Job, lay: Layout | None = None) -> float:
    """The step's fixed host time on the job's host (`host.slowdown`): STEP_OVERHEAD_S and, with
    `Job.log_grad_stats`, GRAD_STATS_S per parameter tensor of the layout's busiest pipeline rank,
    and the weight-hash check's share of a step (`weight_hash.step_seconds`); without a layout,
    none of those: the least any layout pays, as the search's bounds need."""
    if lay is None:
        return STEP_OVERHEAD_S * host.slowdown(job)
    stats = GRAD_STATS_S * max_rank_tensors(job.arch, lay) if job.log_grad_stats else 0.0
    return (STEP_OVERHEAD_S + stats) * host.slowdown(job) + weight_hash.step_seconds(job, lay)


def compute_floor(job: Job, layout: Layout) -> float:
    """Compute plus exposed expert all-to-all of the slowest stage, per step: the part of
    `estimate`'s step time that no schedule, overlap or sharding choice removes (the search's
    lower bound; recompute and EP overlap as in the layout, the overlap taken as if every
    forward and backward were merged: its unmerged share grows as larger micro-batches leave fewer
    of them, and the bound holds at the structure's largest micro-batch; what the merged
    all-to-all hides still costs `comms.sm_share` of it, and recompute only lengthens the
    window by less than it adds). The first rank's own extra (`LayoutTimes.encoder`: a vision
    encoder, the word embedding's backward) is left out, as the bounds' floors per kind of rank
    leave it (`planner.search.bound.rank_floors`): a lower bound all the same."""
    t = layout_times(job, layout)
    m, out_layer = t.m, t.out
    share = comms.ep_sm_share(job.cluster, layout, job.gemm_sm_margin)
    worst = 0.0
    for rank, chunks in enumerate(layout.chunk_layers(job.arch.num_layers)):
        mix, heads = rank_mix(job, layout, rank, chunks, t)
        c = sum(n * (k.fwd + k.bwd) for k, n in mix)
        a2a, shared = sum(n * k.ep for k, n in mix), sum(n * k.ep_shared for k, n in mix)
        c += a2a_floor(layout, a2a, shared, c, share)
        worst = max(worst, c + heads * out_layer)
    return m * worst


def estimate(job: Job, layout: Layout) -> Performance:
    """Predicted step time and throughput of a layout that passed `planner.rules`."""
    if titan_accumulation.steps(job) > 1:  # torchtitan: k pipeline schedules a step
        return titan_accumulation.accumulate(job, layout, estimate)
    views = pools.replica_views(job, layout)  # data-parallel replicas across pools
    if views:
        return _replicas(job, layout, views)
    arch, lay, whole = job.arch, layout, job
    lt = layout_times(job, lay)
    m = lt.m

    # PP point-to-point per micro-batch: activations forward, gradients backward
    hop = size = 0.0
    jobs = pools.rank_jobs(job, lay)  # each rank's pool ((): one GPU kind)
    hops: tuple[tuple[float, float], ...] = ()
    if lay.pp > 1:
        size = pipeline_message_bytes(job, lay)
        at = _hops_at(job, lay, bool(jobs))
        every = at(size)
        hops, hop = every if jobs else (), max(max(h) for h in every)
        hops = standalone_hops(job, lay, size, at) or hops  # MTP on its own stage
    interleaved = lay.vpp > 1  # Megatron overlaps p2p with compute in the interleaved schedule
    blocking: list[float] = []  # unless told not to (`blocking_p2p`)
    exch = [0.0 if interleaved else _exchanges(lay.pp, r, hops, hop) for r in range(lay.pp)]

    dp_groups = dp_sync.data_parallel_groups(job.cluster, lay)
    # the links DP shares (`stage_sync.dp_links`), of one job, layout and groups for every rank
    # on one GPU kind: sorted once (with pools, per rank below)
    links = (False,) * 4 if jobs else stage_sync.dp_links(job, lay, dp_groups)
    share = comms.sm_share(job.cluster, job.gemm_sm_margin)
    ep_share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    stage_times: list[float] = []
    stages: list[tuple[float, float]] = []
    rows: list[tuple[float, ...]] = []
    dp_exp = dp_hid = opt = link_busy = 0.0  # link_busy: the busiest shared PCIe link's
    dp_seen: dict[tuple[object, ...], tuple[float, float, float]] = {}
    tails: list[float] = []
    drain = 0.0  # the last stage's deferred output-layer wgrads (output_time.deferred_wgrad)
    for rank, chunks in enumerate(lay.chunk_layers(arch.num_layers)):
        if jobs:  # the rank's pool: its GPU's rates, its own links (planner.model.pools)
            job, lt = jobs[rank], layout_times(jobs[rank], lay)
            dp_groups, share, ep_share = (
                dp_sync.data_parallel_groups(job.cluster, lay),
                comms.sm_share(job.cluster, job.gemm_sm_margin),
                comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin),
            )
            links = stage_sync.dp_links(job, lay, dp_groups)
        mix, heads = rank_mix(job, lay, rank, chunks, lt)
        c, fwd, bwd, rec, tp, tp_h, cp, cp_h, ep, ep_s = mix_sums(mix)
        ep_e, ep_h = ep_exposed(lay, rank, m, ep, c + rec, ep_share, ep_s)
        off = offload_exposed(job, lay, rank, chunks, lt)
        wcast = sum(n * k.weight_cast for k, n in mix)
        c += heads * lt.out
        fwd += heads * lt.out / 3
        bwd += 2 * heads * lt.out / 3
        if rank == lay.pp - 1:  # deferred output-layer wgrads leave its backwards for the flush
            drain = deferred_wgrad(job, lay, lt.gpu, m, heads)
            c, bwd = c - drain / m, bwd - drain / m
        acc = wgrad_accumulation.seconds(job, lay, rank, chunks, lt.gpu)  # unfused: DDP's adds
        c, bwd = c + acc, bwd + acc
        if rank == 0:  # a vision encoder's layers (planner.model.vision_time)
            vis = lt.encoder
            c, fwd, bwd, tp = c + vis.fwd + vis.bwd, fwd + vis.fwd, bwd + vis.bwd, tp + vis.tp
        stage_times.append(c + rec + tp + cp + ep_e + off + exch[rank])
        forward = stage_times[-1] * fwd / (fwd + bwd) if fwd + bwd > 0 else 0.0
        stages.append((forward, stage_times[-1] - forward))
        rows.append((c, rec, tp, tp_h, cp, cp_h, ep_e, ep_h, off, wcast))
        # DP traffic and optimizer; its windows:
        # the compute and the waits on other links' exposed traffic (the DP stream runs for
        # the stage's whole busy time, `stage_sync.other_link_seconds`) less what its own
        # link carries of other hidden traffic (`stage_sync.dp_link_hidden`)
        exposed = (tp, cp, ep_e, off)
        extra = stage_sync.window_extra(links, exposed, (tp_h, cp_h, ep_h))
        w_f, w_b = stage_sync.sync_windows(fwd, bwd, rec, extra)
        # ranks with the same layers, as counted in their mix (interleaved: chunk by chunk,
        # each chunk's sync its own), and role move the same bytes; a later rank of an
        # interleaved stage takes an earlier one's, whose shorter drain hides no more of it
        # (`interleaved_sync.chunk_sync`): the largest tail is still a rank's own
        split = chunk_counts(job.arch, chunks) if lay.vpp > 1 else ()
        key = (tuple(n for _, n in mix), heads, rank == 0, id(job), w_f, w_b, split)
        if key not in dp_seen:
            dp_seen[key] = rank_sync.stage_sync(
                job, lay, rank, chunks, mix, lt, dp_groups, share, w_f, w_b
            )
        e, hid, o = dp_seen[key]
        tails.append(e + o)
        if e + o >= dp_exp + opt:  # the stage where they take longest decides
            dp_exp, dp_hid, opt = e, hid, o
        if shared_link.applies(job.cluster):  # every transfer on one PCIe link, each way
            sends = 2 * lay.vpp * (max(hops[rank]) if hops else hop) if lay.pp > 1 else 0.0
            per_mb = sum(n * (k.tp_traffic + k.ep) for k, n in mix)
            per_mb += cp + cp_h + sends + offload_one_way(job, lay, chunks, lt, rank)
            per_mb += lt.encoder.tp if rank == 0 else 0.0
            dp_traffic = e + (1 - share) * hid  # e holds share x hid of the SMs, not traffic
            link_busy = max(link_busy, shared_link.busy_seconds(per_mb, m, dp_traffic))

    # the schedule's bubble (planner.model.schedule; the V schedules' and below pp the looped
    # ones' from torch's order at this m; 1F1B exact in Megatron's order, torchtitan's closed)
    name = schedule_name(job, lay)
    exact = job.framework == "megatron" or name != "1F1B"
    bubble = schedule_bubble(name, stages, [r[1] for r in rows], lay.vpp, m if exact else None)
    flush = flush_exposed(drain, stages, lay.vpp)
    bubble += flush
    worst = max(range(len(stage_times)), key=stage_times.__getitem__)
    c, rec, tp, tp_h, cp, cp_h, ep, ep_h, off, wcast = rows[worst]
    if jobs:  # the peak is the ranks' mean (equal GPU counts)
        job = whole
    peaks = [
        (j.cluster.gpu.peak_flops(j.precision), j.cluster.gpu.peak_flops("bf16"))
        for j in jobs or (job,)
    ]
    pp_exposed = m * exch[worst]  # the slowest stage's own exchanges
    if interleaved:  # sends overlapped with compute, per schedule (`pipeline_p2p`)
        over, blocking = interleaved_exposed(
            job, lay, name, m, hop, size, at, stages, [r[1] for r in rows], stage_times, worst
        )
        pp_exposed += over

    breakdown = StepBreakdown(
        compute=m * c + wcast,
        recompute=m * rec,
        tp_comm_exposed=m * tp,
        tp_comm_hidden=m * tp_h,
        cp_comm_exposed=m * cp,
        cp_comm_hidden=m * cp_h,
        ep_comm_exposed=m * ep,
        ep_comm_hidden=m * ep_h,
        pp_comm_exposed=pp_exposed,
        dp_comm_exposed=dp_exp,
        dp_comm_hidden=dp_hid,
        bubble=bubble,
        optimizer=opt,
        other=step_overhead_s(job, lay),
        offload_exposed=m * off,
    )
    if link_busy > 0:
        least = shared_link.floor(link_busy, opt, breakdown.other)
        breakdown = replace(breakdown, link_shared=max(least - breakdown.step_time, 0.0))
    step = breakdown.step_time
    n_gpus = lay.num_gpus
    t5_flops = t5.model_flops_per_sample(job) * job.global_batch_size
    model, hw = _step_flops(job, job.recompute_policy(lay.recompute), lay.recompute_modules)
    model += t5_flops
    hw += t5_flops
    peak = sum(p for p, _ in peaks) / len(peaks)
    bf16_peak = sum(b for _, b in peaks) / len(peaks)
    return Performance(
        breakdown=breakdown,
        step_time_s=step,
        tokens_per_s_per_gpu=job.tokens_per_step / (step * n_gpus),
        model_flops_per_step=model,
        hardware_flops_per_step=hw,
        model_tflops_per_gpu=model / (step * n_gpus) / 1e12,
        mfu=model / (step * n_gpus * peak),
        stages=tuple(stages),
        tails=tuple(tails),
        unscheduled_s=wcast + flush,
        p2p_hop=hop if interleaved else 0.0,
        p2p_blocking=tuple(blocking),
        peak_over_bf16=peak / bf16_peak,
        precision=job.precision,
        peak_name=_peak_name(jobs or (job,)),
    )


def _hops_at(job: Job, lay: Layout, pooled: bool) -> Callable[[float], Hops]:
    """Each pipeline rank's (previous, next) seconds for one message of nbytes: its pool's links
    (`pools.rank_hops`), else the link between neighbours of a pipeline group (the stride: tp x
    cp x dp, tp x cp under use_tp_pp_dp_mapping, `dp_sync.pp_stride`)."""
    if pooled:
        return lambda nbytes: pools.rank_hops(job, lay, nbytes)
    link = comms.p2p_link(job.cluster, dp_sync.pp_stride(lay), lay.pp)
    return lambda nbytes: ((comms.p2p(nbytes, link),) * 2,) * lay.pp


def _exchanges(pp: int, rank: int, hops: tuple[tuple[float, float], ...], hop: float) -> float:
    """Seconds of 1F1B's blocking exchanges one micro-batch costs a rank: one with each
    neighbour (send_forward_recv_backward with the next, send_backward_recv_forward with the
    previous); the last rank's send_forward_recv_backward returns without communicating, and the
    first rank's send_backward_recv_forward (Megatron-LM d98e8a64
    pipeline_parallel/p2p_communication.py:549-550, :582-583), so they make one. `hops`: each
    rank's (previous, next) hop with pools (`pools.rank_hops`), else `hop` each."""
    prev, nxt = hops[rank] if hops else (hop, hop)
    return (prev if rank > 0 else 0.0) + (nxt if rank < pp - 1 else 0.0)


_FLOPS: ModelMemo[tuple[object, ...], tuple[float, float]] = ModelMemo()
"""`_step_flops` per model and what it reads besides the model (the search estimates thousands
of layouts of a job that share their recompute)."""


def _step_flops(job: Job, policy: str, modules: tuple[str, ...]) -> tuple[float, float]:
    """The decoder's model and hardware FLOPs of one step (`flops.model_flops`,
    `flops.hardware_flops` with the recompute `policy` and `modules`), remembered: they read the
    architecture, the sequence, the batch and flops' own conventions (in the key), nothing
    calibrated."""
    seq, batch = job.seq_length, job.global_batch_size
    key = (seq, batch, policy, modules, flops.CAUSAL_HALVED, flops.FWD_BWD)

    def make() -> tuple[float, float]:
        model = flops.model_flops(job.arch, seq, batch)
        return model, flops.hardware_flops(job.arch, seq, batch, policy, modules)

    return _FLOPS.get(job.arch, key, make)


def _peak_name(jobs: Sequence[Job]) -> str:
    """`Performance.peak_name` of the jobs of a step (one per pool)."""
    tf32 = [j.cluster.gpu.peak_tflops_tf32 is not None for j in jobs]
    return peak_label(jobs[0].precision, tf32)


def _replicas(job: Job, layout: Layout, views: tuple[tuple[Job, Layout], ...]) -> Performance:
    """The data-parallel replicas across pools (`planner.model.pools`): each pool's replicas
    estimated as their own job, in lock-step, so the slowest pool's step is the job's; MFU
    against the mean dense peak of every GPU (the pools are of one size)."""
    perfs = {id(j): estimate(j, lay) for j, lay in views}
    slow = max(perfs.values(), key=lambda p: p.step_time_s)
    step = slow.step_time_s
    peak = sum(j.cluster.gpu.peak_flops(j.precision) for j, _ in views) / len(views)
    bf16_peak = sum(j.cluster.gpu.peak_flops("bf16") for j, _ in views) / len(views)
    model = flops.model_flops(job.arch, job.seq_length, job.global_batch_size)
    return replace(
        slow,
        model_flops_per_step=model,
        hardware_flops_per_step=slow.hardware_flops_per_step * len(views),
        mfu=model / (step * layout.num_gpus * peak),
        peak_over_bf16=peak / bf16_peak,
        peak_name=_peak_name([j for j, _ in views]),
    )
