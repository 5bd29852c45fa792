"""The assumptions the certified search rests on, each checked on the brute-forced problems of
tests/search/brute_force.py: ZeRO 1 dominates ZeRO 0 and no ZeRO stage is faster than a lower
one; no memory-saving rung is faster than none, and along a ladder memory never grows and time
never falls; the structure and base lower bounds are below every layout they bound; the state
floor is below every micro-batch size and recompute."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, reframe
from planner.model import cost, memory
from planner.search import bound as bounds
from planner.search import rules, rungs
from planner.search import space as space_mod
from planner.search import variants as variants_mod
from planner.search.rungs import NONE
from planner.search.space import Space
from tests.search.brute_force import PROBLEMS, make_job, sample_layouts, variants_of
from tests.search.brute_force_space import base_variants


@pytest.mark.parametrize("name", ["llama8b-16xh100-s4096", "mixtral-8x7b-16xh100", "llama8b-fp8"])
def test_zero1_never_slower_never_bigger_than_zero0(name: str) -> None:
    """The dominance the search relies on to skip ZeRO 0 whenever ZeRO 1 is allowed."""
    job, _ = PROBLEMS[name]
    for base in sample_layouts(name, 40):
        for rung in rungs.every(job, base, space_mod.RECOMPUTE_ORDER, offload=True)[::3]:
            z0 = rung.on(base.with_(zero_stage=0))
            z1 = rung.on(base.with_(zero_stage=1))
            assert cost.estimate(job, z1).step_time_s <= cost.estimate(job, z0).step_time_s, z1
            assert memory.estimate(job, z1).peak <= memory.estimate(job, z0).peak, z1


@pytest.mark.parametrize("name", ["llama8b-tiny-memory", "mixtral-expert-tp", "llama8b-fp8"])
def test_no_rung_is_faster_than_none_and_ladders_trade_memory_for_time(name: str) -> None:
    """The dominance the search and the reference rely on: on a base, no rung (recompute,
    offloading) is faster than none with the same TP overlap, nor, where the overlap pays
    (`variants.overlap_pays`), than none with it; along a ladder (block N, offload k) memory
    never grows and time never falls as N or k grows, so the smallest that fits is the fastest
    that fits."""
    job, _ = PROBLEMS[name]
    for base in sample_layouts(name, 8):
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
    base_bound (its EP-overlap spares raising it somewhere where some layout has the overlap),
    and those floors' lower_bound and base_bound the bounds' own, bit for bit."""
    job, _ = PROBLEMS[name]
    variants = variants_of(name)
    groups: dict[tuple[int, ...], list[Layout]] = {}
    for lay in variants:
        key = (lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp)
        groups.setdefault(key, []).append(lay)
    checked = cut_sooner = unmerged = 0
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
            merged = replace(top, spare_worst=0.0, spare_total=0.0)  # every pass merged
            unmerged += floor > bounds.below(job, merged, lay)
            for _, _, v in variants[lay]:
                exact = cost.estimate(job, v).step_time_s
                assert bound <= exact * (1 + 1e-12), (v.describe(), bound, exact)
                assert own <= exact * (1 + 1e-12), (v.describe(), own, exact)
                checked += 1
    assert checked > 0
    assert cut_sooner > 0 or all(lay.pp == 1 for lay in variants)
    # the passes that run alone under Megatron's EP overlap raise bounds.below where it is on
    assert (unmerged > 0) == any(lay.ep_comm_overlap for lay in variants)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_state_floor_below_every_micro_batch_and_recompute(name: str) -> None:
    """memory.state_floor, on which the search rejects a ZeRO stage before estimating its
    recompute variants, is no more than the peak `estimate` (the search's fast path) finds for
    any micro-batch size and recompute policy of that layout, and does not depend on them."""
    job, space = PROBLEMS[name]
    floors: dict[tuple[object, ...], float] = {}
    checked = 0
    for lay in sample_layouts(name, 60):
        for z, _, v in base_variants(job, space, lay)[::5]:
            floor = memory.state_floor(job, v)
            peak = memory.estimate(job, v, all_stages=False).peak
            assert floor <= peak, (v.describe(), floor, peak)
            shape = (v.tp, v.cp, v.pp, v.dp, v.ep, v.expert_tp, v.vpp, v.pipeline_layers, z)
            assert floors.setdefault(shape, floor) == floor, v.describe()
            checked += 1
    assert checked > 0


