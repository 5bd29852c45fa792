"""Search bounds that no layout of the space can satisfy (`check_reachable`): where the user's pins
and bounds leave the search no parallel structure, micro-batch and interleaving degree at all,
whatever the memory, `planner suggest` exits 2 naming the flags and why, rather than 1 ("nothing
fits", which reads as memory).

The decision is the search's own (`space.structures`, `space.zero_stages`, `space.options`: what
`top_k.search` enumerates before it asks the memory or the cost model), made twice: on the
user's space, and on the same job with the bounds relaxed to suggest's defaults. Empty within the
bounds and not without them: the bounds are the cause, and exit 2. Empty without them too: the
job itself is (its batch, its model: `suggest.explain_infeasible`, exit 1 as before; a rule on
the job alone was refused before, `job_checks.check_job`, exit 2). A bound that excludes only
the layouts that fit memory leaves the space non-empty, so it still exits 1; a range holding one
admissible value leaves the layouts of that value, so it is not refused (`--pp 1-2 --vpp 2`);
nor are bounds that cannot split the global batch (`_why`'s batch steps): a batch is the job's
to change, and the search's answer (exit 1) offers the one that fits.

The message (`_why`) then walks the search's filters in its order and names the first that
empties the layouts within the bounds; each step says why no layout passes it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search import rules
from planner.search import space as space_mod
from planner.search.rules import parallel as parallel_rules
from planner.search.rules import selective_policy, torchtitan_shapes
from planner.search.rules.context import exchange_for
from planner.search.space import Bound, Space, Structure
from planner.search.splits import divisors, free_form, vpp_candidates
from planner.search.top_k import job_zero_stages

Degrees = tuple[int, int, int, int]
"""(tp, cp, pp, dp) of one structure, without its expert degrees."""


def flag_text(name: str, b: Bound) -> str:
    """A bound as the flag that gives it: `--pp 2`, `--vpp 2-4`, `--mbs 4-`."""
    if b.lo == b.hi:
        return f"--{name} {b.lo}"
    return f"--{name} {b.lo}-{b.hi if b.bounded_above() else ''}"


def check_reachable(job: Job, space: Space) -> None:
    """Exit 2 (InputError) naming the flags where the search's space within the user's bounds is
    empty before any memory is asked, and the same job's space without them is not. Not where
    the global batch is what the bounds cannot split (a micro-batch, the data-parallel size, the
    pipeline schedule's micro-batches): the search answers "no" there (exit 1) and offers the
    larger batch that fits (`suggest.explain_infeasible`)."""
    if job.pools:  # the pooled search reads none of the bounds (pools_suggest refuses them)
        return
    if space.recompute == ("selective",):  # a Megatron job's per-op policy has no rung
        v = selective_policy.per_op(job, Layout(recompute="selective"))
        if v is not None:
            raise InputError(f"--recompute selective: {v.field}: {v.message}")
    if _nonempty(job, space):
        return
    # the same job without the user's bounds, with the ZeRO stages its settings run with (what
    # the search itself keeps of them, `top_k.job_zero_stages`)
    zeros = job_zero_stages(job, Space().zero_stages)
    relaxed = Space(framework=space.framework, zero_stages=zeros, tp_across_nodes=True)
    if not zeros or not _nonempty(job, relaxed):
        return  # the job itself: the search says why (explain_infeasible)
    why, batch_bound = _why(job, space)
    if batch_bound:
        # the global batch is what the bounds cannot split: the answer "no" (exit 1) with the
        # batch that would fit as its change (`suggest.explain_infeasible`, JSON `changes`), as
        # a job's batch is the user's to change, not a contradiction among the flags
        return
    raise InputError(why)


def _nonempty(job: Job, space: Space) -> bool:
    """Whether the search has a layout to size: a structure (`space.structures`: the degrees
    within the bounds and Megatron's or torchtitan's rules on them) with a ZeRO stage the space
    searches on it (`space.zero_stages`) and a (micro-batch size, vpp, split) its schedule runs
    (`space.options`). Every layout the search scores is one of these with a recompute rung
    (`top_k.search`, after `top_k.job_zero_stages` keeps fewer stages, and each of torchtitan's
    setting variants, `titan_variants`, over a narrower space): where there is none, the search
    finds nothing. torchtitan's under each dp_replicate its search tries (`_replicas`)."""
    for rjob, rspace in _replicas(job, space):
        for s in space_mod.each_structure(rjob, rspace, Counter()):
            lay = s.layout()
            if space_mod.zero_stages(rjob, rspace, lay) and space_mod.options(rjob, rspace, s):
                return True
    return False


def _replicas(job: Job, space: Space) -> list[tuple[Job, Space]]:
    """The job and the space it is searched over: for torchtitan one of each per dp_replicate r
    the search tries (`titan_variants.variants`, over dp at least r: `Variant.space`), as the
    ZeRO stage a layout runs reads r (`space.zero_stages`: its shard group dp / r x cp)."""
    if job.framework != "torchtitan":
        return [(job, space)]
    from planner.search import titan_variants  # torchtitan's alone (as `suggest.search_rows`)

    out = []
    for r in dict.fromkeys(v.replicate for v in titan_variants.variants(job)):
        rspace = titan_variants.Variant(replicate=r).space(space)
        if rspace is not None:
            titan = job.titan.model_copy(update={"dp_replicate": r})
            out.append((replace(job, torchtitan=titan), rspace))
    return out


def _values(xs: list[int] | set[int]) -> str:
    vs = sorted(xs)
    return ", ".join(map(str, vs[:6])) + (", ..." if len(vs) > 6 else "")


def _given(space: Space, names: tuple[str, ...]) -> str:
    """The flags among `names` the user gave (bounds other than suggest's defaults), or ''."""
    default = Space()
    given = [
        flag_text(k, getattr(space, k)) for k in names if getattr(space, k) != getattr(default, k)
    ]
    return " ".join(given)


def _degrees(n: int, space: Space) -> list[Degrees]:
    """Every (tp, cp, pp, dp) within the bounds whose product is the GPU count."""
    ds = divisors(n)
    return [
        (tp, cp, pp, n // (tp * cp * pp))
        for tp in ds
        if space.tp.admits(tp)
        for cp in ds
        if space.cp.admits(cp) and (n // tp) % cp == 0
        for pp in ds
        if space.pp.admits(pp) and (n // (tp * cp)) % pp == 0
        if space.dp.admits(n // (tp * cp * pp))
    ]


def _why(job: Job, space: Space) -> tuple[str, bool]:
    """The first of the search's filters that leaves no layout within the bounds, and why; and
    whether that filter reads the global batch (a larger one may pass it)."""
    arch, n = job.arch, job.cluster.num_gpus
    degree_flags = _given(space, ("tp", "cp", "pp", "dp")) or "the default bounds"
    tuples = _degrees(n, space)  # not empty: suggest._check_degrees refused that
    # 1. TP within the scale-up domain: `space.structures` skips every tp above it unless
    # --tp-across-nodes (`--tp 16` on 8-GPU H100 nodes), so no layout has such a tp.
    domain = job.cluster.domain_used or n  # of each domain, the GPUs the job holds
    if not space.tp_across_nodes:
        inside = [t for t in tuples if t[0] <= domain]
        if not inside:
            tps = _values({t[0] for t in tuples})
            what = "" if degree_flags == flag_text("tp", space.tp) else f" leave tp {tps} only,"
            span = job.cluster.tiers[0].span_gpus or n
            used = (
                "" if domain == span else f"; the job holds {domain} of each: gpus_per_domain_used"
            )
            return (
                f"{degree_flags}:{what} beyond the scale-up domain ({span} GPUs of "
                f"{job.cluster.gpu.name} share NVLink{used}): the search spans it with TP only "
                "under --tp-across-nodes",
                False,
            )
        tuples = inside
    # 2. A pipeline rank holds a decoder layer at least (`space._structure_rule`: pp exceeds
    # num_layers; Megatron splits whole layers over the ranks).
    if not (within := [t for t in tuples if t[2] <= arch.num_layers]):
        return (
            f"{degree_flags}: pp {_values({t[2] for t in tuples})} only, above {arch.name}'s "
            f"{arch.num_layers} layers (a pipeline rank holds a layer at least)",
            False,
        )
    tuples = within
    # 3. The ZeRO stages the search tries on the degrees (`space.zero_stages`, which depends on
    # nothing else): Megatron-FSDP (2, 3) only at pp 1 and cp 1 (`--zero 2 --pp 2`, `--zero 3
    # --cp 2`: every structure is FSDP_UNSEARCHED); torchtitan's FSDP2 (3) wherever its shard
    # group dp / dp_replicate x cp > 1 and replication (0) where it is 1
    # (`rules.torchtitan.sharding`), whatever pp is, under each dp_replicate searched.
    replicas = _replicas(job, space)
    staged = [
        t
        for t in tuples
        if any(
            rs.dp.admits(t[3]) and space_mod.zero_stages(rj, rs, _layout(t)) for rj, rs in replicas
        )
    ]
    if not staged:
        zero = ",".join(map(str, space.zero_stages))
        if space.framework == "torchtitan":
            pairs = [
                (r, t[3] // r * t[1])
                for t in tuples
                for rj, rs in replicas
                if rs.dp.admits(t[3]) and t[3] % (r := rj.titan.dp_replicate) == 0
            ]
            return (
                f"--zero {zero} with {degree_flags}: torchtitan shards with FSDP2 (ZeRO 3) "
                f"where its shard group dp / dp_replicate x cp > 1 and replicates (ZeRO 0) "
                f"where it is 1; the bounds leave shard groups {_values({g for _, g in pairs})} "
                f"(dp_replicate {_values({r for r, _ in pairs})})",
                False,
            )
        pp_cp = _values({t[1] * t[2] for t in tuples})
        return (
            f"--zero {zero} with {degree_flags}: the search runs Megatron-FSDP (ZeRO 2, 3) at "
            "pp 1 and cp 1 only (Megatron-LM's tests never run it with pp or cp > 1; `planner "
            f"check` takes such a plan), and the bounds leave pp x cp {pp_cp}: allow ZeRO 0 or "
            "1, or pp 1 and cp 1",
            False,
        )
    tuples = staged
    # 4. The experts split evenly over ep (`space._expert_options` tries the divisors only).
    experts = arch.num_moe_experts or 1
    eps = [e for e in divisors(experts) if space.ep.admits(e)]
    if not eps:
        return f"{flag_text('ep', space.ep)}: no divisor of {arch.name}'s {experts} experts", False
    # 5. The rules on the degrees alone (`rules.STRUCTURAL_RULES`, as `space.structures` applies
    # them to every structure): `--cp 16 --seq-length 100` on 16 GPUs leaves one structure (tp,
    # pp, dp 1), which breaks `rules.context.context`: Megatron-LM d98e8a64 arguments.py:1335-1336
    # asserts seq_length % (2 x cp) == 0 (the load-balanced ring's 2 x cp chunks), and 100 % 32
    # is 4; torchtitan's seq_len_divisor is tp x 2cp (`rules.torchtitan`), the same bound.
    structs = [
        s
        for s in space_mod.structures(job, space, Counter())
        if space_mod.zero_stages(job, space, s.layout())
    ]
    if not structs:
        return _broken_structures(job, space, tuples, eps)
    return _no_option(job, space, structs)


def _layout(t: Degrees) -> Layout:
    tp, cp, pp, dp = t
    return Layout(tp=tp, cp=cp, pp=pp, dp=dp)


def _broken_structures(
    job: Job, space: Space, tuples: list[Degrees], eps: list[int]
) -> tuple[str, bool]:
    """Every structure within the bounds breaks a rule on its degrees: the two rules most of them
    break, each with one structure's message."""
    broken: Counter[str] = Counter()
    said: dict[str, str] = {}
    for tp, cp, pp, dp in tuples:
        etps = sorted({1 if e == "1" else tp for e in space.expert_tp}) if job.arch.is_moe else [tp]
        for ep in eps:
            for etp in etps:
                s = Structure(tp, cp, pp, dp, ep, etp, exchange_for(job, tp, cp))
                lay = s.layout()
                v = next((v for r in rules.STRUCTURAL_RULES if (v := r(job, lay))), None)
                if v is not None:
                    broken[v.rule] += 1
                    said.setdefault(v.rule, v.message)
    total = sum(broken.values())
    top = "; ".join(f"{said[k]} ({k}: {c} of {total})" for k, c in broken.most_common(2))
    flags = _given(space, ("tp", "cp", "pp", "dp", "ep")) or "the default bounds"
    return f"{flags}: every parallel structure within them breaks a rule: {top}", "batch" in broken


def _no_option(job: Job, space: Space, structs: list[Structure]) -> tuple[str, bool]:
    """Structures pass, but none has a (micro-batch size, vpp) its schedule runs
    (`space.options`)."""
    L, gbs = job.arch.num_layers, job.global_batch_size
    vflag = flag_text("vpp", space.vpp)
    free = free_form(space)

    def vpps(s: Structure) -> list[int]:
        return [v for v in vpp_candidates(L, s.pp, space.uneven, free) if space.vpp.admits(v)]

    # 6. vpp: interleaving needs pipelines (`rules.parallel.vpp`, either framework: Megatron-LM
    # d98e8a64 arguments.py:1000-1009 asserts pp > 1 with a virtual pipeline size; and
    # `splits.vpp_candidates` gives pp 1 vpp 1 only), so `--pp 1 --vpp 2` has no layout. With
    # pipelines the search gives every virtual stage a decoder layer, pp x vpp <= num_layers
    # (`splits.vpp_candidates`: even splits L / (pp x vpp) >= 1, the first/last and ACCOUNTED
    # forms fewer, the free form up to L // pp per rank), so `--pp 2 --vpp 17` (34 > 32) and
    # `--pp 16 --vpp 3` (48 > 32) on Llama 3.1 8B's 32 layers have none. Megatron's layout
    # string takes empty virtual stages, and torchtitan up to L + 2 stages (b5bcd76c
    # distributed/pipeline_parallel.py:390-395), but the search plans neither, and the message
    # says it is the search's bound. With uneven splits every vpp up to L // pp has a split (the
    # free form), so otherwise only --no-uneven's even splits leave none.
    if not (with_vpp := [s for s in structs if vpps(s)]):
        pps = {s.pp for s in structs}
        if pps == {1}:
            pinned = flag_text("pp", space.pp) if space.pp != Space().pp else ""
            got = f"got {pinned}" if pinned else f"{_given(space, ('tp', 'cp', 'dp'))} leave pp 1"
            return f"{vflag}: needs pp > 1 ({got})", False
        piped = sorted(p for p in pps if p > 1)
        most = max(L // p for p in piped)
        pflags = _given(space, ("tp", "cp", "pp", "dp")) or "the default bounds"
        if space.vpp.lo > most:
            top = ", ".join(f"{L // p} at pp {p}" for p in piped[:4])
            return (
                f"{vflag} with {pflags}: pp x vpp virtual stages exceed {job.arch.name}'s {L} "
                f"layers; the search gives each virtual stage a decoder layer (vpp at most {top})",
                False,
            )
        flags = f"{_given(space, ('tp', 'cp', 'pp', 'dp', 'vpp'))} --no-uneven".lstrip()
        return (
            f"{flags}: no even split of {L} layers over pp {_values(set(piped))} "
            "with a vpp within the bounds (an even split needs pp x vpp to divide num_layers)",
            False,
        )

    # 7. The micro-batch divides each data-parallel rank's share of the global batch (Megatron-LM
    # d98e8a64 num_microbatches_calculator.py:381-386 asserts global_batch_size %
    # (micro_batch_size x dp) == 0, `rules.parallel.batch`, and `space.options` tries divisors
    # only; torchtitan's global batch is a multiple of local x dp and the local one of the
    # micro-batch, `inputs.torchtitan_pipeline.batches`): with global batch 64 every dp of 16
    # GPUs leaves a power of two per rank, which `--mbs 3` never divides.
    def sizes(s: Structure) -> list[int]:
        return [m for m in divisors(gbs // s.dp) if space.mbs.admits(m)]

    if not (with_mbs := [s for s in with_vpp if sizes(s)]):
        dps = {s.dp for s in with_vpp}
        shares = _values({gbs // d for d in dps})
        flags = _given(space, ("mbs", "tp", "cp", "pp", "dp")) or "the default bounds"
        return (
            f"{flags}: global_batch_size {gbs} over dp {_values(dps)} leaves {shares} sequences "
            "per data-parallel rank, none a multiple of a micro-batch size within the bound "
            "(global_batch_size must be a multiple of micro_batch_size x dp)",
            True,
        )
    # 8. The pipeline schedule runs the step's micro-batches m = global_batch_size / (dp x mbs):
    # Megatron's interleaved one needs m >= pp (in the group the search gives it, `space.group_of`,
    # `rules.parallel.interleaved_microbatches`; vpp 1 always runs), torchtitan's as
    # `torch_schedules.refusal` and `[torchtitan] gradient_accumulation_steps` say
    # (`rules.torchtitan_shapes.schedule`). The most micro-batches a structure gets is its
    # smallest micro-batch size's; that example's rule is named.
    titan = job.framework == "torchtitan"
    example: tuple[int, str, str] | None = None
    for s in with_mbs:
        mbs = min(sizes(s))
        m = gbs // (s.dp * mbs)
        for v in vpps(s):
            rule = torchtitan_shapes.schedule if titan else parallel_rules.vpp
            group = space_mod.group_of(job, s.pp, s.dp, v, mbs)
            lay = s.layout(vpp=v, micro_batch_size=mbs, microbatch_group_size_per_vp_stage=group)
            broken = rule(job, lay)
            if broken is not None and (example is None or m > example[0]):
                where = f"pp {s.pp} vpp {v} dp {s.dp} mbs {mbs}"
                example = (m, where, broken.message)
    flags = _given(space, ("tp", "cp", "pp", "dp", "vpp", "mbs")) or "the default bounds"
    why = "no layout within them runs its pipeline schedule"
    if example is not None:
        _, where, message = example
        why += f": {message} (at {where}, the most micro-batches within them)"
    return f"{flags}: {why}", True
