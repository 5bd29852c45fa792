"""torchtitan's "selective layer every N" activation checkpointing in `planner suggest`: recompute
"full" with `[torchtitan] selective_layer_every = N`, every N-th layer of a rank recomputed whole
(one counter over the rank's chunks in order, torchtitan e347b1e5:
`planner.inputs.titan_every_layers`), the layout carrying N (`Layout.recompute_every`, as
`planner.inputs.plan_layout.layout_from_section` reads a plan) and the models counting each
rank's wrapped layers: memory and time between no recompute and full.

The certified search (`planner.search.top_k`) scores no block recompute for torchtitan, so this
pass adds it once the settings variants are merged (`planner.search.titan_variants`), exactly:
every base layout of every variant whose lower bound (`bound.base_bound`, at its micro-batch size:
no recompute is faster) is no more than the K-th merged step time is tried, with its fastest
fitting N (the largest that fits: a rank recomputes floor(its layers / N) and time grows with
them; which chunks hold them shifts with N, so memory is not monotone in N, and `fewest_every`
asks each N from the largest down rather than bisecting). Such a
candidate is listed unless a setting without it runs the base (with none, per-op selective or
full recompute) at no more step time under any variant, or an earlier variant's every-N
candidate does.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import every_n
from planner.model import cost, memory
from planner.search import rules
from planner.search import space as space_mod
from planner.search.bound import base_bound, below, size_floor
from planner.search.space import Space, Split, Structure
from planner.search.structure_queue import Queued
from planner.search.titan_variants import (
    Merged,
    RowKey,
    TitanCandidate,
    base_of,
    dominated,
    given,
    row_key,
)
from planner.search.top_k import Candidate
from planner.search.twins import Row, fold


def every_options(lay: Layout, num_layers: int) -> list[int]:
    """The N >= 2 of every-N recompute on the base, fewest layers recomputed first (the largest
    N first): up to the most layers any rank holds (above, none is wrapped)."""
    most = max(sum(map(len, chunks)) for chunks in lay.chunk_layers(num_layers))
    return list(range(most, 1, -1))


def every_job(job: Job, n: int) -> Job:
    """The job with `selective_layer_every = n`: what torchtitan's rules read
    (`rules.torchtitan`). The model reads none of it (the layout's block recompute carries it,
    `plan_layout.layout_from_section`), so memory and time are asked of `job` itself, whose
    memos the search has filled."""
    return replace(job, torchtitan=job.titan.model_copy(update={"selective_layer_every": n}))


def plain_fits(job: Job, space: Space, lay: Layout) -> bool:
    """Whether the base fits without recompute (then no every-N layout of it is faster: no
    recompute is faster, tests/search/test_top_k.py)."""
    return memory.estimate(job, lay.with_(recompute="none"), space.headroom_pct, False).fits


def most_every(job: Job, space: Space, lay: Layout) -> memory.MemoryReport | None:
    """The memory of the base's every-N layout with the most layers recomputed (the least
    memory of them all), None where the base has no every-N option."""
    options = every_options(lay, job.arch.num_layers)
    if not options:
        return None
    return memory.estimate(job, every_n(lay, options[-1]), space.headroom_pct, False)


def fewest_every(
    job: Job, space: Space, lay: Layout, most: memory.MemoryReport | None = None
) -> tuple[Candidate, int] | None:
    """The every-N layout of a base with the fewest layers recomputed that fits and that
    torchtitan's rules take, and its N; None where none does. The most layers recomputed is
    asked first (`most_every`, or `most` where the caller asked it: where it does not fit,
    nothing does), then each N from the largest down, the first that fits and that the rules
    take: memory is not monotone in N (where N makes a chunk's last layer the wrapped one, its
    rebuild adds to the peak: QA, Llama 3.1 70B's shape in 12 layers on 32 H100, LoopedBFS, pp 2
    vpp 3, N 6 and 4 over the GPU and 5 under it), so no bisection is exact
    (tests/search/test_titan_variants.py: the merged search against a brute force that tries
    every N of every base)."""
    options = every_options(lay, job.arch.num_layers)
    reports: dict[int, memory.MemoryReport] = {}
    if most is not None and options:
        reports[len(options) - 1] = most

    def fits(i: int) -> bool:
        if i not in reports:
            reports[i] = memory.estimate(job, every_n(lay, options[i]), space.headroom_pct, False)
        return reports[i].fits

    if not options or not fits(len(options) - 1):
        return None
    for i, n in enumerate(options):
        trial = every_n(lay, n)
        if fits(i) and not rules.violations(every_job(job, n), trial):
            return _smallest_of_equals(job, lay, options, i, trial, reports, fits)
    return None


def _smallest_of_equals(
    job: Job,
    lay: Layout,
    options: list[int],
    i: int,
    first: Layout,
    reports: dict[int, memory.MemoryReport],
    fits: Callable[[int], bool],
) -> tuple[Candidate, int]:
    """From the fewest-recompute layout that fits and the rules take (`first`, options[i]), the
    smallest N whose step is as fast: two N can recompute as many layers a rank at other
    positions, the same step with less memory (QA: N 7 and 6 at 3.2260893 s, 77.25 and 76.43
    GiB), and the brute force takes the smallest N of equals (tests/search/
    test_titan_variants.py). Each later option is asked whether it fits (memory is not monotone
    in N, `fewest_every`); the step does not fall, so the first slower one ends the run."""
    n = options[i]
    best = Candidate(first, reports[i], cost.estimate(job, first))
    for k in range(i + 1, len(options)):
        trial = every_n(lay, options[k])
        perf = cost.estimate(job, trial)
        if perf.step_time_s != best.performance.step_time_s:
            break
        if fits(k) and not rules.violations(every_job(job, options[k]), trial):
            best, n = Candidate(trial, reports[k], perf), options[k]
    return best, n


def every_candidates(
    job: Job, space: Space, s: Structure, cut: float | None, known: Queued
) -> Iterator[tuple[Layout, tuple[Candidate, int]]]:
    """Each base of structure `s` (at its first ZeRO stage) that an every-N layout may run
    within `cut`, with that layout (`fewest_every`) and its N. The bases asked are those the
    search's bounds (`planner.search.top_k`: the shape's floors at the largest micro-batch
    first, `bound.below`, no layer times, then the base's own `base_bound`) put at most `cut`,
    whose states fit, that do not fit without recompute, and whose every-N layout with the most
    layers recomputed fits. `known` is what the certified search of the same job and space
    queued of `s` (`structure_queue.Queued`): its bases and the floors of its shapes whose
    states fit (the others hold no layout that fits: none is asked).

    Each shape (vpp, split) is visited from its largest micro-batch down, and a base settled at
    one size is not asked at the smaller ones: where it fits without recompute (it fits at
    every smaller size: memory grows with the micro-batch, as `planner.search.variants` takes
    it), and where its `bound.lower_bound` at this size (`bound.size_floor`, under its
    `base_bound`) exceeds `cut`: that holds at every smaller size too. By the same growth the
    sizes at which the most-recomputed layout fits are the smallest ones: the largest of them is
    bisected once per base (`_most_fit`), and no larger size is asked. Before that bisection a
    base whose step time without recompute is above `cut` is passed (recompute is never faster,
    tests/search/test_top_k.py): most of them are.
    tests/search/test_titan_variants.py checks the merged search against a brute force that
    asks every base."""
    of = known.bases
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    sizes: dict[tuple[int, Split], list[int]] = {}
    for mbs, vpp, split in space_mod.options(job, space, s):
        sizes.setdefault((vpp, split), []).append(mbs)
    for (vpp, split), shape_sizes in sizes.items():
        tops = known.floors.get((vpp, split))
        if tops is None:
            continue
        ascending = sorted(shape_sizes)
        done: set[int] = set()  # bases settled at a larger size for every smaller one
        most: dict[int, tuple[int, dict[int, memory.MemoryReport | None]]] = {}
        for mbs in reversed(ascending):
            for j, base in enumerate(of(mbs, vpp, split)):
                zeros = space_mod.zero_stages(job, space, base.layout)
                if j in done or not zeros:
                    continue
                lay = base.layout.with_(zero_stage=zeros[0])
                if cut is not None and below(job, tops[j], lay) > cut:
                    continue
                if cut is not None and base_bound(job, lay, tops[j]) > cut:
                    if size_floor(job, lay, tops[j]) > cut:  # `bound.lower_bound` at this size
                        done.add(j)  # bounds every smaller size too
                    continue
                if memory.state_floor(job, lay, capacity) > capacity:
                    continue
                plain = lay.with_(recompute="none")
                if cut is not None and cost.estimate(job, plain).step_time_s > cut:
                    continue  # recompute is never faster: no every-N layout of it makes the cut
                if j not in most:
                    upto = [m for m in ascending if m <= mbs]
                    at = [_first_zero(job, space, of(m, vpp, split)[j].layout) for m in upto]
                    most[j] = _most_fit(job, space, at)
                largest, reports = most[j]
                if mbs > largest:
                    continue
                if plain_fits(job, space, lay):
                    done.add(j)
                    continue
                got = fewest_every(job, space, lay, reports.get(mbs))
                if got is not None:
                    yield lay, got


def _first_zero(job: Job, space: Space, lay: Layout) -> Layout:
    return lay.with_(zero_stage=space_mod.zero_stages(job, space, lay)[0])


def _most_fit(
    job: Job, space: Space, ascending: list[Layout]
) -> tuple[int, dict[int, memory.MemoryReport | None]]:
    """The largest micro-batch size of a base's layouts (`ascending` in it) at which its
    most-recomputed every-N layout fits (`most_every`; 0 where none), bisected (it fits at a
    prefix of the sizes: memory grows with the micro-batch), and the reports asked, by size."""
    reports: dict[int, memory.MemoryReport | None] = {}
    lo, hi = 0, len(ascending)  # ascending[:lo] fit, ascending[hi:] do not
    while lo < hi:
        mid = (lo + hi) // 2
        lay = ascending[mid]
        rep = reports[lay.micro_batch_size] = most_every(job, space, lay)
        if rep is not None and rep.fits:
            lo = mid + 1
        else:
            hi = mid
    return (ascending[lo - 1].micro_batch_size if lo else 0), reports


def add_every(job: Job, space: Space, top: int, found: Merged) -> Merged:
    """The merged ranking with the every-N rows that rank among its first `top` (keyed after
    every variant's own, `len(order) + vi`); the job's own selective_layer_every is kept."""
    if "full" not in space.recompute or "selective_layer_every" in given(job):
        return found
    if job.titan.loss_chunks > 1:  # the chunked loss's torchtitan has no every-N option
        return found  # (rules.torchtitan_era.head_era)
    t0 = time.perf_counter()
    extra, scored = _every_rows(job, space, found, top)
    rows = heapq.nsmallest(top, found.rows + extra, key=lambda e: e[0])
    total = replace(
        found.total,
        scored=found.total.scored + scored,
        seconds=found.total.seconds + time.perf_counter() - t0,
    )
    return replace(found, total=total, rows=rows)


def _every_rows(
    job: Job, space: Space, found: Merged, top: int
) -> tuple[list[tuple[RowKey, Row[Candidate]]], int]:
    """The every-N rows that can rank among the first `top` with the merged ones, and how many
    layouts were scored. A structure is visited only where its variant's search queued it with
    a bound not above the K-th merged time (`bound.below` >= that bound, less its 1e-12
    rounding allowance: none of its bases would pass), and not where only torchtitan's Python
    configurations run the structure (`rules.head_era`: they have no every-N option)."""
    order, merged, memo, jobs = found.order, found.rows, found.memo, found.jobs
    cut = merged[top - 1][0][0] if len(merged) >= top else None
    out: list[tuple[RowKey, Row[Candidate]]] = []
    taken: dict[Layout, list[float]] = {}  # base -> earlier variants' every-N times
    scored = 0
    for vi, v in enumerate(order):
        sp = v.space(space)
        if sp is None:
            continue
        vjob = jobs[vi]
        listed: list[Candidate] = []
        for s, known in found.queued[vi].within(cut).items():
            if cut is not None and known.bound * (1 - 1e-12) > cut:
                continue
            if rules.head_era(every_job(vjob, 2), s.layout()) is not None:
                continue  # only the Python configurations run it: no every-N option there
            for lay, got in every_candidates(vjob, sp, s, cut, known):
                scored += 1
                c, n = got
                if cut is not None and c.step_time > cut:
                    continue
                key = base_of(lay)
                if any(t <= c.step_time for t in taken.get(key, [])):
                    continue
                if dominated(jobs, space, order, len(order), c, memo):
                    continue
                taken.setdefault(key, []).append(c.step_time)
                titan = vjob.titan.model_copy(update={"selective_layer_every": n})
                listed.append(TitanCandidate(c.layout, c.memory, c.performance, titan))
        listed.sort(key=lambda c: (c.step_time, row_key(Row(c), 0)[1]))
        # a variant's rows past its first `top` rank below them all; those that may be listed
        # get every stage's memory (the candidates above hold the stages that decide the fit)
        rows = [_whole(vjob, space, r) for r in fold(listed)[:top]]
        out += [(row_key(r, len(order) + vi), r) for r in rows]
    return out, scored


def _whole(job: Job, space: Space, row: Row[Candidate]) -> Row[Candidate]:
    """The row with every stage's memory of its layouts (as `top_k`'s rows have it: a report
    of only the stages that may hold the peak lists fewer stages than `check` does)."""

    def whole(c: Candidate) -> Candidate:
        return replace(c, memory=memory.estimate(job, c.layout, space.headroom_pct))

    return Row(whole(row.candidate), tuple(map(whole, row.equivalents)))
