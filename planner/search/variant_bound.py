"""The search's lower bound on one variant's step time (`variant_bound`: a base layout with its
own ZeRO stage and memory-saving rung), so that of a base's variants that fit only those that may
be its fastest are estimated exactly (`planner.search.stage_rungs`), and the per-rank stage times
it reads (`rank_stage_times`). With host offloading, whose exposed seconds read each rank's place
in the pipeline, a cheaper bound takes them on one rank only (`offload=False`): the search asks
it first and the whole bound only where that one does not decide (`StageRungs.fastest`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.schedule import Chunks
from planner.model.stage_offload import offload_exposed
from planner.model.stage_time import ep_exposed, layout_times
from planner.search.pipe_floor import pipeline_floor
from planner.search.rank_groups import rank_values


def offloads(layout: Layout) -> bool:
    """Whether the layout offloads activations to the host (whole layers,
    --cpu-offloading-num-layers, or fine-grained modules): without, `variant_bound` is the same
    with `offload` False or True."""
    return layout.cpu_offloading_num_layers > 0 or bool(layout.offload_modules)


def variant_bound(job: Job, layout: Layout, offload: bool = True) -> float | None:
    """Seconds `cost.estimate(job, layout)` cannot go under, for the layout as it is (its own
    rung and ZeRO stage; no other layout), cheaper than the estimate: per rank the stage time's
    terms `cost.estimate` sums, from the same functions on the same layer times (compute and the
    output layers, recompute, TP, CP, exposed expert all-to-all, exposed host offloading), less
    the terms that are >= 0 (point-to-point sends, a vision encoder on the first rank), then
    Megatron's schedule as in `base_bound` (`pipeline_floor`: under 1F1B's and interleaved
    1F1B's steady state and bubble, `schedule.schedule_bubble`), and the step's
    least host overhead; the DP sync, optimizer, shared link and the rest only add. Taken less
    1e-12 of itself (the estimate sums the same terms in another order). None where not claimed:
    other training codes' schedules, pools (each rank its own pool's job), and Megatron's
    deferred output-layer weight gradients (they leave the last stage's backward).

    `offload` False: the same with the exposed host offloading (`stage_offload.offload_exposed`,
    >= 0) of one rank only, the first whose stage time without it is the largest (most of the
    step at many micro-batches), 0 on the others: each rank's time no more than with its own,
    and `pipeline_floor` nondecreasing in each, so no more than the bound with every rank's
    (equal where the layout offloads nothing, `offloads`), a bound too, and cheaper: the ranks
    alike are computed once per group (`rank_groups.rank_values`; the offloading's waits read
    each rank's place in the pipeline, the rest its mix) and one rank's offloading.
    tests/search/test_stage_rungs.py checks both below every variant of its problems' bases."""
    if job.framework != "megatron" or job.pools or layout.defer_embedding_wgrad_compute:
        return None
    m, out = rank_stage_times(job, layout, offload)
    if not offload and offloads(layout):  # the slowest rank's offloading: its own
        t = layout_times(job, layout)
        worst = max(range(len(out)), key=out.__getitem__)
        chunks = layout.chunk_layers(job.arch.num_layers)[worst]
        out[worst] += offload_exposed(job, layout, worst, chunks, t)
    v = layout.vpp
    step = pipeline_floor(out, m, v, ordered=True) + cost.step_overhead_s(job)
    return step * (1 - 1e-12)


def rank_stage_times(job: Job, layout: Layout, offload: bool = True) -> tuple[int, list[float]]:
    """Micro-batches, and each rank's stage time per micro-batch as `cost.estimate` sums it on
    one GPU kind, less the terms the rank's layers do not decide (point-to-point sends, a vision
    encoder on the first rank, deferred output-layer weight gradients): compute and the output
    layers, recompute, TP, CP, exposed expert all-to-all and (`offload`) exposed host offloading,
    from the same functions on the same layer times (`variant_bound`'s terms)."""
    t = layout_times(job, layout)
    share = comms.ep_sm_share(job.cluster, layout, job.gemm_sm_margin)
    ranks = layout.chunk_layers(job.arch.num_layers)

    def mix(rank: int, chunks: Chunks) -> tuple[float, float, float, float, float]:
        mix, heads = rank_mix(job, layout, rank, chunks, t)
        c, _, _, rec, tp, _, cp, _, ep, ep_s = mix_sums(mix)
        return c + heads * t.out + rec + tp + cp, c, rec, ep, ep_s

    def stage(rank: int, sums: tuple[float, float, float, float, float]) -> float:
        before, c, rec, ep, ep_s = sums
        ep_e, _ = ep_exposed(layout, rank, t.m, ep, c + rec, share, ep_s)
        if not offload:
            return before + ep_e
        # the rank's own: fine-grained offloading's reloads read its place in the pipeline
        return before + ep_e + offload_exposed(job, layout, rank, ranks[rank], t)

    ranked = layout.ep_comm_overlap or (offload and bool(layout.offload_modules))
    return t.m, rank_values(job, layout, t, mix, stage, ranked)
