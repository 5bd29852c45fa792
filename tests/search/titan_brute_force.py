"""The brute force that `suggest --framework torchtitan` is checked against
(tests/search/test_titan_variants.py, test_titan_variants_ep.py): every (layout, settings)
torchtitan accepts on a small problem, scored by the exact model.

The layouts: every (tp, cp, pp, dp) multiplying to the GPU count, micro-batch size, vpp, pipeline
split (`space.splits`, which defines the split candidates), recompute policy and ZeRO stage and,
for a MoE model, every expert degree ep dividing both the GPU count and the expert count, expert
TP 1 and tp, and every token dispatcher of the space; the stages placed as torchtitan places them
(in a V under ZBVZeroBubble and DualPipeV, b5bcd76c distributed/pipeline_parallel.py:550-567).
The settings: every reshard_after_forward ("never" and "always" at every pp too) and every
dp_replicate dividing the GPU count. Both are filtered by planner's rules (`rules.violations`:
torchtitan's among them) under each setting's job: which expert degrees torchtitan's mesh takes
depends on dp_replicate (the shard degree), so the layouts are not filtered before.

It shares none of the search's pruning nor its enumeration: only the dominance definitions (per
base layout the fastest fitting recompute policy; a settings variant listed only where no simpler
one runs the base as fast) and the ranking (step time, `simplicity`, the variants' order), folded
into rows of twins per variant (`twins.fold`)."""

from __future__ import annotations

import heapq
from dataclasses import replace

from brute_force import make_job
from brute_force_space import _factorizations, _user_ok

from planner.inputs.layout import Dispatcher, Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import stand_in
from planner.inputs.torchtitan import TorchtitanSection
from planner.model import cost, memory
from planner.search import rules
from planner.search import space as space_mod
from planner.search import titan_variants as tv
from planner.search.space import Space
from planner.search.splits import split_fields
from planner.search.suggest import search_rows
from planner.search.top_k import Candidate, rank_key, simplicity
from planner.search.twins import Row, fold

V_SCHEDULES = ("ZBVZeroBubble", "DualPipeV")
"""The schedules torchtitan places in a V, stages r and 2 pp - 1 - r on rank r (b5bcd76c
distributed/pipeline_parallel.py:550-552 picks the "v" style for exactly these two, :560-567
pairs the stages); every other places stage k on rank k mod pp (:558-559)."""


def titan_job(*args: object, **cluster: object) -> Job:
    job = make_job(*args, **cluster)  # type: ignore[arg-type]
    return replace(
        job,
        framework="torchtitan",
        torchtitan=TorchtitanSection(),
        selective_recompute="per_op",
        sp_keeps_gathered_input=True,
        tp_backward_overlap=False,
        cross_entropy="pytorch",
        fused_norm=False,
        fused_swiglu=False,
        expandable_segments=True,
        fp8_param_gather=False,
    )


def _experts(job: Job, space: Space, tp: int) -> list[tuple[int, int, Dispatcher]]:
    """Every (ep, etp, dispatcher) of the layouts at `tp`: one for a dense model (ep 1, the
    experts' TP that of the layer, the field's default dispatcher)."""
    if not job.arch.is_moe:
        return [(1, tp, "alltoall")]
    n, experts = job.cluster.num_gpus, job.arch.num_moe_experts or 1
    eps = [e for e in range(1, n + 1) if n % e == 0 and experts % e == 0]
    etps = sorted({1 if e == "1" else tp for e in space.expert_tp})
    return [(ep, etp, d) for ep in eps for etp in etps for d in space.dispatchers]


