"""The interleaved schedule's counts as the activations' peak walks them, computed from the
table's chunk column (`megatron_order.table_chunks`), runs of marks (`early_receives.held_counts`)
and a difference array (`early_counts`), and the peak's memo key over the micro-batches
(`in_flight.one_period`). Oracles: brute force over small pipelines, each count walked entry by
entry on Megatron's schedule table (`megatron_order.schedule_table`) as its docstring defines
it, and `schedule_peak` itself at every m for the memo key."""

from __future__ import annotations

import random

from planner.inputs.layout import Layout
from planner.model.early_receives import early_counts, held_counts
from planner.model.in_flight import one_period, schedule_peak
from planner.model.megatron_order import schedule_table, table_chunks, warmup

SMALL = [
    (pp, vpp, m, g)
    for pp in range(1, 7)
    for vpp in range(1, 5)
    for m in range(0, 25)
    for g in range(1, 10)
]


def held_walked(pp: int, vpp: int, rank: int, m: int, g: int) -> tuple[int, ...]:
    """`held_counts` by its definition, entry by entry on the table: after steady forward k
    (op f = warm + k) the next forward's input (none after the step's last; on the first rank
    none into chunk 0), the forward's output (none from the last rank's last chunk), the next
    backward's gradient (backward k runs the table's chunk mirrored: none into the last rank's
    chunk vpp - 1 - 0), the previous backward's input gradient (none before the first; none out
    of the first rank's chunk 0, the table's chunk vpp - 1 mirrored); 1F1B: one each way but
    at the ends, from iteration 1 on."""
    total, first, last = m * vpp, rank == 0, rank == pp - 1
    warm = warmup(pp, vpp, rank, total, g)
    if vpp == 1:
        return tuple(((not last) + (not first)) if k else 0 for k in range(total - warm))
    table = schedule_table(m, vpp, g)
    out = []
    for k in range(total - warm):
        f = warm + k
        nxt = f + 1 < total and (not first or table[f + 1][1] > 0)
        output = not (last and table[f][1] == vpp - 1)
        grad = not (last and table[k][1] == 0)
        prev = k > 0 and not (first and table[k - 1][1] == vpp - 1)
        out.append(nxt + output + grad + prev)
    return tuple(out)


def early_walked(
    pp: int, vpp: int, m: int, g: int, steady_from: int | None = None
) -> tuple[int, ...]:
    """`early_counts` by its definition: each receive posted at iteration k for table entry
    k - (pp - 1) (none for the last chunk), counted at every n from k + 1 (k + 2 where it is
    posted after iteration k's backward: a steady iteration, k >= `steady_from`, without the
    p2p overlap) until its consumer, the micro-batch's next chunk, one n at a time."""
    total = m * vpp
    counts = [0] * (total + 1)
    if vpp < 2 or pp < 2:
        return tuple(counts)
    table = schedule_table(m, vpp, g)
    index = {entry: k for k, entry in enumerate(table)}
    for k in range(pp - 1, total - 1):
        i, c = table[k - (pp - 1)]
        if c == vpp - 1:
            continue
        after = 2 if steady_from is not None and k >= steady_from else 1
        for n in range(k + after, index[(i, c + 1)]):
            counts[n] += 1
    return tuple(counts)


def test_the_chunk_column_is_the_tables() -> None:
    for _, vpp, m, g in SMALL:
        assert table_chunks(m, vpp, g) == tuple(c for _, c in schedule_table(m, vpp, g))


def test_held_counts_walked_entry_by_entry() -> None:
    for pp, vpp, m, g in SMALL:
        for rank in range(pp):
            got = held_counts(pp, vpp, rank, m, g)
            assert got == held_walked(pp, vpp, rank, m, g), (pp, vpp, rank, m, g)
            assert all(type(n) is int for n in got)


def test_early_counts_walked_one_n_at_a_time() -> None:
    for pp, vpp, m, g in SMALL:
        assert early_counts(pp, vpp, m, g) == early_walked(pp, vpp, m, g), (pp, vpp, m, g)


def test_early_counts_without_the_overlap_walked() -> None:
    """Rank 0 without the p2p overlap (`steady_from`: its warm-up, every value up to the step)."""
    for pp, vpp, m, g in SMALL:
        if m > 12:
            continue
        for steady_from in range(m * vpp + 1):
            got = early_counts(pp, vpp, m, g, steady_from)
            assert got == early_walked(pp, vpp, m, g, steady_from), (pp, vpp, m, g, steady_from)


def test_one_period_means_one_peak_at_every_m() -> None:
    """Every m that `one_period` accepts gives `schedule_peak` the same value, bit for bit (the
    memo reads it once for all of them); random chunk bytes, pipelines, groups, schedules,
    messages, with and without held messages, with the p2p overlap or without, the EP overlap's
    merged op or not (the flags `held_counts` and `early_counts` read), m up to 300."""
    rng = random.Random(7)
    names = ("1F1B", "Interleaved1F1B", "InterleavedZeroBubble", "GPipe", "ZBVZeroBubble")
    accepted = 0
    for _ in range(3000):
        pp, vpp = rng.randint(1, 9), rng.randint(1, 5)
        lay = Layout(
            pp=pp,
            vpp=vpp,
            microbatch_group_size_per_vp_stage=rng.choice([None, 3, 7]),
            overlap_p2p_comm=rng.choice([True, False]),  # held_counts' `overlap`
            ep_comm_overlap=rng.choice([True, False]),  # its `merged`
        )
        kept = tuple(rng.random() * 1e9 for _ in range(vpp))
        rank, name = rng.randrange(pp), rng.choice(names)
        group, message = rng.choice([None, None, 2, 5, 8]), rng.choice([0.0, rng.random() * 1e7])
        held = rng.choice([True, False])
        peaks = {
            schedule_peak(kept, lay, rank, m, name, group, message, held)
            for m in range(1, 301)
            if one_period(vpp, lay, rank, m, name, group, message)
        }
        assert len(peaks) <= 1, (pp, vpp, rank, name, group, message)
        accepted += len(peaks)
    assert accepted > 600  # most pipelines have such m