def test_ep_overlap_twin_is_never_slower_but_holds_a_layer_more() -> None:
    """The EP-overlap twin dominance (`space.Base.twin_takes`) rests on time alone: with
    pipelines the overlap only hides all-to-all time, but the merged forward and backward hold one
    MoE layer's activations more (stage_activations), so a plain variant can fit where its twin
    with the same rung does not. Checked on a layout of the brute-forced Mixtral EP-overlap
    problem where exactly that happens (pp 4 x vpp 8, the attention and the pre-MLP norm
    offloaded: 76.4 against 77.6 GiB of 77.25; with the attention alone, as checked before, the
    plain variant no longer fits since the MoE working set counts the experts' bf16 input and
    GLU gradients, 2026-12-06). Both pass the rules (the overlap needs vpp > 1 at pp > 1)."""
    job, space = PROBLEMS["mixtral-ep-overlap"]
    plain = Layout(
        tp=1,
        pp=4,
        dp=8,
        ep=4,
        vpp=8,
        moe_token_dispatcher_type="flex",
        moe_flex_dispatcher_backend="deepep",
        offload_modules=("core_attn", "attn_proj", "mlp_norm"),
        zero_stage=1,
        recompute="none",
    )
    twin = plain.with_(ep_comm_overlap=True)
    assert not rules.violations(job, plain) and not rules.violations(job, twin)
    assert cost.estimate(job, twin).step_time_s <= cost.estimate(job, plain).step_time_s
    plain_mem = memory.estimate(job, plain, space.headroom_pct)
    twin_mem = memory.estimate(job, twin, space.headroom_pct)
    assert twin_mem.peak > plain_mem.peak
    assert plain_mem.fits and not twin_mem.fits


COVER_JOBS = {
    **{name: PROBLEMS[name][0] for name in ("mixtral-8x7b-16xh100", "mixtral-expert-tp")},
    # PyTorch's per-op policy, torchtitan's (Megatron-LM has none: rules.selective_policy)
    "llama8b-titan-per-op": reframe(PROBLEMS["llama8b-tight-selective"][0], "torchtitan"),
    "deepseek-v3-256xh800": make_job("deepseek-v3", "h800-sxm-80gb", 256, 4096, 1024),
    "qwen3-235b-64xh100": make_job("qwen3-235b-a22b", "h100-sxm-80gb", 64, 4096, 256),
}
"""MoE jobs (every module set and fine-grained offloading rung there is): the brute-forced
Mixtral problems, and DeepSeek-V3 (MLA, a dense MLP, shared experts) and Qwen3 235B beside
them, their bases sampled as the search builds them; and PyTorch's per-op checkpointing under
torchtitan (one selective rung, whatever its modules say)."""


@pytest.mark.parametrize("name", list(COVER_JOBS))
def test_a_covering_rung_holds_no_more_memory(name: str) -> None:
    """The premise of `StageRungs.fits` skipping a rung covered by one that did not fit
    (`rungs.covers`: every module recomputed or offloaded there is recomputed or offloaded in the
    covering rung too): on every stage the covering rung holds no more, so its shortfall is no
    less either; every pair of a base's single rungs, at ZeRO 1 (the states do not read the
    rung)."""
    job = COVER_JOBS[name]
    pairs = 0
    for lay in _sampled_bases(job, 12):
        single, _ = rungs.rungs(job, lay, space_mod.RECOMPUTE_ORDER, offload=True)
        reps = {r: memory.estimate(job, r.on(lay.with_(zero_stage=1))) for r in single}
        for lean, r in itertools.permutations(single, 2):
            if not rungs.covers(lean, r):
                continue
            pairs += 1
            a, b = reps[lean], reps[r]
            for x, y in zip(a.stages, b.stages, strict=True):
                assert x.total <= y.total * (1 + 1e-12), (lean, r, lay.describe())
            assert a.shortfall <= b.shortfall + 1e-6 * abs(b.shortfall), (lean, r, lay.describe())
    assert pairs > 0


def _sampled_bases(job: Job, count: int) -> list[Layout]:
    """About `count` base layouts of the default space (the first option of each structure),
    evenly spaced."""
    space = Space()
    out: list[Layout] = []
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        out += [b.layout for b in space_mod.bases(job, s, *opts[0], space)] if opts else []
    return out[:: max(len(out) // count, 1)]


def test_leaner_first_puts_every_rung_after_those_that_cover_it() -> None:
    """`rungs.leaner_first`'s order, on DeepSeek-V3's rungs with and without the TP overlap (its
    module sets and offloading rungs): the rungs without the overlap first, and no rung before
    one that covers it."""
    job = COVER_JOBS["deepseek-v3-256xh800"]
    lay = next(b for b in _sampled_bases(job, 40) if b.tp_comm_overlap)
    single, _ = rungs.rungs(job, lay, space_mod.RECOMPUTE_ORDER, offload=True)
    order = rungs.leaner_first(single)
    assert sorted(order, key=repr) == sorted(single, key=repr)
    overlap = [r.tp_overlap for r in order]
    assert overlap == sorted(overlap) and any(overlap) and not all(overlap)
    covered = 0
    for i, r in enumerate(order):
        for lean in order[i + 1 :]:
            assert not rungs.covers(lean, r), (lean, r)
        covered += any(rungs.covers(lean, r) for lean in order[:i])
    assert covered > 0