def bases(job: Job, space: Space) -> list[Layout]:
    """Every layout without recompute, in both zero stages (the rules keep torchtitan's, and
    the expert degrees its mesh takes)."""
    n, L, gbs = job.cluster.num_gpus, job.arch.num_layers, job.global_batch_size
    domain = job.cluster.tiers[0].span_gpus or n
    out = []
    for tp, cp, pp, dp in _factorizations(n):
        if gbs % dp:
            continue
        for ep, etp, dispatcher in _experts(job, space, tp):
            for mbs in range(1, space_mod.MAX_MICRO_BATCH + 1):
                if (gbs // dp) % mbs:
                    continue
                for vpp in range(1, L // pp + 1):
                    v = job.titan.schedule(vpp) in V_SCHEDULES
                    for split in space_mod.splits(job, space, pp, vpp):
                        for zero in (0, 3):
                            lay = Layout(
                                tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, vpp=vpp,
                                sequence_parallel=tp > 1, micro_batch_size=mbs,
                                **split_fields(split), zero_stage=zero, tp_comm_overlap=False,
                                moe_token_dispatcher_type=dispatcher, v_stages=v,
                            )  # fmt: skip
                            if _user_ok(space, lay, domain):
                                out.append(lay)
    return out


def every_variant(job: Job) -> list[tv.Variant]:
    """The search's variants in its order, then the rest torchtitan accepts (every
    dp_replicate dividing the GPU count)."""
    order = tv.variants(job)
    extra = [
        tv.Variant(s, r)
        for r in space_mod.divisors(job.cluster.num_gpus)
        for s in tv.RESHARDS
        if tv.Variant(s, r) not in order
    ]
    return order + extra


def own_job(job: Job, v: tv.Variant) -> Job:
    """The variant's job with memos of its own (`Variant.job` shares the base job's layer
    times: the brute force does not lean on that)."""
    return replace(job, torchtitan=v.settings(job.titan))


def best(job: Job, space: Space, base: Layout) -> Candidate | None:
    """The base's fastest fitting recompute policy under the job (the first of equals)."""
    found: list[tuple[float, int, Candidate]] = []
    for i, r in enumerate(space.recompute):
        lay = base.with_(recompute=r)
        if rules.violations(job, lay):
            continue
        rep = memory.estimate(job, lay, space.headroom_pct)
        if rep.fits:
            c = Candidate(lay, rep, cost.estimate(job, lay))
            found.append((c.step_time, i, c))
    return min(found, key=lambda f: f[:2])[2] if found else None


def every_jobs(job: Job) -> dict[int, Job]:
    """The job with torchtitan's selective_ac_option N, for every N a rank's layers take."""
    return {
        n: replace(job, torchtitan=job.titan.model_copy(update={"selective_layer_every": n}))
        for n in range(2, job.arch.num_layers + 1)
    }


def every_best(njobs: dict[int, Job], space: Space, base: Layout) -> tuple[Candidate, int] | None:
    """The base's fastest fitting "every N-th layer" recompute under the jobs of `every_jobs`,
    over every N >= 2 up to the most layers a rank holds (the plan's reading,
    `titan_every_layers.stand_in`: each rank's every N-th layer recomputed), the smallest N of
    equals."""
    if "full" not in space.recompute or not njobs:
        return None
    layers = next(iter(njobs.values())).arch.num_layers
    most = max(sum(map(len, chunks)) for chunks in base.chunk_layers(layers))
    found = []
    for n in range(2, most + 1):
        lay = stand_in(base.with_(recompute="full"), layers, n)
        njob = njobs[n]
        if rules.violations(njob, lay):
            continue
        rep = memory.estimate(njob, lay, space.headroom_pct)
        if rep.fits:
            c = Candidate(lay, rep, cost.estimate(njob, lay))
            found.append((c.step_time, n, c))
    if not found:
        return None
    _, n, c = min(found, key=lambda f: f[:2])
    return c, n


Ref = list[tuple[tuple[float, tuple[int, ...], int], Row[Candidate], TorchtitanSection]]


def reference(job: Job, space: Space, k: int) -> Ref:
    """The top k rows over every (base layout, settings): per variant the base's fastest
    recompute policy, unless an earlier variant runs the base as fast; then per variant the
    base's fastest every-N recompute, unless any variant runs the base as fast without it or an
    earlier variant's every-N does; rows of twins per (variant, every-N or not), ranked by step
    time, `simplicity`, the variants' order (every-N after all)."""
    order = every_variant(job)
    layouts = bases(job, space)
    own = [own_job(job, v) for v in order]
    plain = [[best(own[vi], space, b) for b in layouts] for vi in range(len(order))]
    njobs = [every_jobs(j) for j in own]
    every = [[every_best(njobs[vi], space, b) for b in layouts] for vi in range(len(order))]
    merged: Ref = []

    def add(kept: list[Candidate], rank: int, titan: TorchtitanSection) -> None:
        kept.sort(key=rank_key)
        for row in fold(kept):
            key = (row.candidate.step_time, simplicity(row.candidate.layout), rank)
            merged.append((key, row, titan))

    for vi, v in enumerate(order):
        kept = []
        for bi in range(len(layouts)):
            c = plain[vi][bi]
            if c is None:
                continue
            if any(
                (u := plain[ui][bi]) is not None and u.step_time <= c.step_time for ui in range(vi)
            ):
                continue  # a simpler setting runs this base as fast
            kept.append(c)
        add(kept, vi, v.settings(job.titan))
    for vi, v in enumerate(order):
        by_n: dict[int, list[Candidate]] = {}
        for bi in range(len(layouts)):
            got = every[vi][bi]
            if got is None:
                continue
            c, n = got
            plains = [plain[ui][bi] for ui in range(len(order))]
            earlier = [every[ui][bi] for ui in range(vi)]
            if any(u is not None and u.step_time <= c.step_time for u in plains) or any(
                e is not None and e[0].step_time <= c.step_time for e in earlier
            ):
                continue
            by_n.setdefault(n, []).append(c)
        for n, kept in by_n.items():
            titan = v.settings(job.titan).model_copy(update={"selective_layer_every": n})
            add(kept, len(order) + vi, titan)
    return heapq.nsmallest(k, merged, key=lambda e: e[0])


def assert_search_equals(job: Job, space: Space, ref: list[tuple[object, Row, object]]) -> None:
    """The search's top rows (`suggest.search_rows`, as many as `ref`) are the brute force's
    `ref` (`reference`): the same layouts, torchtitan settings and twins, in order, with equal
    step times and peaks."""
    _, rows = search_rows(job, space, len(ref))
    got = [
        (r.candidate.layout, getattr(r.candidate, "titan", None), [e.layout for e in r.equivalents])
        for r in rows
    ]
    want = [(r.candidate.layout, titan, [e.layout for e in r.equivalents]) for _, r, titan in ref]
    assert got == want, "\n".join(
        f"{g[0].describe()} {g[1]} | {w[0].describe()} {w[1]}"
        for g, w in zip(got, want, strict=False)
    )
    for r, (_, w, _) in zip(rows, ref, strict=True):
        assert r.candidate.step_time == w.candidate.step_time
        assert r.candidate.memory.peak == w.candidate.memory.peak
