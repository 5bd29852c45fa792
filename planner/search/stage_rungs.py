"""One ZeRO stage of a base layout, as `planner.search.variants.best_variants` tries it: each rung's
memory and step time, estimated at most once (`StageRungs`), and the fastest of the rungs that
fit, found with as few step-time estimates as that takes (`StageRungs.fastest`).

Of the rungs that fit a stage, one is kept: the fastest. Most stages the search reaches keep
none that makes the top K, every rung that fits being slower than the K-th best time so far; an
exact estimate of each says so, but a lower bound on each rung's step time
(`variant_bound.variant_bound`, from its layer times without the DP sync, optimizer and
pipeline sends) mostly says it first. So the rungs that fit are taken in order of that bound and
estimated only while the bound is at most the fastest time found and not above the K-th best:
the stage's fastest (the first of equals) and the stages that keep nothing come out as if every
rung had been estimated (tests/search/test_stage_rungs.py checks the pick against that plain
minimum, tests/search/test_top_k.py the search against a brute force).

Most rungs whose memory is asked do not fit, and most of those are over on the stage of one
rank, the one nearest the capacity in the stage's last estimate: a single rung's memory is asked
of that stage first (`StageRungs._hot_stage`), and estimated whole only where that stage is not
over (tests/search/test_search_setup_memo.py: the same answers as the estimate's).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import buffers, cost, memory, titan_accumulation
from planner.model.memory import MemoryReport
from planner.model.performance import Performance
from planner.search.rungs import Ladder, Rung, Saved, saved, saves_more
from planner.search.twins import same_time
from planner.search.variant_bound import offloads, variant_bound


def slower(t: float, cut: float) -> bool:
    """A step time that cannot make the top K under `cut`: above it and not its twin
    (`twins.same_time`: the kept layouts reach that far above the K-th row's time)."""
    return t > cut and not same_time(t, cut)


@dataclass
class StageRungs:
    """One ZeRO stage of a base (`zbase`, its layout with the stage set): what its rungs'
    memory and step-time estimates said, and what the search remembers across micro-batch
    sizes (`lean_fails`, keyed under `lean_key`: see `best_variants`)."""

    job: Job
    zbase: Layout
    headroom_pct: float
    lean_key: tuple[object, ...]
    lean_fails: dict[tuple[object, ...], int]
    rejected: Counter[str]
    known: dict[Rung, MemoryReport | None] = field(default_factory=dict)
    timed: dict[Rung, Performance] = field(default_factory=dict)
    over: dict[Rung, float] = field(default_factory=dict)
    """Each memory-estimated rung's bytes over the capacity."""
    bounds: dict[Rung, float] = field(default_factory=dict)
    cheap: dict[Rung, float] = field(default_factory=dict)
    """Each rung's bound without its exposed host offloading (`bound`), where it offloads."""
    misfits: list[Saved] = field(default_factory=list)
    """What `rungs.covers` reads (`rungs.saved`) of each rung known not to fit."""
    hot: int = 0
    """The pipeline rank of the stage nearest the capacity in this stage's last memory estimate
    (rank 0 before one): a single rung's memory is asked of that rank's stage first
    (`_hot_stage`)."""
    fixed: dict[bool, tuple[float, float]] = field(default_factory=dict)
    """`buffers.fixed_bytes` of the stage's rungs, by their TP overlap (`_hot_stage`)."""
    lays: dict[Rung, Layout] = field(default_factory=dict)
    """Each rung's layout (`layout_of`)."""
    twin_key: tuple[object, ...] | None = None
    """Where the base has Megatron's EP overlap: the `lean_key` of the same stage of the base
    without it (`space.bases` tries that first), whose failures are this stage's too: with the
    same rung the overlap holds as much and one MoE layer's activations more
    (`stage_activations`: the merged forward and backward), so what did not fit there at this
    micro-batch size or a smaller one does not fit here (tests/search/test_search_shortcuts.py)."""

    def failed(self, *what: object) -> bool:
        """Whether the leanest rungs (`what` empty), or the rung `what`, did not fit the twin
        (`twin_key`) at this micro-batch size or a smaller one."""
        if self.twin_key is None:
            return False
        key = (self.twin_key, *what) if what else self.twin_key
        return self.lean_fails.get(key, math.inf) <= self.zbase.micro_batch_size

    def time_of(self, rung: Rung) -> Performance:
        if rung not in self.timed:
            self.timed[rung] = cost.estimate(self.job, self.layout_of(rung))
        return self.timed[rung]

    def layout_of(self, rung: Rung) -> Layout:
        """`rung.on(zbase)`, made once (its memory, step time and bound each read it)."""
        lay = self.lays.get(rung)
        if lay is None:
            lay = self.lays[rung] = rung.on(self.zbase)
        return lay

    def fits(self, rung: Rung, fails: bool = False) -> MemoryReport | None:
        """The rung's memory report where it fits, else None (each estimated once). Not
        estimated where it is known not to fit: it did not fit at a smaller micro-batch size
        (memory grows with it), nor on the EP-overlap base's twin (`twin_key`), nor without the
        base's TP overlap (the overlap's userbuffers only add memory, `buffers`; `leanest` rests
        on it too), nor did a rung that covers it (`rungs.covers`), or `fails` says so (each
        counted as an estimate; tests/search/test_search_shortcuts.py)."""
        if rung not in self.known:
            mbs = self.zbase.micro_batch_size
            own = self.lean_fails.get((self.lean_key, rung), math.inf) < mbs
            if fails or own or self.failed(rung) or self._leaner_failed(rung):
                self._misfit(rung)
                return None
            lay = self.layout_of(rung)
            fixed = self._fixed(lay)
            hot = self._hot_stage(lay, fixed) if _single(rung) and fixed else None
            if hot is not None and hot.total - self._capacity() > 0:
                self.lean_fails.setdefault((self.lean_key, rung), mbs)
                self._misfit(rung)
                return None
            # the hot stage, where asked, is the estimate's own (not computed again)
            rep = memory.estimate(self.job, lay, self.headroom_pct, False, hot, fixed)
            self.over[rung] = rep.shortfall
            self.hot = rep.worst.stage
            if not rep.fits:
                self.lean_fails.setdefault((self.lean_key, rung), mbs)
                self._misfit(rung)
                return None
            self.known[rung] = rep
        return self.known[rung]

    def _fixed(self, lay: Layout) -> tuple[float, float] | None:
        """The rung's `buffers.fixed_bytes`, as `memory.estimate` computes them on one GPU kind
        (None for pools: the estimate's stages each on their own pool's GPU). They read of a
        rung only its TP overlap (the degrees, the micro-batch size, the dispatcher, its backend
        and SMs, and the TP overlap; a rung sets the recompute and offloading fields besides),
        so the stage's are asked once per overlap (tests/search/test_stage_fixed.py)."""
        job = titan_accumulation.sub_job(self.job)  # as `memory.estimate` takes it
        if job.pools:
            return None
        overlap = lay.tp_comm_overlap
        fixed = self.fixed.get(overlap)
        if fixed is None:
            fixed = self.fixed[overlap] = buffers.fixed_bytes(job, lay)
        return fixed

    def _hot_stage(self, lay: Layout, fixed: tuple[float, float]) -> memory.StageMemory:
        """The stage of rank `hot` alone (`memory.stage_memory`, as `memory.estimate` computes
        each stage of a one-kind job: the same job, layout, rank and chunks, so the same
        figures), with its fixed buffers (`_fixed`: one GPU kind; pools' stages each on their
        own pool's GPU, the estimate alone says). Where it is over the capacity so is the
        layout's worst stage, and it does not fit (the estimate's stages always hold rank 0, and
        `hot` is one of them: the stages that can hold the peak read the split, which no rung
        changes). Its bytes over the capacity are not
        known then: only a single rung's memory is asked this way (a ladder's bisection reads
        them, `smallest_fitting`). Most rungs that do not fit are over on that one stage
        (DeepSeek-V3 on 2,048 H800: 1,659 of the 1,919 its search asks), which spares the
        estimate the other stages; where it is not over, the estimate takes it as its own
        stage of that rank (`memory.estimate`'s `known`) rather than computing it again."""
        job = titan_accumulation.sub_job(self.job)  # as `memory.estimate` takes it
        chunks = lay.chunk_layers(job.arch.num_layers)
        return memory.stage_memory(job, lay, self.hot, chunks[self.hot], fixed=fixed)

    def _capacity(self) -> float:
        job = titan_accumulation.sub_job(self.job)
        return memory.usable_bytes(job.cluster.capacity_bytes, self.headroom_pct)

    def _misfit(self, rung: Rung) -> None:
        """Record that the rung does not fit (`known`, and what `covers` reads of it)."""
        self.rejected["memory"] += 1
        self.known[rung] = None
        what = saved(rung)
        if what is not None:
            self.misfits.append(what)

    def _leaner_failed(self, rung: Rung) -> bool:
        """Whether a rung that holds no more memory did not fit: the rung without the base's TP
        overlap, or one that covers it (`rungs.covers`)."""
        if rung.tp_overlap and self.zbase.tp_comm_overlap:
            lean = rung.without_tp_overlap()
            if lean in self.known and self.known[lean] is None:
                return True
        what = saved(rung) if self.misfits else None
        return what is not None and any(saves_more(m, what) for m in self.misfits)

    def bound(self, rung: Rung, offload: bool = True) -> float:
        """Seconds the rung's step time is at least: its exact time where estimated, else
        `variant_bound.variant_bound` (-inf where that claims none); `offload` False, the
        cheaper one without the exposed host offloading (no more than the other: `fastest`
        asks it first)."""
        if rung in self.timed:
            return self.timed[rung].step_time_s
        whole = offload or not offloads(self.layout_of(rung))
        known = self.bounds.get(rung) if whole else self.cheap.get(rung)
        if known is None:
            b = variant_bound(self.job, self.layout_of(rung), whole)
            known = -math.inf if b is None else b
            (self.bounds if whole else self.cheap)[rung] = known
        return known

    def smallest(self, ladder: Ladder, hi: int) -> int | None:
        """The ladder's smallest n up to `hi` that fits (`smallest_fitting`), remembering under
        `lean_fails` that every n below it (or up to hi, where none fits) does not fit here, nor
        so at any larger micro-batch."""
        floor_key = (self.lean_key, "ladder", ladder.make(0))
        floor = self.lean_fails.get(floor_key, 0)
        if self.twin_key is not None:  # every n the twin's floor excludes fails here too
            floor = max(floor, self.lean_fails.get((self.twin_key, "ladder", ladder.make(0)), 0))
        n = smallest_fitting(ladder, self.fits, self.over.get, hi, floor)
        if hi >= ladder.lo:
            self.lean_fails[floor_key] = max(floor, n or hi + 1)
        return n

    def fastest(self, rungs: list[Rung], limit: float | None) -> tuple[Rung, MemoryReport] | None:
        """The fastest of `rungs` that fits (the first of equals in their order); None where
        none fits, or where the fastest is above `limit` (`slower`: it cannot make the top K).

        They are taken in order of their bound (`bound`), each first by its cheaper bound
        (without the host offloading's exposed seconds, no more than the whole one) and by the
        whole one once that is the least left (a best-first walk over bounds that only grow
        as they are refined, so the rungs reach the estimate in order of their whole bound):
        a rung's memory is estimated (where not yet), and its step time where it fits; once
        the least bound left exceeds the fastest time found no rung left is as fast, so none is
        the first of equals either, and once it is above `limit` none left makes the top K."""
        heap = [
            (self.bound(r, False), not offloads(self.layout_of(r)), i) for i, r in enumerate(rungs)
        ]
        heapq.heapify(heap)
        pick: tuple[float, int] | None = None
        while heap:
            b, whole, i = heapq.heappop(heap)
            if (pick is not None and b > pick[0]) or (limit is not None and slower(b, limit)):
                break
            if not whole:  # the whole bound, back in its place
                heapq.heappush(heap, (self.bound(rungs[i]), True, i))
                continue
            if self.fits(rungs[i]) is not None:
                t = self.time_of(rungs[i]).step_time_s
                pick = min(pick or (t, i), (t, i))
        if pick is None or (limit is not None and slower(pick[0], limit)):
            return None
        rep = self.fits(rungs[pick[1]])
        assert rep is not None
        return rungs[pick[1]], rep


def _single(rung: Rung) -> bool:
    """Whether the rung is none of a ladder's (`rungs.Ladder`: block recompute, whole-layer
    offloading)."""
    return rung.offload == 0 and rung.method != "block"


def smallest_fitting(
    ladder: Ladder,
    fits: Callable[[Rung, bool], MemoryReport | None],
    over: Callable[[Rung], float | None],
    hi: int,
    floor: int = 0,
) -> int | None:
    """The smallest n up to hi whose rung of the ladder fits (memory falls as n grows); None when
    not even n = hi fits. `fits` remembers what it has estimated, and `over` each estimated
    rung's bytes over the capacity (`MemoryReport.shortfall`); each n below `floor` is known not
    to fit (below the smallest that fitted at a smaller micro-batch: memory grows with it).

    The search keeps [lo, hi] with hi fitting and every n < lo not: it probes lo first, then the
    n where the line through the largest n known not to fit and hi crosses the capacity (each
    layer recomputed or offloaded frees about the same bytes, so that is mostly the answer or its
    neighbour), else the midpoint; whatever it probes narrows the range, so it ends, and exactly
    (tests/search/test_top_k.py: memory never grows along a ladder)."""
    if hi < ladder.lo or fits(ladder.make(hi), hi < floor) is None:
        return None
    lo = first = max(ladder.lo, floor)
    last: tuple[int, float] | None = None  # (n, bytes over) of the largest n known not to fit
    while lo < hi:
        top = over(ladder.make(hi))
        if lo == first:
            probe = lo
        elif top is not None and last is not None and last[1] > top:
            n0, s0 = last
            cross = n0 + math.ceil(s0 / (s0 - top) * (hi - n0))
            probe = min(max(cross, lo), hi - 1)
        else:
            probe = (lo + hi) // 2
        if fits(ladder.make(probe), False) is not None:
            hi = probe
        else:
            lo = probe + 1
            short = over(ladder.make(probe))
            last = (probe, short) if short is not None else last
    return hi
