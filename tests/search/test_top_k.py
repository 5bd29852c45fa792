"""planner.search: the certified top K equals a brute-force enumeration under the same exact model.

The reference below enumerates the whole space itself (every degree tuple whose product is the GPU
count, every micro-batch size, every vpp, the pipeline splits, every ZeRO stage and recompute
policy), filters by `planner.search.rules` plus the scale-up-domain and user rules, scores every
memory-feasible layout with `planner.model.cost` and ranks with `search.rank_key`. It shares none of
the search's pruning (no bound, no structure order, no early stop, no skipped variants): only
`space_mod.splits` (which defines the split candidates of a (pp, vpp)), the dominance definitions
(DESIGN.md section 4, the search's docstring: less sharding and recompute; a layout's twin with the
EP all-to-all overlap, `_overlap_twin_dominates`) and the rank key."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import replace
from functools import cache
from typing import Any

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import cost, memory
from planner.search import bound as bounds
from planner.search import rules, rungs
from planner.search import space as space_mod
from planner.search import top_k as search
from planner.search import variants as variants_mod
from planner.search.rungs import NONE
from planner.search.space import Bound, Space
from planner.search.top_k import Candidate

TOP_K = 5


def make_job(
    model: str,
    gpu: str,
    num_gpus: int,
    seq: int,
    gbs: int,
    precision: str = "bf16",
    **cluster: Any,
) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": num_gpus, **cluster},
        "training": {"seq_length": seq, "global_batch_size": gbs, "precision": precision},
    }
    return parse_plan(doc).job


# ----------------------------------------------------------------------------- the reference


def _factorizations(n: int) -> list[tuple[int, int, int, int]]:
    """Every (tp, cp, pp, dp) of positive integers whose product is n."""
    out = []
    for tp in range(1, n + 1):
        if n % tp:
            continue
        for cp in range(1, n // tp + 1):
            if (n // tp) % cp:
                continue
            for pp in range(1, n // (tp * cp) + 1):
                if (n // (tp * cp)) % pp:
                    continue
                out.append((tp, cp, pp, n // (tp * cp * pp)))
    return out


def _user_ok(space: Space, lay: Layout, domain: int) -> bool:
    if lay.tp > domain and not space.tp_across_nodes:
        return False
    degrees = {"tp": lay.tp, "cp": lay.cp, "pp": lay.pp, "ep": lay.ep, "dp": lay.dp}
    degrees |= {"vpp": lay.vpp, "mbs": lay.micro_batch_size}
    return all(getattr(space, k).admits(v) for k, v in degrees.items())


def all_layouts(job: Job, space: Space) -> list[Layout]:
    """Every base layout of the space that Megatron's rules and the user's rules accept (before
    ZeRO and the memory-saving rungs, which `all_variants` expands)."""
    n, arch = job.cluster.num_gpus, job.arch
    L, gbs = arch.num_layers, job.global_batch_size
    domain = job.cluster.tiers[0].span_gpus or n
    out = []
    for tp, cp, pp, dp in _factorizations(n):
        if gbs % dp:
            continue
        sp = tp > 1
        if arch.is_moe:
            experts = arch.num_moe_experts or 1
            eps = [e for e in range(1, experts + 1) if experts % e == 0]
            etps = sorted({1 if e == "1" else tp for e in space.expert_tp})
            dispatchers = list(space.dispatchers)
        else:
            eps, etps, dispatchers = [1], [tp], ["alltoall"]
        for ep, etp, mbs in itertools.product(eps, etps, range(1, space_mod.MAX_MICRO_BATCH + 1)):
            if (gbs // dp) % mbs:
                continue
            for vpp, dispatcher in itertools.product(range(1, L // pp + 1), dispatchers):
                for split in space_mod.splits(job, space, pp, vpp):
                    lay = Layout(
                        tp=tp,
                        pp=pp,
                        dp=dp,
                        cp=cp,
                        ep=ep,
                        etp=etp,
                        vpp=vpp,
                        sequence_parallel=sp,
                        micro_batch_size=mbs,
                        pipeline_layers=split,
                        tp_comm_overlap=sp and space.tp_comm_overlap,
                        moe_token_dispatcher_type=dispatcher,
                        moe_flex_dispatcher_backend=space_mod.flex_backend(job),
                    )
                    if _user_ok(space, lay, domain) and not rules.violations(job, lay):
                        out.append(lay)
                    # Megatron's EP all-to-all overlap instead of the TP one, where it is allowed
                    ep_ov = lay.with_(ep_comm_overlap=True)
                    allowed = space.ep_comm_overlap and not rules.violations(job, ep_ov)
                    if _user_ok(space, ep_ov, domain) and allowed:
                        out.append(ep_ov)
    return out


Variant = tuple[int, int, Layout]
"""(ZeRO stage, the rung's place in `rungs.every`'s order, the layout)."""


def _variants(job: Job, space: Space, base: Layout) -> list[Variant]:
    """Every (ZeRO stage, rung) variant of a base layout that Megatron's rules accept: every
    rung, each ladder whole. ZeRO 0 only where 1 is not allowed (ZeRO 1 is never slower, never
    bigger: tested below); Megatron-FSDP (ZeRO 2 and 3) not with pp or cp > 1."""
    zeros = list(space.zero_stages)
    if 0 in zeros and 1 in zeros:
        zeros.remove(0)
    if base.pp > 1 or base.cp > 1:
        zeros = [z for z in zeros if z < 2]
    out = []
    for z in sorted(zeros):
        for i, rung in enumerate(rungs.every(job, base, space.recompute, space.offload)):
            lay = rung.on(base.with_(zero_stage=z))
            if not rules.violations(job, lay):
                out.append((z, i, lay))
    return out


Variants = dict[Layout, list[Variant]]
"""Each layout of `all_layouts` with its `_variants`."""


def all_variants(job: Job, space: Space) -> Variants:
    return {base: _variants(job, space, base) for base in all_layouts(job, space)}


def reference_top(
    job: Job, space: Space, k: int = TOP_K, variants: Variants | None = None
) -> list[Candidate]:
    """Score every fitting variant of every layout (those of `all_variants(job, space)`, or
    given) and keep, per base, the non-dominated ones: for each ZeRO stage its fastest fitting
    rung (the first in rung order among equals), unless a kept variant of no higher stage is as
    fast. The top k of those, without the layouts their EP-overlap twins dominate."""
    scored = []
    for options in (all_variants(job, space) if variants is None else variants).values():
        fitting: dict[int, list[tuple[float, int, Candidate]]] = {}
        # (stage, TP overlap) where the rung "none" fits, with the overlap or without it
        plain_fits: set[tuple[int, bool]] = set()
        for z, i, lay in options:
            if (z, lay.tp_comm_overlap) in plain_fits:
                continue  # no rung is faster than none with the same TP overlap (tested below)
            rep = memory.estimate(job, lay, space.headroom_pct)
            if rep.fits and _no_saver(lay):
                plain_fits.add((z, lay.tp_comm_overlap))
            if rep.fits:
                c = Candidate(lay, rep, cost.estimate(job, lay))
                fitting.setdefault(z, []).append((c.step_time, i, c))
        kept: list[Candidate] = []
        for z in sorted(fitting):
            best = min(fitting[z], key=lambda f: (f[0], f[1]))[2]
            if not any(c.layout.zero_stage <= z and c.step_time <= best.step_time for c in kept):
                kept.append(best)
        scored += kept
    scored = [c for c in scored if not _overlap_twin_dominates(job, space, c)]
    scored.sort(key=search.rank_key)
    return scored[:k]


def _no_saver(lay: Layout) -> bool:
    """The rung "none" (`rungs.NONE`, with the base's TP overlap or without it)."""
    return (
        lay.recompute == "none" and lay.cpu_offloading_num_layers == 0 and not lay.offload_modules
    )


def _overlap_twin_dominates(job: Job, space: Space, c: Candidate) -> bool:
    """A layout without the EP all-to-all overlap is dominated by its twin with it where Megatron
    accepts that twin and it fits in no more memory at no more step time."""
    lay = c.layout
    if lay.ep_comm_overlap or not space.ep_comm_overlap:
        return False
    twin = lay.with_(ep_comm_overlap=True)
    if rules.violations(job, twin):
        return False
    rep = memory.estimate(job, twin, space.headroom_pct)
    faster = cost.estimate(job, twin).step_time_s <= c.step_time
    return rep.fits and rep.peak <= c.memory.peak and faster


# ----------------------------------------------------------------------------- the problems


PROBLEMS: dict[str, tuple[Job, Space]] = {
    "llama8b-8xh100-s8192": (make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128), Space()),
    "llama8b-16xh100-s4096": (
        # two nodes; micro-batches of at most 4 (a user's upper bound)
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 4096, 64),
        Space(mbs=Bound(1, 4)),
    ),
    "sc21-1.7b-32xa100": (
        # SC21 Table 1's 1.7B row (32 A100, batch 512), 24 layers: vpp 3, 6, 12 and uneven
        # splits; micro-batches of 8 to 16 only (a user's lower bound), ZeRO 3 at the top
        make_job("gpt-sc21-1.7b", "a100-sxm-80gb", 32, 2048, 512),
        Space(mbs=Bound(8, 16)),
    ),
    "mixtral-8x7b-16xh100": (
        # MoE with CP: ep, expert-TP and cp together; micro-batches of 1 and 2 (the top's)
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
        Space(cp=Bound(1, 2), mbs=Bound(1, 2)),
    ),
    "llama8b-pinned": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 8192, 64),
        Space(
            tp=Bound(2, 2),
            pp=Bound(1, 2),
            zero_stages=(1,),
            recompute=("none", "full"),
        ),
    ),
    "llama8b-fp8": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 32, precision="fp8"),
        Space(),
    ),
    "llama8b-tiny-memory": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 16, memory_gib=24),
        Space(zero_stages=(0, 1)),
    ),
    "llama70b-uneven": (
        # no interleaving: the CP-SAT split (41, 39) beats the even one
        make_job("llama3.1-70b", "h100-sxm-80gb", 32, 4096, 64),
        Space(tp=Bound(8, 8), pp=Bound(2, 4), vpp=Bound(1, 1), cp=Bound(1, 1)),
    ),
    "qwen7b-small-memory": (
        # 28 layers: pp 8 has no even split; 20 GiB forces pipelines, CP and sharding
        make_job("qwen2.5-7b", "h100-sxm-80gb", 16, 8192, 64, memory_gib=20),
        Space(tp=Bound(1, 2), vpp=Bound(1, 2)),
    ),
    "mixtral-expert-tp": (
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
        Space(cp=Bound(1, 1), ep=Bound(1, 4), expert_tp=("tp",), recompute=("selective", "full")),
    ),
    "mixtral-ep-overlap": (
        # tp = cp = 1 on H100: where Megatron allows the EP all-to-all overlap
        make_job("mixtral-8x7b", "h100-sxm-80gb", 32, 4096, 128),
        Space(tp=Bound(1, 1), cp=Bound(1, 1)),
    ),
    "mixtral-forced-balance": (
        # random routing: the busiest rank's load falls with the micro-batch's tokens
        # (routing_load.step_load), so the bounds at the largest micro-batch must stay below
        replace(
            make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64),
            moe_router_force_load_balancing=True,
        ),
        Space(cp=Bound(1, 1), tp=Bound(1, 2), pp=Bound(1, 2), mbs=Bound(1, 4)),
    ),
    "llama8b-nvfp4-bf16-ends": (
        # NVFP4 with two bf16 layers at each end: the uneven splits trade the slower bf16
        # layers (bf16_layers) against the rest, and a rank holding one keeps 16-bit inputs
        replace(
            make_job("llama3.1-8b", "b200-sxm-180gb", 8, 8192, 32, "fp4", memory_gib=40),
            bf16_layers_at_start=2,
            bf16_layers_at_end=2,
        ),
        Space(cp=Bound(1, 1), vpp=Bound(1, 2), mbs=Bound(1, 2)),
    ),
    "llama8b-per-op-selective": (
        # PyTorch per-op checkpointing: selective saves memory with flash attention too
        replace(
            make_job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 32, memory_gib=40),
            selective_recompute="per_op",
        ),
        Space(tp=Bound(1, 2), pp=Bound(1, 2), cp=Bound(1, 1), vpp=Bound(1, 1)),
    ),
    "mixtral-states-tight": (
        # 64 GiB: in many structures (little expert or pipeline parallelism) the weights and
        # optimizer state fit in no ZeRO stage, and the search never queues them
        make_job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64, memory_gib=64),
        Space(cp=Bound(1, 1), mbs=Bound(1, 2)),
    ),
    "llama8b-tp-across-nodes": (
        make_job("llama3.1-8b", "h100-sxm-80gb", 16, 8192, 32),
        Space(tp_across_nodes=True, tp=Bound(8, 16), uneven=False),
    ),
}


