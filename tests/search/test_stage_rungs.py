"""planner.search.stage_rungs and the bounds it reads, each against its oracle:
`variant_bound.variant_bound` against the exact model (`cost.estimate`) on every rung and ZeRO
stage of sampled bases, and its cheaper form without the exposed host offloading against it;
`rank_groups.rank_values` (a rank's mix once per group of ranks with the same mix, its value
once per group or, under the EP overlap, per rank) against one call per rank, bit for bit;
`StageRungs.fastest` (rungs estimated in order of their bound, while they may be the fastest)
against the plain minimum over every rung that fits, each estimated. The search's answers
themselves: tests/search/test_top_k.py's brute force."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, memory
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.stage_offload import offload_exposed
from planner.model.stage_time import LayoutTimes, ep_exposed, layout_times
from planner.search import rank_groups, rungs
from planner.search import space as space_mod
from planner.search.space import Space, Structure
from planner.search.stage_rungs import StageRungs
from planner.search.variant_bound import offloads, variant_bound
from tests.search.brute_force import PROBLEMS, make_job, sample_layouts

NAMES = [
    "llama8b-tiny-memory",
    "mixtral-ep-overlap",
    "sc21-1.7b-32xa100",
    "llama8b-nvfp4-bf16-ends",
    "qwen7b-small-memory",
    "llama70b-l40s-shared-link",
]


def _deepseek() -> tuple[Job, Space, list[Layout]]:
    """DeepSeek-V3 on 512 H800 at pp 16 (its MTP depth on the last rank, dense first layers,
    fine-grained offloading's rungs), with TP (and its overlap) and without."""
    job = make_job("deepseek-v3", "h800-sxm-80gb", 512, 4096, 512)
    space = Space()
    lays = []
    for s in (Structure(1, 1, 16, 32, 32, 1), Structure(2, 1, 16, 16, 16, 2)):
        for mbs, vpp, split in space_mod.options(job, space, s)[::2]:
            lays += [b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space)]
    return job, space, lays


