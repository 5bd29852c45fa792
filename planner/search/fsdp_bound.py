"""What a base bound for torchtitan layouts without pipelining adds for FSDP2's exposed traffic
(`fsdp_exposed`, which `bound.base_bound` adds to its own).

torchtitan's FSDP2 all-gathers every block's parameters before each forward and backward and
reduce-scatters their gradients in each backward (`planner.model.fsdp2.data_parallel_time`); on
hundreds of ranks those collectives outlast the compute they run under, and a bound without them
leaves the search to estimate every base whose compute alone is under the K-th best time.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, fsdp2
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.stage_params import quantised_params, stage_params
from planner.model.stage_sync import sync_windows
from planner.model.stage_time import ep_exposed, layout_times
from planner.search.rungs import NONE


def applies(job: Job, layout: Layout) -> bool:
    """torchtitan, one pipeline stage, one GPU kind, parameters trained (a frozen model's
    traffic is not FSDP2's alone)."""
    return (
        job.framework == "torchtitan" and layout.pp == 1 and not job.pools and not job.frozen_model
    )


def fsdp_exposed(job: Job, layout: Layout) -> float:
    """FSDP2's exposed traffic per step (`fsdp2.data_parallel_time`) beyond the windows of the
    layout's one stage without memory savers at its micro-batch size: what `bound.base_bound`
    adds to its bound, whose stage time holds those windows' compute (F + B per micro-batch,
    the output layer's third forward and two thirds backward as `cost.estimate` splits it).

    Why the sum is a bound. `cost.estimate` times the step at least m (F + B + r) + e(F, B) +
    overhead, with F and B the stage's forward and backward seconds per micro-batch (recompute
    in B), r its TP, CP and exposed expert all-to-all, and e(F, B) the exposed FSDP2 traffic:
    without PP, m forwards over u blocks each showing c_f + (u - 1) max(c_f - F / u, 0) and m
    backwards each c_b + (u - 1) max(c_b - B / u, 0) (`dp_sync.unit_pipeline`; c the per-block
    collectives, the shards' SM share of the hidden part only adds). m F + m (u - 1) max(c_f -
    F / u, 0) has slope m / u > 0 in F where the max is positive and m elsewhere, so it is
    nondecreasing in F, and likewise in B: the sum holds at any F' <= F, B' <= B and r' <= r,
    as the layer times and terms without memory savers are (recompute adds to B and to the
    step, never to less; the collectives read the parameters, groups and settings, not the
    rung).

    The windows also hold the waits on other links (`stage_sync.other_link_seconds`: x <= r of
    the stage's exposed seconds, split F : B - recompute, `stage_sync.sync_windows`, a split no
    rung moves), so the step is g_f(F + p x) + g_b(B + (1 - p) x) + m (r - x), with g(W) = m W +
    e(W) nondecreasing and, e being nonincreasing, g(W + d) <= g(W) + m d: at least
    g_f(F + p r) + g_b(B + (1 - p) r). The bound takes its own r' <= r (the stage time's TP, CP
    and exposed expert all-to-all that `bound.base_bound` counts) into both windows alike, and
    adds e(F' + p r', B' + (1 - p) r'): m (F' + B' + r') plus that is g_f(F' + p r') +
    g_b(B' + (1 - p) r'), no more than the step.
    tests/search/test_fsdp_bound.py checks the bound below every recompute policy of bases of
    its torchtitan problems, under several settings variants and every schedule."""
    lay = NONE.on(layout)
    t = layout_times(job, lay)
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    mix, heads = rank_mix(job, lay, 0, chunks, t)
    c, fwd, bwd, rec, tp, _, cp, _, ep, ep_s = mix_sums(mix)
    fwd += heads * t.out / 3
    bwd += 2 * heads * t.out / 3
    # r': the stage's exposed seconds as `bound._plain_stage_times` counts them
    tp = min(tp, sum(n * k.tp_plain for k, n in mix))
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    ep_e, _ = ep_exposed(lay, 0, t.m, ep, c + rec, share, ep_s)
    fwd, bwd = sync_windows(fwd, bwd, rec, tp + cp + ep_e)
    dense, expert = stage_params(job, lay, 0, chunks)
    blocks = sum(n for k, n in mix if k is not t.mtp_proj)
    fp8 = quantised_params(job, lay, 0, chunks)[0]
    return fsdp2.data_parallel_time(job, lay, dense, expert, fwd, bwd, t.m, blocks, fp8)[0]