@cache
def variants_of(name: str) -> Variants:
    """all_variants of a problem, enumerated once for every test below that walks it."""
    return all_variants(*PROBLEMS[name])


def layouts_of(name: str) -> list[Layout]:
    return list(variants_of(name))


@cache
def searched(name: str) -> search.SearchResult:
    """The search's top K of a problem (the function under test), run once for the tests that
    read it."""
    job, space = PROBLEMS[name]
    return search.search(job, space, top_k=TOP_K)


@pytest.fixture(scope="module")
def references() -> dict[str, list[Candidate]]:
    return {name: reference_top(*PROBLEMS[name], variants=variants_of(name)) for name in PROBLEMS}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_top_k_equals_brute_force(name: str, references: dict[str, list[Candidate]]) -> None:
    job, space = PROBLEMS[name]
    ref = references[name]
    res = searched(name)
    assert len(ref) == TOP_K, f"{name}: the reference found only {len(ref)} layouts"
    got = [c.layout for c in res.candidates]
    want = [c.layout for c in ref]
    assert got == want, "\n".join(
        [f"{name}: search vs brute force"]
        + [
            f"  {g.describe():60} {gc.step_time:.6f} | {w.describe():60} {wc.step_time:.6f}"
            for g, gc, w, wc in zip(got, res.candidates, want, ref, strict=False)
        ]
    )
    for g, w in zip(res.candidates, ref, strict=True):
        assert g.step_time == w.step_time
        assert g.memory.peak == w.memory.peak
        assert g.memory.fits
    assert res.scored <= res.space_size
    # K = 1 is the head of the same ranking
    assert [c.layout for c in search.search(job, space, top_k=1).candidates] == want[:1]


