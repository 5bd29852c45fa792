"""Values the search's hot path computes without the general call, each against that call:
a frozen dataclass's hash remembered per object (`job_memo.kept_hash`), against the tuple of its
fields that dataclasses' generated `__hash__` hashes; `Layout.output_rank` in closed form,
against `layout_split.stage_of` of the last virtual stage; `interleaved_sync.chunk_exposed`'s
maxima inline, against `max`; `memory_report.new_stage`, against the dataclass's constructor;
a memory estimate given the layout's fixed buffers, against one that computes them."""

from __future__ import annotations

import math
import random
from dataclasses import fields, replace

from planner.inputs.layout import Layout
from planner.inputs.layout_split import stage_of
from planner.model import buffers, memory
from planner.model.interleaved_sync import chunk_exposed
from planner.model.memory_report import StageMemory, new_stage
from planner.model.shard import Shard
from planner.model.stage_activations import PerLayer, per_layer, shard
from planner.search import rungs
from tests.search.brute_force import make_job


def field_tuple(obj: object) -> tuple[object, ...]:
    return tuple(getattr(obj, f.name) for f in fields(obj))  # type: ignore[arg-type]


def test_kept_hash_is_the_generated_hash_of_the_fields() -> None:
    job = make_job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    lay = Layout(tp=2, pp=4, dp=8, ep=4, sequence_parallel=True, recompute="selective")
    sh = shard(job, lay)
    per = per_layer(job.arch, sh)
    for obj in (sh, per, rungs.FULL, rungs.Rung("full", method="block", num_layers=3)):
        assert hash(obj) == hash(field_tuple(obj))
        assert hash(obj) == hash(obj)  # remembered, the same
    # a copy with a field changed hashes its own fields, not the original's remembered hash
    other = replace(sh, tp=4)
    assert hash(other) == hash(field_tuple(other)) != hash(sh)
    assert other != sh and replace(other, tp=sh.tp) == sh
    assert PerLayer((1.0,), (2.0,), (3.0,)) == PerLayer((1.0,), (2.0,), (3.0,))
    assert Shard(tokens=8) != Shard(tokens=16)


def test_output_rank_is_the_last_stages_rank() -> None:
    for pp in range(1, 13):
        for vpp in range(1, 9):
            for v in (False, True):
                lay = Layout(pp=pp, vpp=vpp, v_stages=v)
                assert lay.output_rank == stage_of(pp, v, pp * vpp - 1)[0]


def exposed_by_max(shares: list[float], chunked: tuple[int, float, float]) -> float:
    """`chunk_exposed` as its docstring writes it, with `max`."""
    _, gap, lead = chunked
    done = worst = 0.0
    for c, share in enumerate(shares):
        done += share
        worst = max(worst, done - max(gap * c, lead))
    return worst


def test_chunk_exposed_inline_maxima_are_max() -> None:
    # bit for bit, signed zeros and NaN as `max` takes them (the first of equals)
    rng = random.Random(3)
    values = [0.0, -0.0, 1.0, 2.5, 1e-9, 3.0, math.nan]
    for _ in range(20000):
        n = rng.randint(0, 6)
        shares = [rng.choice([*values, rng.random()]) for _ in range(n)]
        chunked = (n, rng.choice([*values, rng.random()]), rng.choice([*values, rng.random()]))
        got, want = chunk_exposed(shares, chunked), exposed_by_max(shares, chunked)
        if math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want)


def test_new_stage_is_the_constructors() -> None:
    made = new_stage(3, 10, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
    built = StageMemory(3, 10, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
    assert made == built and repr(made) == repr(built) and hash(made) == hash(built)
    assert list(vars(made)) == [f.name for f in fields(StageMemory)] == list(vars(built))
    assert replace(made, pool="a") == replace(built, pool="a")


def test_estimate_given_its_fixed_buffers() -> None:
    # the search hands the estimate the fixed buffers it asked once per TP overlap
    job = make_job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    for lay in (
        Layout(tp=2, pp=2, dp=2, sequence_parallel=True, tp_comm_overlap=True),
        Layout(tp=1, pp=4, dp=2, vpp=2, recompute="full"),
    ):
        fixed = buffers.fixed_bytes(job, lay)
        for every in (True, False):
            assert memory.estimate(job, lay, all_stages=every, fixed=fixed) == memory.estimate(
                job, lay, all_stages=every
            )
