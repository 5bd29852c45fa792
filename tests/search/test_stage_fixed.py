"""`StageRungs` asks a stage's fixed buffers (`buffers.fixed_bytes`) once per TP overlap: a rung
changes the recompute and offloading fields and may turn the TP overlap off (`Rung.on`), and the
fixed buffers read none of those but the TP overlap (its userbuffers and their streams'
workspaces).

Oracle: `buffers.fixed_bytes` computed afresh on every rung of every base the suggest search
builds for the problems of tests/search/brute_force.py (`MEMO_JOBS`: an MoE model with MTP layers,
MLA and the flex dispatcher, and one without), against the base with only the rung's TP overlap
set; and the hot stage `StageRungs` asks against `memory.stage_memory` computing its own."""

from __future__ import annotations

from collections import Counter

import pytest

from planner.model import buffers, memory
from planner.search import rungs
from planner.search import space as space_mod
from planner.search.stage_rungs import StageRungs
from tests.search.brute_force import MEMO_JOBS, make_job


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_fixed_buffers_read_of_a_rung_only_its_tp_overlap(name: str) -> None:
    job = make_job(*MEMO_JOBS[name])
    space = space_mod.Space()
    checked = 0
    for s in list(space_mod.structures(job, space, Counter()))[::3]:
        opts = space_mod.options(job, space, s)
        for mbs, vpp, split in dict.fromkeys(opts[:1] + opts[-1:]):
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                for r in rungs.every(job, b.layout, space.recompute, True):
                    lay = r.on(b.layout)
                    alike = b.layout.with_(tp_comm_overlap=lay.tp_comm_overlap)
                    assert buffers.fixed_bytes(job, lay) == buffers.fixed_bytes(job, alike)
                    checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", list(MEMO_JOBS))
def test_the_hot_stage_is_the_stage_memory_computes(name: str) -> None:
    job = make_job(*MEMO_JOBS[name])
    space = space_mod.Space()
    checked = 0
    for s in list(space_mod.structures(job, space, Counter()))[::7]:
        opts = space_mod.options(job, space, s)
        for mbs, vpp, split in opts[:1]:
            for b in space_mod.bases(job, s, mbs, vpp, split, space):
                stage = StageRungs(job, b.layout, space.headroom_pct, (), {}, Counter())
                chunks = b.layout.chunk_layers(job.arch.num_layers)
                for r in rungs.every(job, b.layout, space.recompute, True):
                    lay = r.on(b.layout)
                    stage.hot = len(chunks) - 1 - checked % len(chunks)
                    fixed = stage._fixed(lay)  # asked once per TP overlap, as `fits` asks it
                    assert fixed is not None
                    got = stage._hot_stage(lay, fixed)
                    assert got == memory.stage_memory(job, lay, stage.hot, chunks[stage.hot])
                    checked += 1
    assert checked > 100