def test_problems_exercise_the_space(references: dict[str, list[Candidate]]) -> None:
    """The problems are not trivial: somewhere the top K holds pipeline, CP, EP, uneven splits,
    full recompute and several ZeRO stages (so a wrong bound or dominance rule would show)."""
    tops = [c.layout for cands in references.values() for c in cands]
    assert any(lay.pp > 1 for lay in tops)
    assert any(lay.ep > 1 for lay in tops)
    assert any(lay.ep_comm_overlap for lay in tops)
    assert any(lay.pipeline_layers is not None for lay in tops)
    assert len({lay.zero_stage for lay in tops}) >= 2
    # the TP overlap turned off where its SM margin costs more than it hides (not for memory)
    assert any(lay.sequence_parallel and not lay.tp_comm_overlap for lay in tops)
    # 24 GiB: nothing fits without a memory saver (recompute or offloading), anywhere in the
    # space, and the savers that fit include uniform full recompute, block recompute and a
    # selective module set
    job, space = PROBLEMS["llama8b-tiny-memory"]
    every = reference_top(job, space, k=10**6, variants=variants_of("llama8b-tiny-memory"))
    assert every and all(
        c.layout.recompute != "none"
        or c.layout.cpu_offloading_num_layers
        or c.layout.offload_modules
        for c in every
    )
    kinds = {(c.layout.recompute, c.layout.recompute_method) for c in every}
    assert {("full", "uniform"), ("full", "block"), ("selective", "uniform")} <= kinds
    pinned = references["llama8b-pinned"]
    assert all(c.layout.tp == 2 and c.layout.pp <= 2 and c.layout.zero_stage == 1 for c in pinned)
    assert all(c.layout.recompute in ("none", "full") for c in pinned)
    assert any(c.layout.recompute == "selective" for c in references["llama8b-per-op-selective"])


