"""What the search remembers instead of computing again, checked against computing afresh over
the brute-forced problems of tests/search/brute_force.py: the memory premise behind skipping a
rung that did not fit at a smaller micro-batch, the options shared by structures with the same
(dp, pp), the layer-time memo's tuple key, the peak ranks per split and the fixed buffers
computed once per estimate, the bases built once per (vpp, split), the rungs per split, the
EP-overlap base's rungs from the rule's recompute condition, each rank's chunk bytes and
schedule peak (the search's answers themselves:
brute_force.py)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest

from planner.inputs.layout import Layout
from planner.model import (
    buffers,
    in_flight,
    layer_kept,
    memory,
    schedule,
    stage_activations,
    stage_params,
    stage_time,
)
from planner.model.torch_schedules import microbatch_group
from planner.search import rules, rungs
from planner.search import space as space_mod
from tests.search.brute_force import PROBLEMS, layouts_of, sample_layouts, variants_of


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_a_rung_that_does_not_fit_does_not_fit_at_a_larger_micro_batch(name: str) -> None:
    """`variants.best_variants` does not estimate a rung again at a larger micro-batch of the
    same structure, shape, ZeRO stage, dispatcher and overlap once it did not fit at a smaller
    one: over every variant of the problem, fitting never comes back as the micro-batch grows."""
    job, space = PROBLEMS[name]
    series: dict[Layout, list[tuple[int, bool]]] = {}
    for variants in variants_of(name).values():
        for _, _, v in variants:
            rep = memory.estimate(job, v, space.headroom_pct, all_stages=False)
            # the micro-batch group follows the micro-batch count (`space.group_of`)
            key = v.with_(micro_batch_size=0, microbatch_group_size_per_vp_stage=None)
            series.setdefault(key, []).append((v.micro_batch_size, rep.fits))
    checked = 0
    for points in series.values():
        fits = [f for _, f in sorted(points)]
        for a, b in itertools.pairwise(fits):
            assert a or not b, points
            checked += 1
    assert checked > 0 or name == "sc21-1.7b-32xa100"


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_options_depend_on_dp_and_pp_only(name: str) -> None:
    """`top_k.search` asks `space.options` once per (dp, pp): every structure's own options are
    those of the first structure with its dp and pp."""
    job, space = PROBLEMS[name]
    first: dict[tuple[int, int], list[space_mod.Option]] = {}
    structs = space_mod.structures(job, space, Counter())
    for s in structs:
        own = space_mod.options(job, space, s)
        assert first.setdefault((s.dp, s.pp), own) == own, s
    if name == "mixtral-8x7b-16xh100":  # experts and tp vary at the same (dp, pp)
        assert len(first) < len(structs)


@pytest.mark.parametrize("name", ["mixtral-8x7b-16xh100", "llama8b-16xh100-s4096", "llama8b-fp8"])
def test_layer_memo_key_is_the_layer_key(name: str) -> None:
    """`stage_time._memo_key` (a tuple of the fields `_layer_key` keeps) is equal for two
    layouts exactly when their `_layer_key`s are."""
    lays = [v for vs in variants_of(name).values() for _, _, v in vs[::3]]
    by_tuple: dict[tuple[object, ...], Layout] = {}
    by_layout: dict[Layout, tuple[object, ...]] = {}
    for lay in lays:
        t, k = stage_time._memo_key(lay), stage_time._layer_key(lay)
        assert by_tuple.setdefault(t, k) == k
        assert by_layout.setdefault(k, t) == t
    assert len(by_tuple) < len(lays)


def test_memo_key_fields_are_the_layouts_other_fields() -> None:
    names = {f for f in Layout.__dataclass_fields__}
    assert set(stage_time._READ) | set(stage_time._FIXED) == names
    assert not set(stage_time._READ) & set(stage_time._FIXED)


@pytest.mark.parametrize("name", ["mixtral-8x7b-16xh100", "sc21-1.7b-32xa100", "llama8b-fp8"])
def test_peak_ranks_and_fixed_bytes_bit_for_bit(name: str) -> None:
    """The peak ranks remembered per model and split are those computed afresh, and each
    stage of an estimate (the fixed buffers computed once for all of them) is `stage_memory`
    on its own, bit for bit."""
    job, space = PROBLEMS[name]
    for base in sample_layouts(name, 30):
        for _, _, v in variants_of(name)[base][::4]:
            chunks = v.chunk_layers(job.arch.num_layers)
            ranks = memory._peak_candidates(job, v, chunks)
            assert ranks == memory._peak_ranks_of(job, v, chunks)
            assert memory._peak_candidates(job, v, chunks) is ranks
            rep = memory.estimate(job, v, space.headroom_pct)
            fixed = buffers.fixed_bytes(job, v)
            for st in rep.stages:
                alone = memory.stage_memory(job, v, st.stage, chunks[st.stage])
                assert (
                    alone
                    == st
                    == memory.stage_memory(job, v, st.stage, chunks[st.stage], fixed=fixed)
                )
            fast = memory.estimate(job, v, space.headroom_pct, all_stages=False)
            assert fast.stages == tuple(rep.stages[r] for r in ranks)


def test_peak_ranks_are_per_model() -> None:
    """Two models with the same split do not share remembered peak ranks."""
    job, _ = PROBLEMS["mixtral-8x7b-16xh100"]
    lay = Layout(tp=2, pp=4, dp=2, sequence_parallel=True, micro_batch_size=1)
    other = replace(job, arch=job.arch.model_copy(update={"mtp_num_layers": 1}))
    for j in (job, other, job):
        chunks = lay.chunk_layers(j.arch.num_layers)
        assert memory._peak_candidates(j, lay, chunks) == memory._peak_ranks_of(j, lay, chunks)


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_bases_at_another_micro_batch_are_its_bases(name: str) -> None:
    """`top_k` builds a structure's bases once per (vpp, split), at the first micro-batch size
    it asks for, and sets the size for the others (`space.at_micro_batch`): over every option of
    every structure that is `space.bases` at that size, rungs and all."""
    job, space = PROBLEMS[name]
    checked = 0
    for s in space_mod.structures(job, space, Counter()):
        first: dict[tuple[int, tuple[int, ...] | None], list[space_mod.Base]] = {}
        for mbs, vpp, split in space_mod.options(job, space, s):
            own = space_mod.bases(job, s, mbs, vpp, split, space)
            shape = first.setdefault((vpp, split), own)
            assert space_mod.at_micro_batch(shape, mbs, job) == own, (s, mbs, vpp, split)
            checked += shape is not own
    assert checked > 0 or name == "sc21-1.7b-32xa100"


@pytest.mark.parametrize("name", ["mixtral-8x7b-16xh100", "sc21-1.7b-32xa100", "llama8b-fp8"])
def test_rungs_remembered_per_split_are_rungs_afresh(name: str) -> None:
    """`rungs.rungs` remembers a base's rungs per job, split, TP overlap, kinds and offloading:
    for every base layout of the problem they are those computed with nothing remembered."""
    job, space = PROBLEMS[name]
    for base in sample_layouts(name, 80):
        for kinds, offload in ((space.recompute, True), (("none", "full"), False)):
            kept = rungs.rungs(job, base, kinds, offload)
            rungs._RUNGS.clear()
            fresh = rungs.rungs(job, base, kinds, offload)
            assert kept[0] == fresh[0], base.describe()
            assert [(ld.make(ld.lo), ld.lo, ld.hi) for ld in kept[1]] == [
                (ld.make(ld.lo), ld.lo, ld.hi) for ld in fresh[1]
            ], base.describe()


@pytest.mark.parametrize("name", ["mixtral-ep-overlap", "mixtral-8x7b-16xh100"])
def test_overlap_rungs_are_the_rules_own(name: str) -> None:
    """`space.bases` gives a base with the EP all-to-all overlap the rungs
    `rules.recompute_allows_overlap` accepts, instead of asking `rules.expert_overlap` of each:
    on every overlap base of the problem, every rung (each ladder whole) gets the same answer
    from both."""
    job, space = PROBLEMS[name]
    checked = 0
    for base in layouts_of(name):
        if not base.ep_comm_overlap:
            continue
        for r in rungs.every(job, base, space.recompute, space.offload):
            whole_rule = rules.expert_overlap(job, r.on(base)) is None
            assert whole_rule == rules.recompute_allows_overlap(r.recompute, r.modules), r
            checked += not whole_rule
    assert checked > 0


@pytest.mark.parametrize(
    "name", ["sc21-1.7b-32xa100", "llama8b-tiny-memory", "mixtral-8x7b-16xh100"]
)
def test_chunks_kept_and_schedule_peaks_remembered_bit_for_bit(name: str) -> None:
    """`stage_activations` remembers each rank's chunk bytes (per model, layer bytes, chunks and
    recompute / offloading settings) and the schedule's peak over them (per bytes, pp, vpp, group,
    rank, micro-batches and schedule): over the problem's variants (vpp, uneven splits, block
    and uniform recompute, offloading) what is remembered is what `chunk_kept` and
    `schedule_peak` give afresh."""
    job, _ = PROBLEMS[name]
    arch = job.arch
    checked = 0
    for variants in list(variants_of(name).values())[::3]:
        for _, _, v in variants[::2]:
            sh = stage_activations.shard(job, v)
            per = stage_activations.per_layer(arch, sh)
            m = max(v.num_microbatches(job.global_batch_size), 1)
            sched = schedule.schedule_name(job, v)
            group = microbatch_group(job, v)
            for rank, chunks in enumerate(v.chunk_layers(arch.num_layers)):
                kept = layer_kept.chunks_kept(arch, v, (per,) * len(chunks), chunks)
                assert kept == tuple(layer_kept.chunk_kept(arch, v, per, c) for c in chunks)
                peak = stage_activations._peak(kept, v, rank, m, sched, group)
                assert peak == in_flight.schedule_peak(kept, v, rank, m, sched, group)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("name", ["mixtral-8x7b-16xh100", "sc21-1.7b-32xa100", "llama70b-uneven"])
def test_stage_params_remembered_bit_for_bit(name: str) -> None:
    """`stage_params` remembers each rank's parameters per model, splitting degrees, pp,
    MTP rank, rank and chunks: over the problem's layouts (and an MTP model's) they are those
    computed afresh."""
    job, _ = PROBLEMS[name]
    mtp_job = replace(job, arch=job.arch.model_copy(update={"mtp_num_layers": 1}))
    checked = 0
    for j in (job, mtp_job):
        for lay in sample_layouts(name, 60):
            for rank, chunks in enumerate(lay.chunk_layers(j.arch.num_layers)):
                got = stage_params.stage_params(j, lay, rank, chunks)
                assert got == stage_params._stage_params(j, lay, rank, chunks), lay.describe()
                checked += 1
    assert checked > 0