def _cases(name: str, count: int) -> tuple[Job, Space, list[Layout]]:
    if name == "deepseek-v3":
        job, space, lays = _deepseek()
        return job, space, lays[:: max(len(lays) // count, 1)]
    job, space = PROBLEMS[name]
    return job, space, sample_layouts(name, count)


def _variants(job: Job, space: Space, base: Layout, step: int) -> list[Layout]:
    return [
        rung.on(base.with_(zero_stage=z))
        for z in space_mod.zero_stages(job, space, base)
        for rung in rungs.every(job, base, space.recompute, space.offload)[::step]
    ]


@pytest.mark.parametrize("name", [*NAMES, "deepseek-v3"])
def test_variant_bound_below_every_variant(name: str) -> None:
    job, space, bases = _cases(name, 10)
    checked = 0
    for base in bases:
        for lay in _variants(job, space, base, 3):
            b = variant_bound(job, lay)
            exact = cost.estimate(job, lay).step_time_s
            assert b is None or b <= exact, (lay.describe(), b, exact)
            checked += b is not None
            # without the offloading's waits: no more than the whole bound, the same where the
            # layout offloads nothing (the term it leaves out is 0 there)
            cheap = variant_bound(job, lay, offload=False)
            assert (cheap is None) == (b is None)
            if cheap is not None and b is not None:
                assert cheap == b if not offloads(lay) else cheap <= b, lay.describe()
    assert checked > 0


@pytest.mark.parametrize("name", [*NAMES, "deepseek-v3"])
def test_rank_values_are_one_call_per_rank(name: str) -> None:
    """Grouped ranks give each rank's value bit for bit, whatever of its mix the value reads
    (block recompute, fine-grained offloading, the MTP rank, bf16 layers, EP overlap), and
    whatever of its rank (fine-grained offloading's waits read its place in the pipeline)."""
    job, space, bases = _cases(name, 10)
    for base in bases:
        for lay in _variants(job, space, base, 2):
            t = layout_times(job, lay)

            def value(
                rank: int, chunks: tuple[range, ...], lay: Layout = lay, t: LayoutTimes = t
            ) -> float:
                mix, heads = rank_mix(job, lay, rank, chunks, t)
                c, fwd, bwd, rec, tp, tp_h, cp, cp_h, ep, ep_s = mix_sums(mix)
                terms = (c, fwd, bwd, rec, tp, tp_h, cp, cp_h, ep, ep_s, heads * t.out)
                return sum(x * 3.0**i for i, x in enumerate(terms))

            ranks = list(enumerate(lay.chunk_layers(job.arch.num_layers)))

            def own(
                rank: int, v: float, lay: Layout = lay, t: LayoutTimes = t, ranks: list = ranks
            ) -> float:
                return v + 3.0**11 * offload_exposed(job, lay, rank, ranks[rank][1], t)

            per_rank = [own(r, value(r, c)) for r, c in ranks]
            got = rank_groups.rank_values(job, lay, t, value, own)
            assert got == per_rank, lay.describe()
            # a value that reads its mix alone, said so: once per group, the same list
            plain = [value(r, c) for r, c in ranks]
            alike = rank_groups.rank_values(job, lay, t, value, lambda r, v: v, ranked=False)
            assert alike == plain, lay.describe()
            # a value that reads the rank beyond its mix (the EP overlap's unmerged share)
            share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)

            def exposed(
                rank: int, v: float, lay: Layout = lay, t: LayoutTimes = t, share: float = share
            ) -> float:
                return v + ep_exposed(lay, rank, t.m, v, v / 2, share, v / 4)[0]

            per_rank = [exposed(r, value(r, c)) for r, c in ranks]
            assert rank_groups.rank_values(job, lay, t, value, exposed) == per_rank, lay.describe()


@pytest.mark.parametrize(
    "name", ["llama8b-tiny-memory", "llama70b-l40s-shared-link", "deepseek-v3"]
)
def test_fastest_is_the_plain_minimum(name: str) -> None:
    """The lazy pick is the first of the fastest fitting rungs, as estimating every rung gives
    it; with a limit below that time none, at it or above the same pick."""
    job, space, bases = _cases(name, 8)
    picked = 0
    for base in bases:
        for z in space_mod.zero_stages(job, space, base):
            zbase = base.with_(zero_stage=z)
            every = rungs.every(job, base, space.recompute, space.offload)
            fitting = [
                (cost.estimate(job, r.on(zbase)).step_time_s, i)
                for i, r in enumerate(every)
                if memory.estimate(job, r.on(zbase), space.headroom_pct, all_stages=False).fits
            ]
            want = min(fitting, default=None)

            def stage(zbase: Layout = zbase) -> StageRungs:
                return StageRungs(job, zbase, space.headroom_pct, ("test",), {}, Counter())

            got = stage().fastest(every, None)
            assert (got is None) == (want is None), zbase.describe()
            if want is None or got is None:
                continue
            assert got[0] == every[want[1]], (zbase.describe(), got[0], every[want[1]])
            assert stage().fastest(every, want[0] * (1 - 1e-6)) is None
            for limit in (want[0], want[0] * 1.01):
                again = stage().fastest(every, limit)
                assert again is not None and again[0] == every[want[1]]
            picked += 1
    assert picked > 0


def test_rank_values_tell_block_recompute_apart() -> None:
    """Two middle ranks with the same layers but chunks of other lengths (3 + 5 and 4 + 4)
    recompute different counts under block recompute of 4: their values differ, as one call per
    rank gives them."""
    job = make_job("llama3.1-8b", "h100-sxm-80gb", 32, 8192, 64)
    stages = ("E" + "t" * 4, "t" * 3, "t" * 4, "t" * 4, "t" * 4, "t" * 5, "t" * 4, "t" * 4 + "L")
    lay = Layout(tp=1, pp=4, dp=8, vpp=2, pipeline_layout=stages)
    lay = lay.with_(recompute="full", recompute_method="block", recompute_num_layers=4)
    t = layout_times(job, lay)

    def value(rank: int, chunks: tuple[range, ...]) -> float:
        return mix_sums(rank_mix(job, lay, rank, chunks, t)[0])[3]  # the rank's recompute

    per_rank = [value(r, c) for r, c in enumerate(lay.chunk_layers(job.arch.num_layers))]
    assert per_rank[1] != per_rank[2]
    assert rank_groups.rank_values(job, lay, t, value, lambda rank, v: v) == per_rank