def test_nothing_fits_matches_brute_force() -> None:
    job = make_job("llama3.1-70b", "h100-sxm-80gb", 8, 8192, 64, memory_gib=16)
    space = Space()
    assert reference_top(job, space) == []
    res = search.search(job, space, top_k=TOP_K)
    assert res.candidates == []
    assert res.space_size > 0
    assert res.rejected["memory"] > 0


# ----------------------------------------------------------------------------- the assumptions


def _sample_layouts(name: str, count: int) -> list[Layout]:
    lays = layouts_of(name)
    step = max(len(lays) // count, 1)
    return lays[::step]


@pytest.mark.parametrize("name", ["llama8b-16xh100-s4096", "mixtral-8x7b-16xh100", "llama8b-fp8"])
def test_zero1_never_slower_never_bigger_than_zero0(name: str) -> None:
    """The dominance the search relies on to skip ZeRO 0 whenever ZeRO 1 is allowed."""
    job, _ = PROBLEMS[name]
    for base in _sample_layouts(name, 40):
        for rung in rungs.every(job, base, space_mod.RECOMPUTE_ORDER, offload=True)[::3]:
            z0 = rung.on(base.with_(zero_stage=0))
            z1 = rung.on(base.with_(zero_stage=1))
            assert cost.estimate(job, z1).step_time_s <= cost.estimate(job, z0).step_time_s, z1
            assert memory.estimate(job, z1).peak <= memory.estimate(job, z0).peak, z1


@pytest.mark.parametrize("name", ["llama8b-8xh100-s8192", "mixtral-8x7b-16xh100", "llama8b-fp8"])
def test_no_zero_stage_is_faster_than_a_lower_one(name: str) -> None:
    """The dominance behind the search's stop once a stage fits without a rung, and behind
    not estimating the plain layout again at a later stage once it was too slow at an earlier
    one: with the same rung, a later ZeRO stage (of those searched: 1, 2, 3 without pipeline
    or context parallelism) is never faster."""
    job, space = PROBLEMS[name]
    checked = 0
    for base in _sample_layouts(name, 40):
        stages = space_mod.zero_stages(space, base)
        for rung in rungs.every(job, base, space_mod.RECOMPUTE_ORDER, offload=True)[::3]:
            times = [
                cost.estimate(job, rung.on(base.with_(zero_stage=z))).step_time_s for z in stages
            ]
            assert all(b >= a for a, b in itertools.pairwise(times)), (rung, base.describe(), times)
            checked += len(stages) > 1
    assert checked > 0


@pytest.mark.parametrize("name", ["llama8b-tiny-memory", "mixtral-expert-tp", "llama8b-fp8"])
def test_no_rung_is_faster_than_none_and_ladders_trade_memory_for_time(name: str) -> None:
    """The dominance the search and the reference rely on: on a base, no rung (recompute,
    offloading) is faster than none with the same TP overlap, nor, where the overlap pays
    (`variants.overlap_pays`), than none with it; along a ladder (block N, offload k) memory
    never grows and time never falls as N or k grows, so the smallest that fits is the fastest
    that fits."""
    job, _ = PROBLEMS[name]
    for base in _sample_layouts(name, 8):
        lay = base.with_(zero_stage=1)
        plain = cost.estimate(job, lay).step_time_s
        plain_off = cost.estimate(job, NONE.without_tp_overlap().on(lay)).step_time_s
        pays = variants_mod.overlap_pays(job, lay)
        assert not pays or plain_off >= plain * (1 - 1e-12), lay.describe()
        single, ladders = rungs.rungs(job, lay, space_mod.RECOMPUTE_ORDER, offload=True)
        for r in single:
            floor = plain if r.tp_overlap or pays else plain_off
            assert cost.estimate(job, r.on(lay)).step_time_s >= floor * (1 - 1e-12), r
        for ladder in ladders:
            steps = [ladder.make(n).on(lay) for n in range(ladder.lo, ladder.hi + 1)]
            peaks = [memory.estimate(job, v).peak for v in steps]
            times = [cost.estimate(job, v).step_time_s for v in steps]
            assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(peaks)), ladder
            assert all(b >= a * (1 - 1e-12) for a, b in itertools.pairwise(times)), ladder


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_lower_bound_below_every_layout_of_its_structure(name: str) -> None:
    """bounds.lower_bound at the structure's largest micro-batch (what the search queues) is no
    more than the exact step time of any layout of that structure, split and vpp; and
    bounds.base_bound (with the pipeline's fill and drain) at a base layout's own micro-batch
    (what the search prunes a base on) no more than any of its
    variants' (ZeRO stages and memory-saving rungs); and bounds.below, from the base's floors at
    the structure's largest micro-batch (what the search checks before base_bound), no more than
    base_bound, and those floors' lower_bound and base_bound the bounds' own, bit for bit."""
    job, _ = PROBLEMS[name]
    variants = variants_of(name)
    groups: dict[tuple[int, ...], list[Layout]] = {}
    for lay in variants:
        key = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp)
        groups.setdefault(key, []).append(lay)
    checked = cut_sooner = 0
    for lays in groups.values():
        top_mbs = max(lay.micro_batch_size for lay in lays)
        # the search takes the least bound over a shape's bases, one per token dispatcher
        shapes = {
            (lay.vpp, lay.pipeline_layers, lay.ep_comm_overlap, lay.moe_token_dispatcher_type)
            for lay in lays
        }
        bound = min(
            bounds.lower_bound(
                job,
                lays[0].with_(
                    micro_batch_size=top_mbs,
                    vpp=v,
                    pipeline_layers=pl,
                    ep_comm_overlap=ov,
                    moe_token_dispatcher_type=d,
                ),
            )
            for v, pl, ov, d in shapes
        )
        for lay in lays:
            own = bounds.base_bound(job, lay)
            at_top = lay.with_(micro_batch_size=top_mbs)
            top = bounds.floors(job, at_top)
            assert top.lower_bound() == bounds.lower_bound(job, at_top)
            assert bounds.base_bound(job, at_top, top) == bounds.base_bound(job, at_top)
            assert bounds.base_bound(job, lay, top) == own  # floors of another size: not read
            floor = bounds.below(job, top, lay)
            assert floor <= own, (lay.describe(), floor, own)
            cut_sooner += lay.pp > 1 and floor > top.lower_bound()
            for _, _, v in variants[lay]:
                exact = cost.estimate(job, v).step_time_s
                assert bound <= exact * (1 + 1e-12), (v.describe(), bound, exact)
                assert own <= exact * (1 + 1e-12), (v.describe(), own, exact)
                checked += 1
    assert checked > 0
    assert cut_sooner > 0 or all(lay.pp == 1 for lay in variants)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_state_floor_below_every_micro_batch_and_recompute(name: str) -> None:
    """memory.state_floor, on which the search rejects a ZeRO stage before estimating its
    recompute variants, is no more than the peak `estimate` (the search's fast path) finds for
    any micro-batch size and recompute policy of that layout, and does not depend on them."""
    job, space = PROBLEMS[name]
    floors: dict[tuple[object, ...], float] = {}
    checked = 0
    for lay in _sample_layouts(name, 60):
        for z, _, v in _variants(job, space, lay)[::5]:
            floor = memory.state_floor(job, v)
            peak = memory.estimate(job, v, all_stages=False).peak
            assert floor <= peak, (v.describe(), floor, peak)
            shape = (v.tp, v.cp, v.pp, v.dp, v.ep, v.expert_tp, v.vpp, v.pipeline_layers, z)
            assert floors.setdefault(shape, floor) == floor, v.describe()
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_search_enumerates_the_whole_space(name: str) -> None:
    """The search's structures and options are exactly the reference's layouts (every vpp with
    a split included, not only the divisors of layers / pp), and space_size counts them times the
    (zero, recompute) variants searched."""
    job, space = PROBLEMS[name]
    ref = set(layouts_of(name))
    got: set[Layout] = set()
    for s in space_mod.structures(job, space, Counter()):
        for mbs, vpp, split in space_mod.options(job, space, s):
            got.update(b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space))
    assert got == ref, (sorted(ref - got, key=str)[:3], sorted(got - ref, key=str)[:3])
    assert searched(name).space_size == sum(len(v) for v in variants_of(name).values())


def test_rank_key_prefers_simpler_on_ties() -> None:
    job, _ = PROBLEMS["llama8b-8xh100-s8192"]
    a = Layout(tp=2, dp=4, sequence_parallel=True, micro_batch_size=1)
    b = a.with_(zero_stage=2)
    perf = cost.estimate(job, a)
    rep = memory.estimate(job, a)
    ca, cb = Candidate(a, rep, perf), Candidate(b, rep, perf)
    assert sorted([cb, ca], key=search.rank_key) == [ca, cb]
    assert search.simplicity(a) < search.simplicity(b)
    assert math.isfinite(perf.step_time_s)
