"""What the search's queue reads of a structure without making its bases: `layouts_in` over a
`structure_queue.Bases` counts every shape's rungs without making them (`shape_counts.total`,
the EP-overlap twins remembered per job under what `rules.expert_overlap` reads, the rung
counts under what `rungs.rungs` reads, and one structure's per-vpp sums
shared with the next that has the same options, pp and TP overlap); `Bases.layouts` and
`Bases.plain_layouts` are the layouts of the bases `space.bases` makes. Oracle: the bases made
afresh per option (`space.bases`), counted base by base, as
tests/search/test_search_setup_memo.py counts them for `layouts_in` without a `Bases`.

The problems: the brute force's, which hold dense and MoE models, EP overlap with and without
pipelines, uneven and pinned splits; and MoE jobs the brute force has not: DeepSeek-V3 (MTP,
EP overlap with vpp), two MTP layers (no EP overlap, `features.expert_overlap`), a hybrid stack
(`hybrid.expert_overlap`) and torchtitan (its rungs filtered, no EP overlap)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from planner.inputs.catalog import get_model
from planner.inputs.plan import Job
from planner.search import space as space_mod
from planner.search.shape_counts import VppCounts
from planner.search.space import Space, Structure
from planner.search.structure_queue import Bases, layouts_in, shape_sizes
from tests.search.brute_force import PROBLEMS, make_job


def _deepseek_two_mtp() -> Job:
    job = make_job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 256)
    two = get_model("deepseek-v3").model_copy(update={"mtp_num_layers": 2})
    return replace(job, arch=two)


EXTRA: dict[str, tuple[Job, Space]] = {
    "deepseek-v3-64xh100": (make_job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 256), Space()),
    "deepseek-v3-two-mtp": (_deepseek_two_mtp(), Space()),
    "nemotron3-nano-16xh100": (
        make_job("nemotron3-nano-30b-a3b", "h100-sxm-80gb", 16, 4096, 64),
        Space(),
    ),
    "qwen3-30b-torchtitan": (
        replace(make_job("qwen3-30b-a3b", "h100-sxm-80gb", 16, 4096, 64), framework="torchtitan"),
        Space(framework="torchtitan"),
    ),
}
CASES = {**PROBLEMS, **EXTRA}


def _count(job: Job, space: Space, s: Structure) -> int:
    """The oracle: over every option, each base's ZeRO stages times its single rungs and each
    ladder's sizes, the bases made afresh (`space.bases`)."""
    total = 0
    for mbs, vpp, split in space_mod.options(job, space, s):
        for b in space_mod.bases(job, s, mbs, vpp, split, space):
            per_zero = len(b.single) + sum(ld.hi - ld.lo + 1 for ld in b.ladders)
            total += len(space_mod.zero_stages(job, space, b.layout)) * per_zero
    return total


@pytest.mark.parametrize("name", sorted(CASES))
def test_layouts_in_counts_without_the_bases(name: str) -> None:
    """Every structure's count from a `Bases` (no base made) is the oracle's, the per-vpp sums
    shared across the structures with the same options as the search shares them."""
    job, space = CASES[name]
    alike: dict[tuple[object, ...], VppCounts] = {}
    sizes_of: dict[tuple[int, int], list[tuple[int, int, object, int]]] = {}
    counted = 0
    for s in space_mod.structures(job, space, Counter()):
        opts = space_mod.options(job, space, s)
        if not opts:
            continue
        sizes = sizes_of.setdefault((s.dp, s.pp), shape_sizes(opts))
        of = Bases(job, space, s)
        got = layouts_in(job, space, s, opts, of, sizes, alike)
        assert not of.memo, "counting made bases"
        assert got == _count(job, space, s), s
        counted += got
    assert counted > 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_layouts_are_the_bases_layouts(name: str) -> None:
    """`Bases.layouts` and `Bases.plain_layouts` of every option, asked before and after the
    bases are made, are the layouts of `space.bases` (all, and those without the EP
    overlap)."""
    job, space = CASES[name]
    checked = 0
    for s in space_mod.structures(job, space, Counter()):
        of = Bases(job, space, s)
        for mbs, vpp, split in space_mod.options(job, space, s)[:24]:
            want = [b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space)]
            plain = [x for x in want if not x.ep_comm_overlap]
            assert of.layouts(mbs, vpp, split) == want
            assert of.plain_layouts(mbs, vpp, split) == plain
            of(mbs, vpp, split)
            assert of.layouts(mbs, vpp, split) == want
            assert of.plain_layouts(mbs, vpp, split) == plain
            checked += 1
    assert checked > 0
