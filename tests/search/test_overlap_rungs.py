"""`rungs.overlap_rungs` (remembered per job and `rungs`' key) against its unmemoised
definition: the rungs and ladders of `rungs.rungs` that `rules.recompute_allows_overlap`
accepts, on every base of the brute-forced problems with Megatron's EP overlap, the memo filled
by all of them first."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.search import rules, rungs
from planner.search import space as space_mod
from tests.search.brute_force import PROBLEMS


def _allows(r: rungs.Rung) -> bool:
    return rules.recompute_allows_overlap(r.recompute, r.modules)


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "mixtral-expert-tp"])
def test_overlap_rungs_from_the_memo_are_computed_afresh(name: str) -> None:
    job, space = PROBLEMS[name]
    bases = [
        b.layout
        for s in space_mod.structures(job, space, Counter())
        for mbs, vpp, split in space_mod.options(job, space, s)[:2]
        for b in space_mod.bases(job, s, mbs, vpp, split, space)
    ]
    offload = space.offload and job.framework != "torchtitan"
    warm = [rungs.overlap_rungs(job, b, space.recompute, offload) for b in bases]
    assert any(
        len(a) < len(rungs.rungs(job, b, space.recompute, offload)[0])
        for b, (a, _, _) in zip(bases, warm, strict=True)
    )
    for b, (allowed, ladders, as_set) in zip(bases, warm, strict=True):
        single, every_ladder = rungs.rungs(job, b, space.recompute, offload)
        assert allowed == tuple(r for r in single if _allows(r))
        assert ladders == tuple(ld for ld in every_ladder if _allows(ld.make(ld.lo)))
        assert as_set == frozenset(allowed)


def test_only_flex_bases_name_a_flex_backend() -> None:
    """Mixtral on 72 GB200 NVL72 (one NVLink domain over 18 nodes: HybridEP, `flex_backend`):
    the flex bases say hybridep; the all-to-all ones keep the field's default, as check reads
    their plan (a round-trip fuzzer: suggest's row said hybridep, check's deepep)."""
    doc = {
        "model": {"name": "mixtral-8x7b"},
        "cluster": {"gpu": "gb200-nvl72", "num_gpus": 72},
        "training": {"seq_length": 4096, "global_batch_size": 144},
    }
    job = parse_plan(doc).job
    space = space_mod.Space()
    seen = Counter()
    for s in space_mod.structures(job, space, Counter())[:40]:
        for mbs, vpp, split in space_mod.options(job, space, s)[:1]:
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                kind = b.layout.moe_token_dispatcher_type
                seen[kind] += 1
                want = "hybridep" if kind == "flex" else Layout().moe_flex_dispatcher_backend
                assert b.layout.moe_flex_dispatcher_backend == want, b.layout
    assert seen["flex"] and seen["alltoall"], seen
