"""`schedule.unmerged_share` is remembered (the search asks it of every rank of every layout it
times with Megatron's EP overlap): a function of its integers alone, so the remembered answer is
the computed one. Oracle: the function itself, uncached (`__wrapped__`), over every argument of
a grid, asked twice (the second from the memo); and by hand, warm-up over total (pp 4, vpp 2,
rank 0, m 8: 3 x 2 + 1 x 4 warm-up forwards and the overlap's one more, of 16)."""

from __future__ import annotations

import itertools

from planner.model import schedule


def test_the_remembered_share_is_the_computed_one() -> None:
    grid = itertools.product((1, 2, 4, 16), (1, 2, 3), range(4), (1, 3, 8, 240), (None, 2, 6))
    for pp, vpp, rank, m, group in grid:
        if rank >= pp:
            continue
        fresh = schedule.unmerged_share.__wrapped__(pp, vpp, rank, m, group)
        assert schedule.unmerged_share(pp, vpp, rank, m, group) == fresh
        assert schedule.unmerged_share(pp, vpp, rank, m, group) == fresh
    assert schedule.unmerged_share(4, 2, 0, 8) == 11 / 16
