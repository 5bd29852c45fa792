"""Megatron's default gradient sync under the interleaved schedule: each chunk's buckets launched
whole, `rank` backwards after the chunk's last micro-batch's backward
(planner.model.interleaved_sync).

Oracles: Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py read by hand --
with grad_sync_func set (training.py:4356-4357, align_grad_reduce default True) the rank's
backward k launches the chunk whose last micro-batch's backward is table entry k - rank
(:1446-1453; chunk mirrored, :1248), the rest after the last backward (:2063-2068) -- timed on
planner.model.schedule.simulate (an independent event simulation of Megatron's order); a
step-by-step replay of the launched chunks on one link; and hand arithmetic."""

from __future__ import annotations

import random

import pytest

from planner.inputs.layout import Layout
from planner.model import dp_sync, schedule
from planner.model.interleaved_sync import chunk_exposed, chunk_sync


def _table(m: int, vpp: int, g: int) -> list[tuple[int, int]]:
    # get_schedule_table (schedules.py:986-1016): groups of g, the last taking what is left
    return [
        (i, c)
        for first in range(0, m, g)
        for c in range(vpp)
        for i in range(first, m if first + g >= m else first + g)
    ]


@pytest.mark.parametrize(
    ("pp", "vpp", "m", "g"),
    [(4, 6, 6, 6), (4, 2, 8, 4), (4, 3, 8, 8), (8, 4, 12, 12), (4, 3, 10, 5), (3, 4, 8, 5)],
)
def test_each_chunk_launches_as_long_before_the_end_on_every_rank(
    pp: int, vpp: int, m: int, g: int
) -> None:
    # equal stages, forward 1, backward 2 (a chunk backward 2 / vpp): the step ends with rank
    # 0's last backward; rank r launches chunk c at the end of its backward j_c + r (j_c the
    # chunk's last micro-batch's backward), or after its last backward
    bwd = 2.0
    sched = schedule.simulate(pp, m, 1.0, bwd, vpp, group=g)
    end = max(op.end for ops in sched for op in ops)
    table = _table(m, vpp, g)
    total = m * vpp
    for rank, ops in enumerate(sched):
        backwards = [op for op in ops if op.kind == "B"]
        lay = Layout(pp=pp, vpp=vpp, microbatch_group_size_per_vp_stage=g)
        chunked = chunk_sync(bwd, lay, m, rank)
        assert chunked is not None
        _, gap, lead = chunked
        launched = {}
        for k in range(total):
            j = k - rank
            if j >= 0 and table[j][0] == m - 1:
                launched[vpp - 1 - table[j][1]] = backwards[k].end
        for c in range(vpp):
            at = launched.get(c, backwards[-1].end)
            assert end - at == pytest.approx(max(gap * c, lead)), (rank, c)


def _replayed(red: float, vpp: int, gap: float, lead: float) -> float:
    # each chunk's red / vpp launched at its time before the end (0), chunk vpp - 1 first; one
    # link, first come first served: how far past the end the last finishes
    free = -float("inf")
    for c in reversed(range(vpp)):
        start = max(free, -max(gap * c, lead))
        free = start + red / vpp
    return max(free, 0.0)


def test_chunk_exposed_is_the_replayed_link() -> None:
    rng = random.Random(3)
    for _ in range(500):
        vpp = rng.randint(2, 12)
        pp = rng.randint(2, 8)
        rank = rng.randrange(pp)
        last = rng.randint(pp, 3 * pp)  # the last group: at least pp
        chunk = rng.uniform(0.01, 1.0)
        red = rng.uniform(0.0, 3.0 * vpp * last * chunk)
        chunked = (vpp, last * chunk, rank * chunk)
        assert chunk_exposed(red, chunked) == pytest.approx(
            _replayed(red, vpp, last * chunk, rank * chunk)
        )


def test_chunk_zeros_share_shows_on_rank_0_where_one_bucket_did() -> None:
    # hand arithmetic: 6 s of gradients in 60 buckets, pp 4, vpp 3, m 8 (g 4: L 4), one
    # micro-batch's backward 3 s (a chunk 1 s): the chunks launch 8, 4 and 0 s before the end
    # on rank 0: chunk 0's 2 s show whole (max(6 / 3, 6 - 2 x 4) = 2); as buckets became
    # final the window gave max(6 - (1 + 2 x 4) + 3 / 60, 0.1) = 0.1
    lay = Layout(pp=4, vpp=3, dp=8, overlap_grad_reduce=True)
    part = [("nvlink", 6.0, 0.0, 0.1, 0.0)]
    got = dp_sync.windowed(
        part, 0.0, dp_sync.reduce_window(3.0, lay, 8), 3.0, chunk_sync(3.0, lay, 8)
    )
    assert got == pytest.approx((2.0, 4.0))
    # a 20 s sync: 20 - 2 x 4 = 12 s outlast the compute (chunk 2's window is 8 s)
    part = [("nvlink", 20.0, 0.0, 20.0 / 60, 0.0)]
    got = dp_sync.windowed(
        part, 0.0, dp_sync.reduce_window(3.0, lay, 8), 3.0, chunk_sync(3.0, lay, 8)
    )
    assert got == pytest.approx((12.0, 8.0))
    # rank 3 (a drain of 3 chunk backwards): chunk 0's 2 s hide
    assert chunk_exposed(6.0, chunk_sync(3.0, lay, 8, 3) or (1, 0, 0)) == 0.0
