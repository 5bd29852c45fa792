"""A base bound for torchtitan layouts without pipelining that counts FSDP2's exposed traffic
(`fsdp_bound`), which `bound.base_bound` takes where it is higher than the compute floor.

torchtitan's FSDP2 all-gathers every block's parameters before each forward and backward and
reduce-scatters their gradients in each backward (`planner.model.fsdp2.data_parallel_time`); on
hundreds of ranks those collectives outlast the compute they run under, and a bound without them
leaves the search to estimate every base whose compute alone is under the K-th best time.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, fsdp2
from planner.model.stage_params import stage_params
from planner.model.stage_time import ep_exposed, layout_times, mix_sums, rank_mix
from planner.search.rungs import NONE


def applies(job: Job, layout: Layout) -> bool:
    """torchtitan, one pipeline stage, one GPU kind, parameters trained (a frozen model's
    traffic is not FSDP2's alone)."""
    return (
        job.framework == "torchtitan" and layout.pp == 1 and not job.pools and not job.frozen_model
    )


def fsdp_bound(job: Job, layout: Layout) -> float:
    """Seconds no rung of the layout goes under, at its micro-batch size: its one stage's time
    per micro-batch without memory savers, less the terms that are >= 0 (`bound.base_bound`'s
    `_plain_stage_times`), times the micro-batches, plus FSDP2's exposed traffic beyond that
    stage's forward and backward windows, and the step's least host overhead.

    Why. `cost.estimate` times the step at least m (F + B + r) + e(F, B) + overhead, with F and B
    the stage's forward and backward seconds per micro-batch (recompute in B), r its TP, CP and
    exposed expert all-to-all, and e = max(G ag - m F, 0) + max(R rs - m B, 0) the exposed FSDP2
    traffic (`fsdp2.data_parallel_time`: G all-gathers, R reduce-scatters; the shards' SM share of
    the hidden part only adds). m F + max(G ag - m F, 0) = max(m F, G ag) is nondecreasing in F,
    and so in B: the sum holds at any F' <= F and B' <= B, as the layer times without memory
    savers are (recompute adds to B and to the step, never to less; the collectives read the
    parameters, groups and settings, not the rung). tests/search/test_fsdp_bound.py checks it
    below every recompute policy of bases of its torchtitan problems, under several settings
    variants and every schedule."""
    lay = NONE.on(layout)
    t = layout_times(job, lay)
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    mix, heads = rank_mix(job, lay, 0, chunks, t)
    c, fwd, bwd, _, tp, _, cp, _, ep, ep_s = mix_sums(mix)
    tp = min(tp, sum(n * k.tp_plain for k, n in mix))
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    ep_e, _ = ep_exposed(lay, 0, t.m, ep, c, share, ep_s)
    fwd += heads * t.out / 3
    bwd += 2 * heads * t.out / 3
    dense, expert = stage_params(job, lay, 0, chunks)
    exposed, _ = fsdp2.data_parallel_time(job, lay, dense, expert, fwd, bwd, t.m)
    step = t.m * (fwd + bwd + tp + cp + ep_e) + exposed + cost.step_overhead_s(job)
    return step * (1 - 1e-12)
