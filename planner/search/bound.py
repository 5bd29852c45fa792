"""The search's lower bounds on step time (`planner.search.top_k`): per structure
(`lower_bound`, at its largest micro-batch, for every layout of the structure, split and vpp) and
per base layout (`base_bound`, at its own micro-batch, with the pipeline's fill and drain) and per
variant (`variant_bound`: the layout with its own ZeRO stage and rung, so that of a base's variants
that fit only those that may be its fastest are estimated exactly). Each
term's proof is in its docstring; tests/search/test_search_assumptions.py checks both below
every layout of its brute-forced problems and tests/search/test_bound.py that the compute part
is `cost.compute_floor`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import itemgetter

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.userbuffers import slot_map
from planner.model import comms, cost, pools, tp_overlap
from planner.model.job_memo import JobMemo
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.routing_load import least_load_job
from planner.model.schedule import BUBBLE_TERMS, Chunks, schedule_name, unmerged_share
from planner.model.stage_time import LAYER_TIMES, a2a_floor, ep_exposed, layout_times
from planner.search.floor_layers import floor_layers
from planner.search.fsdp_bound import applies as fsdp_applies
from planner.search.fsdp_bound import fsdp_exposed
from planner.search.pipe_floor import fills, pipeline_floor, scaled_floor
from planner.search.rank_groups import rank_counts, rank_values
from planner.search.rungs import NONE, RUNG_FIELDS


def rank_floors(job: Job, layout: Layout) -> tuple[int, list[float], list[float], list[float]]:
    """(micro-batches, each rank's `cost.compute_floor` term, each rank's TP traffic, each rank's
    CP charge) per micro-batch of the layout as it is (`lower_bound` passes it without memory
    savers). The first list is `cost.compute_floor`'s own loop (m x its largest element is
    compute_floor, bit for bit: tests/search/test_bound.py); the second is every TP collective's
    seconds, exposed or hidden (`Layer.tp_traffic`); the third the context-parallel exchange's
    charge (`Layer.cp`). One pass over the ranks serves all three."""
    t = layout_times(job, layout)
    share = comms.ep_sm_share(job.cluster, layout, job.gemm_sm_margin)
    floors: list[float] = []
    tps: list[float] = []
    cps: list[float] = []
    for rank, chunks in enumerate(layout.chunk_layers(job.arch.num_layers)):
        mix, heads = rank_mix(job, layout, rank, chunks, t)
        c = sum(n * (k.fwd + k.bwd) for k, n in mix)
        a2a, shared = sum(n * k.ep for k, n in mix), sum(n * k.ep_shared for k, n in mix)
        c += a2a_floor(layout, a2a, shared, c, share)
        floors.append(c + heads * t.out)
        tps.append(sum(n * k.tp_traffic for k, n in mix))
        cps.append(sum(n * k.cp for k, n in mix))
    return t.m, floors, tps, cps


_TP_SHARES: JobMemo[tuple[bool, int], float] = JobMemo()
"""`tp_floor_share` per job, and per whether the overlap's share applies and tp: all it reads of
the layout (the search asks for it once per base it queues)."""


def tp_floor_share(job: Job, layout: Layout) -> float:
    """The share of a layer's TP traffic (`Layer.tp_traffic`) that its TP charge (`Layer.tp`)
    never goes under, in every rung of the layout: `comms.sm_share` of what hides without
    Megatron's TP overlap (exposed + share x hidden >= share x traffic, 0 <= share <= 1); with
    it, and rungs may turn it off, also `tp_overlap.floor_share`."""
    overlap = layout.tp_comm_overlap and layout.sequence_parallel and layout.tp > 1
    memo = _TP_SHARES.of(job)
    key = (overlap, layout.tp if overlap else 0)
    if key not in memo:
        if overlap:
            slots = slot_map(job.tp_overlap_cfg)
            memo[key] = tp_overlap.floor_share(job.cluster, layout.tp, slots, job.gemm_sm_margin)
        else:
            memo[key] = comms.sm_share(job.cluster, job.gemm_sm_margin)
    return memo[key]


def lower_bound(job: Job, layout: Layout) -> float:
    """Seconds no layout of this structure, split and vpp can beat at the given micro-batch size
    or a smaller one: per rank, compute without recompute plus the exposed expert all-to-all
    (`cost.compute_floor`'s terms) plus what its TP traffic costs, at least, plus its CP
    exchange's charge without recompute; the slowest rank's times the micro-batches, and the
    step's fixed overhead.

    Why the TP term is safe. Every rank's stage time per micro-batch (`cost.estimate`) is
    c + recompute + tp + cp + exposed all-to-all + offload + p2p, and compute_floor's term bounds
    c + recompute + exposed all-to-all from below; tp, the layer's `Layer.tp`, is at least
    `tp_floor_share` of the layer's TP traffic (exposed + hidden). That traffic, the TP
    collectives' total seconds, does not depend on where they run (`layer_tp.tensor_parallel_layer`,
    `async_tp.layer_traffic` and `tp_overlap.layer_traffic` only move seconds between exposed and
    hidden), so neither the TP overlap nor the GEMM windows change it, and recompute only adds
    collectives (full recompute's
    second forward, a re-run MLP / MoE block's pair): the total is least without memory savers,
    whatever the ZeRO stage. At a larger micro-batch fewer, longer micro-batches move the same
    bytes with fewer latencies: m x total is least at the largest micro-batch, as the compute
    term is (tests/search/test_search_assumptions.py checks the bound below every layout of
    every structure of its problems).

    Why the CP term is safe. The layer's CP charge (`Layer.cp`, `cp_time.context_parallel`) reads
    of the layout its degrees, micro-batch and exchange, and of the rungs only the forward passes
    (2 under full recompute, which repeats the exchange: no less); no ZeRO stage, overlap or
    offload reaches it. The all-to-all and all-gather exchanges are all exposed: m x their
    seconds is least at the largest micro-batch, as for the TP traffic. The ring's shows what its
    hops (F forward, B backward) take beyond the attention kernel they run under (a_f, a_b), so
    compute + charge = (compute - a_f - a_b) + max(a_f, F) + max(a_b, B): each of the three parts,
    times m, is least at the largest micro-batch (the compute term's premise, part by part, and
    the hops' bytes), and so is each max. The step's other costs (bubble, DP, optimizer) are >= 0
    and the step's host overhead (`cost.step_overhead_s`) is in every step."""
    m, g = _stage_floors(job, layout)
    return m * max(g) + cost.step_overhead_s(job)


@dataclass(frozen=True)
class Floors:
    """What the bounds read of a layout's stage floors (`_stage_floors`): its micro-batches, and
    the largest and the sum of the floors per micro-batch over its ranks. The search keeps these
    of each base it queues (at the structure's largest micro-batch size) to bound the same base
    at the smaller sizes it expands (`below`), and at the largest itself (`base_bound`)."""

    micro_batch_size: int
    m: int
    worst: float
    total: float
    other: float
    """The job's `cost.step_overhead_s`."""
    spare_worst: float = 0.0
    """With Megatron's EP overlap, what the all-to-all floor (`stage_time.a2a_floor`) leaves out
    of the charge of a forward and backward that run alone, (1 - share) x min(all-to-all,
    compute) per micro-batch (`stage_time.ep_exposed`), on the rank whose floor is `worst`;
    0 without the overlap (the floor is the charge)."""
    spare_total: float = 0.0
    """`spare_worst`'s term summed over the ranks."""
    descending: tuple[float, ...] = ()
    """The floors, largest first (`pipe_floor.scaled_floor`)."""

    def lower_bound(self) -> float:
        """`lower_bound` of the layout, bit for bit."""
        return self.m * self.worst + self.other


def floors(job: Job, layout: Layout) -> Floors:
    return floors_of(job, [layout])[0]


def floors_of(job: Job, layouts: list[Layout]) -> list[Floors]:
    """`floors` of each layout (a shape's bases, `space.bases`, as the search queues them), bit
    for bit; a layout that follows its twin without Megatron's EP overlap (`space.bases` puts
    it there) shares that twin's pass over the ranks: only what the all-to-all adds reads the
    overlap (`stage_time.a2a_floor`; the layer times, SM shares and ranks' layers do not)."""
    other = cost.step_overhead_s(job)
    out: list[Floors] = []
    i = 0
    while i < len(layouts):
        lay = layouts[i]
        paired = (
            i + 1 < len(layouts)
            and not lay.ep_comm_overlap
            and layouts[i + 1] == lay.with_(ep_comm_overlap=True)
        )
        group = layouts[i : i + 1 + paired]
        m, per = _overlap_floors(job, lay, [x.ep_comm_overlap for x in group])
        for x, (g, spare) in zip(group, per, strict=True):
            worst = max(g)
            at = spare[g.index(worst)]
            desc = tuple(sorted(g, reverse=True))
            out.append(Floors(x.micro_batch_size, m, worst, sum(g), other, at, sum(spare), desc))
        i += len(group)
    return out


def below(job: Job, top: Floors, layout: Layout) -> float:
    """No more than `base_bound(job, layout)`, from `top`, the `floors` of the same base at a
    micro-batch size no smaller than the layout's (the search's: at its structure's largest), so
    without the layer times at the layout's own size: where it exceeds the K-th best time, so
    does base_bound, which the search then need not compute.

    Why. Each rank's floor per micro-batch g_r, times the micro-batches m, is least at the
    largest micro-batch (`lower_bound`'s premise, term by term), so at this layout's m
    g_r >= g_r(top) x m(top) / m =: h_r. With Megatron's EP overlap each rank's forwards and
    backwards that run alone (its share u_r of them at this m, `schedule.unmerged_share`) also
    expose what the floor leaves out, s_r per micro-batch (`Floors.spare_worst`), and m x s_r is
    least at the largest micro-batch too (the lesser of the all-to-all and the compute, each
    so), so g_r >= (g_r(top) + u s_r(top)) x m(top) / m =: h_r, u = the least u_r, the last
    rank's (the fewest warm-up forwards). base_bound is nondecreasing in every g_r: where it adds
    the fill and drain (d = `fill_drain`: vpp under Megatron) it is at least (m - 1/d) max_r h_r
    + sum_r h_r / d + overhead >= (m(top) / m) x ((m - 1/d) (worst + u spare_worst) + (total +
    u spare_total) / d) + overhead (the step's; max_r h_r at least the rank whose floor is
    `worst`; with d = 1, and torch's looped schedules below pp, `pipe_floor.scaled_floor`),
    taken here less 1e-12 of itself for rounding; elsewhere it is at least
    `lower_bound`, at least m(top) x worst + the step overhead (= `Floors.lower_bound`, the bound
    the search queued the structure on). tests/search/test_search_assumptions.py checks it below
    base_bound for every base of its problems."""
    d = fill_drain(job, layout)
    if d is None:
        return top.lower_bound()
    m = max(layout.num_microbatches(job.global_batch_size), 1)
    worst, total = top.worst, top.total
    if top.spare_total:
        u = unmerged_share(
            layout.pp, layout.vpp, layout.pp - 1, m, layout.microbatch_group_size_per_vp_stage
        )
        worst, total = worst + u * top.spare_worst, total + u * top.spare_total
    if d == 1 or not fills(job, layout):  # exact 1F1B, looped below pp: ranks' order unknown
        scaled = scaled_floor(top.descending, worst, top.m, m, d, total if d > 1 else 0.0)
    else:
        scaled = top.m / m * ((m - 1 / d) * worst + total / d)
    return scaled * (1 - 1e-12) + top.other


def _stage_floors(job: Job, layout: Layout) -> tuple[int, list[float]]:
    """Micro-batches and the floor under each kind of rank's stage time per micro-batch
    (`lower_bound`), once per kind: `rank_floors`' terms, computed once for all the ranks that run
    the same layer counts of each kind and output layers (without memory savers each rank's mix
    is those counts of the layout's layer of each kind, `rank_mix.rank_mix`), each repeated as
    often as such ranks occur (max and sum are what the bounds read)."""
    m, per = _overlap_floors(job, layout, [layout.ep_comm_overlap])
    return m, per[0][0]


def _overlap_floors(
    job: Job, layout: Layout, overlaps: list[bool]
) -> tuple[int, list[tuple[list[float], list[float]]]]:
    """`_stage_floors` of the layout with each of `overlaps` as its EP overlap
    (`Layout.ep_comm_overlap`), in one pass over its kinds of rank; beside each, the ranks'
    spares in the same order (`Floors.spare_worst`'s term, 0 without the overlap)."""
    lay = NONE.on(layout)
    # the round robin at its least load: these floors stand for smaller micro-batches too
    t = layout_times(least_load_job(job), lay)
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
    floor = tp_floor_share(job, lay)
    lays = [lay if ov == lay.ep_comm_overlap else lay.with_(ep_comm_overlap=ov) for ov in overlaps]
    outs: list[tuple[list[float], list[float]]] = [([], []) for _ in overlaps]
    for (counts, heads), times in rank_counts(job, lay, t):
        c = a2a = shared = tp = cp = 0.0
        for k, n in zip(floor_layers(t), counts, strict=True):
            c += n * (k.fwd + k.bwd)
            a2a += n * k.ep
            shared += n * k.ep_shared
            tp += n * k.tp_traffic
            cp += n * k.cp
        for (out, spares), x in zip(outs, lays, strict=True):
            g = c + a2a_floor(x, a2a, shared, c, share)
            out += [g + heads * t.out + floor * tp + cp] * times
            spares += [(1 - share) * min(a2a, c) if x.ep_comm_overlap else 0.0] * times
    return t.m, outs


def base_bound(job: Job, layout: Layout, known: Floors | None = None) -> float:
    """`lower_bound` with the pipeline's fill and drain, for the layout's own micro-batch size
    only (the bubble grows with it, so this does not bound a structure's smaller micro-batches),
    under the schedules whose bubble is the stages' whole time (`fill_drain`: Megatron-LM's 1F1B
    and interleaved 1F1B, torchtitan's 1F1B, GPipe, Interleaved1F1B, LoopedBFS): step >= m
    max_r t_r + (sum_r t_r - max_r t_r) / d (`schedule.pipeline_time`, `schedule_bubble`; the
    step adds only terms >= 0 to it, and the step overhead), which is (m - 1/d) max_r t_r +
    sum_r t_r / d: nondecreasing in every stage time t_r, as m >= 1 >= 1/d, so it holds at any
    g_r <= t_r (with one stage, m t_1, its steady state); with d = 1 the exact 1F1B step can
    be less, as torch's looped ones below pp (`pipe_floor.fills`): `pipeline_floor` bounds
    both. On one GPU kind g_r is the rank's own stage time without memory savers
    (`_plain_stage_times`: the stage time's composition is the same for both training codes),
    a floor under every rung's at this micro-batch; with pools the floors of `lower_bound`.
    torchtitan's zero-bubble schedules get `size_floor`. torchtitan without pipelining: either,
    plus FSDP2's exposed traffic beyond the stage's windows (`fsdp_bound.fsdp_exposed`, whose
    docstring proves the sum)."""
    d = fill_drain(job, layout)
    if d is None:
        out = size_floor(job, layout, known)
    else:
        pooled = bool(pools.rank_jobs(job, layout))
        m, g = _stage_floors(job, layout) if pooled else _plain_stage_times(job, layout)
        out = pipeline_floor(g, m, d, not pooled, fills(job, layout)) + cost.step_overhead_s(job)
    if fsdp_applies(job, layout):  # FSDP2's exposed traffic beyond the stage's windows
        out = (out + fsdp_exposed(job, layout)) * (1 - 1e-12)
    return out


def size_floor(job: Job, layout: Layout, known: Floors | None = None) -> float:
    """`lower_bound` of the layout at its own micro-batch size, from `known` (the `floors` of
    this same base at some micro-batch size) where that is the layout's own: no layout of its
    base at that size or a smaller one goes under it (`lower_bound`'s premise)."""
    own = known is not None and known.micro_batch_size == layout.micro_batch_size
    return (known if own and known is not None else floors(job, layout)).lower_bound()


def fill_drain(job: Job, layout: Layout) -> int | None:
    """The divisor d of the pipeline's fill and drain in the schedule's step, m max_r t_r +
    (sum_r t_r - max_r t_r) / d, t_r each stage's time per micro-batch: Megatron-LM's 1F1B and
    interleaved 1F1B (d = vpp), and torchtitan's schedules whose bubble is that of the stages'
    whole forward and backward (`schedule.BUBBLE_TERMS` a = b = 1, w = 0: 1F1B and GPipe d = 1,
    Interleaved1F1B and LoopedBFS d = vpp); None for torchtitan's zero-bubble schedules, whose
    stages' weight gradients fill the bubble (`schedule.schedule_bubble`; the V schedules',
    `v_bubble.V_BUBBLES`, are no (a, b, w, d) form): they get `size_floor`, which counts no
    bubble, and every bubble is >= 0."""
    if job.framework == "megatron":
        return layout.vpp
    terms = BUBBLE_TERMS.get(schedule_name(job, layout))
    if terms is None or terms[:3] != (1.0, 1.0, 0.0):
        return None
    return layout.vpp if terms[3] is None else terms[3]


def _plain_stage_times(job: Job, layout: Layout) -> tuple[int, list[float]]:
    """Micro-batches, and each rank's time per micro-batch without memory savers (NONE) as
    `cost.estimate` sums it, less the terms that are >= 0 (point-to-point): compute, output
    layers, TP, CP and exposed expert all-to-all. No rung's is less at this micro-batch size:
    recompute adds its forwards and their collectives (a larger window hides no more expert
    all-to-all than the recompute it adds: `ep_exposed` falls by at most (1 - share) of the
    window's growth), offloading adds host transfers, and the TP term is the lesser of the
    rank's with the base's TP overlap and without it (`Layer.tp_plain`: a rung may turn it off,
    and the overlap's SM margin can cost more than it hides, `planner.model.tp_overlap`; either's
    TP seconds only grow with recompute); the layer times read no ZeRO stage (`stage_time._FIXED`).
    tests/search/test_top_k.py and tests/search/test_bound.py check base_bound below every
    variant of their problems' bases."""
    memo = PLAIN_STAGES.of(job)
    key = _PLAIN_KEY(layout.__dict__)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _plain_stages(job, NONE.on(layout).with_(zero_stage=1))
    return hit


PLAIN_STAGES: JobMemo[tuple[object, ...], tuple[int, list[float]]] = JobMemo()
"""`_plain_stage_times` per job and layout without memory savers (at ZeRO 1: they read no ZeRO
stage), keyed on the fields that layout takes from the layout asked (`_PLAIN_KEY`: all but the
ZeRO stage and those `Rung.on` sets, `rungs.RUNG_FIELDS`, NONE's whatever the layout's). They
read the layer times and the layout alone, no setting of torchtitan's FSDP2, so
`titan_variants.Variant.job` shares them as it shares the layer times; cleared with those
(`stage_time.LAYER_TIMES`)."""
_PLAIN_UNREAD = (*RUNG_FIELDS, "zero_stage")
_PLAIN_KEY = itemgetter(*(f.name for f in fields(Layout) if f.name not in _PLAIN_UNREAD))
LAYER_TIMES.clears(PLAIN_STAGES)


def _plain_stages(job: Job, lay: Layout) -> tuple[int, list[float]]:
    """`_plain_stage_times` of `lay` (without memory savers), computed."""
    t = layout_times(job, lay)
    share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)

    def mix(rank: int, chunks: Chunks) -> tuple[float, float, float, float, float]:
        mix, heads = rank_mix(job, lay, rank, chunks, t)
        c, _, _, rec, tp, _, cp, _, ep, ep_s = mix_sums(mix)
        tp = min(tp, sum(n * k.tp_plain for k, n in mix))
        return c + heads * t.out + rec + tp + cp, c, rec, ep, ep_s

    def stage(rank: int, sums: tuple[float, float, float, float, float]) -> float:
        before, c, rec, ep, ep_s = sums
        ep_e, _ = ep_exposed(lay, rank, t.m, ep, c + rec, share, ep_s)
        return before + ep_e

    return t.m, rank_values(job, lay, t, mix, stage)
