"""A floor under the data-parallel sync and optimizer step that `cost.estimate` adds after the
pipeline (`sync_floor`), for Megatron-FSDP's ZeRO 2 and 3, whatever the windows the sync hides
in: `planner.search.variants.best_variants` adds it to the base's bound (`bound.base_bound`) to
drop a ZeRO stage before its exact estimate without memory savers. At ZeRO 2 and 3 the last
decoder layer's reduce-scatter (and at ZeRO 3 the first layer's gathers) of every micro-batch
show whatever the compute, so on many micro-batches the sync alone can take the step past the
K-th best time.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, dp_instances, dp_sync, rank_sync
from planner.model.rank_mix import rank_mix
from planner.model.stage_time import layout_times
from planner.search.rungs import NONE


def applies(job: Job, layout: Layout) -> bool:
    """Megatron-LM at ZeRO 2 or 3 on one GPU kind, its sync `dp_sync.data_parallel`'s (one pool,
    not over optimizer instances: `rank_sync.stage_sync`'s path through `dp_sync.shown`)."""
    return (
        job.framework == "megatron"
        and not job.pools
        and layout.zero_stage >= 2
        and not dp_instances.applies(job, layout)
        and (layout.dp_pools <= 1 or job.between_pools is None)
    )


def sync_floor(job: Job, layout: Layout) -> float:
    """Seconds no rung of the layout's ZeRO stage (`applies`) goes under in `cost.estimate`'s
    `dp_comm_exposed + optimizer`, the DP sync and optimizer step of the rank where they take
    longest: max over the ranks of k_r e_r(0) + o_r, with e_r(0) the rank's exposed sync
    (`rank_sync.stage_sync`) under windows of 0 seconds, o_r its optimizer step, and
    k_r = s + (1 - s) / u_r (s = `comms.sm_share`, u_r the rank's decoder blocks, its FSDP units,
    at least 1 as `dp_sync.shown` takes them).

    Why. `rank_sync.stage_sync` returns e = S(w) + s H(w) + emb, o for windows w: S the shown
    seconds (`dp_sync.shown`), H the hidden ones, emb the word embedding's gradient all-reduce,
    and o, which no window reads. At ZeRO 2 and 3 (`dp_sync._fsdp_grads`, `dp_sync._fsdp`)
    H = T - S, T the seconds of all of one step's unit collectives, so e = s T + (1 - s) S(w) +
    emb. Each unit's collective shows at least once per pass (`dp_sync.unit_pipeline` is
    per_unit + (u - 1) max(per_unit - window, 0) >= per_unit; ZeRO 3 with its live-parameter cap
    shows more), and the u units of a pass are alike: S(w) >= T / u (ZeRO 2: m rs + ag of
    T = u (m rs + ag); ZeRO 3: m (2 ag + rs) of T = u m (2 ag + rs)). Windows of 0 hide nothing:
    S(0) = T, H(0) = 0, e(0) = T + emb. So e(w) >= s T + (1 - s) T / u + emb >= k e(0), as
    k <= 1 and emb >= 0. The rung changes neither e(0) nor o (`rank_sync.SYNC_UNREAD`: the
    memory savers, the micro-batch size's windows only; its decoder blocks are the same count
    under every recompute), so k e(0) + o is below every rung's e + o on that rank, and the max
    over the ranks below the max `cost.estimate` takes. Equality where the windows hide all but
    each pass's first unit's collectives and the rank has no embedding gradients to all-reduce
    (tests/search/test_dp_floor.py finds it), but for the 1e-12 of itself the floor is taken
    less for rounding.

    `cost.estimate`'s step is the pipeline (the stages' times and the bubble, which
    `bound.base_bound` bounds), plus this sync and optimizer, plus terms >= 0 (the step's
    overhead beyond `cost.step_overhead_s(job)`, the shared link's excess): base_bound plus this
    floor is below the step of every rung of the stage."""
    lay = NONE.on(layout)
    t = layout_times(job, lay)
    groups = dp_sync.data_parallel_groups(job.cluster, lay)
    share = comms.sm_share(job.cluster, job.gemm_sm_margin)
    worst = 0.0
    for rank, chunks in enumerate(lay.chunk_layers(job.arch.num_layers)):
        mix, _ = rank_mix(job, lay, rank, chunks, t)
        units = sum(n for k, n in mix if k is not t.mtp_proj)
        e, _, o = rank_sync.stage_sync(job, lay, rank, chunks, mix, t, groups, share, 0.0, 0.0)
        k = share + (1 - share) / max(units, 1)  # as `dp_sync.shown` counts the units
        worst = max(worst, k * e + o)
    return worst * (1 - 1e-12)  # the estimate adds the same terms in another order
