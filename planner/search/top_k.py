"""The layout search behind `planner suggest`: bound, score exactly, certify.

The space (DESIGN.md section 4, issue "suggest"): tp, cp, pp, dp, ep (and expert-tp), vpp,
micro-batch size (and so the number of micro-batches), pipeline split, ZeRO stage, recompute.

1. Structures. Every (tp, cp, pp, dp, ep, etp) whose product is the GPU count and that passes
   Megatron's rules on those degrees and the user's pins and bounds (`Space`) is a structure.
   Each rule that removes some is counted.
2. Bound. For each structure a lower bound on the step time of every layout in it: the step's
   compute at the largest micro-batch (GEMM efficiency only grows with the micro-batch), without
   recompute, plus the expert all-to-all, or with Megatron's EP overlap only what of it outlasts
   the compute (`planner.cost.compute_floor`).
3. Score. Structures are expanded in order of their bound: every (micro-batch size, vpp, pipeline
   split) and base layout (with and, where Megatron allows it, without the EP all-to-all overlap),
   each with its cheapest memory-feasible (ZeRO stage, recompute) variants scored by the exact
   model (`planner.memory`, `planner.cost`). A variant (z, r) is only scored when no variant with
   less sharding and less recompute fits, since those are never slower (ZeRO 1 over 0: same
   traffic, sharded optimizer step; tests/test_search.py checks it); with pipelines the layout
   without the EP overlap is only tried with full recompute, the one policy Megatron bars from
   the overlap (the overlap holds no more memory there and only hides time).
4. Certify. Once the K-th best exact time is no worse than the next structure's bound, no layout
   left can enter the top K: the result is the exact top K of the model (the brute-force test
   enumerates every layout to prove it). With `fold_twins` the K-th best is the K-th row of the
   ranking folded by `planner.search.twins` (layouts that only trade cp for micro-batch size at
   the same step time share a row): every layout no slower than that row's time has then been
   scored, and so every twin of the first K rows (a twin has its row's time); the scored layouts
   are kept down to that time, not to a count, so none of them is dropped.

The space itself (structures, options, base layouts, variants) is `planner.space`.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.model.cost import Performance
from planner.model.memory import MemoryReport
from planner.search.bound import base_bound, lower_bound
from planner.search.rungs import NONE, Ladder, Rung, leanest
from planner.search.space import (
    RECOMPUTE_ORDER,
    Base,
    Option,
    Space,
    Structure,
    bases,
    layouts_in,
    options,
    structures,
    zero_stages,
)
from planner.search.twins import Row, fold, same_time


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    memory: MemoryReport
    performance: Performance

    @property
    def step_time(self) -> float:
        return self.performance.step_time_s


def simplicity(lay: Layout) -> tuple[int, ...]:
    """Tie-break between equally fast layouts: fewer context-parallel, expert-parallel, pipeline
    and tensor ranks, no interleaving, less sharding and recompute, then larger micro-batches."""
    return (
        lay.cp,
        lay.ep,
        lay.pp,
        lay.tp,
        lay.vpp,
        lay.zero_stage,
        RECOMPUTE_ORDER.index(lay.recompute),
        -lay.micro_batch_size,
        int(lay.pipeline_layers is not None),
    )


def rank_key(c: Candidate) -> tuple[float, tuple[int, ...]]:
    """Step time first; `simplicity` breaks exact ties."""
    return (c.step_time, simplicity(c.layout))


@dataclass
class SearchResult:
    candidates: list[Candidate]
    space_size: int
    """Layouts in the space (every structure x micro-batch x vpp x split x zero x recompute)."""
    scored: int
    """Layouts scored by the exact model."""
    structures: int
    expanded: int
    """Structures expanded before the bound certified the top K."""
    rejected: Counter[str] = field(default_factory=Counter)
    """Removed: structures by the first rule they break (rule ids of planner.rules), layouts by
    memory."""
    seconds: float = 0.0
    rows: list[Row[Candidate]] = field(default_factory=list)
    """The candidates as rows of twins (`planner.search.twins`): folded with `fold_twins`, else
    one row per candidate."""


def _best_variants(
    job: Job,
    space: Space,
    base_of: Base,
    rejected: Counter[str],
    too_big: dict[tuple[object, ...], bool],
    cut: float | None,
    lean_fails: dict[tuple[object, ...], int],
) -> list[Candidate]:
    """The base's non-dominated variants, scored: for each ZeRO stage (`space.zero_stages`) its
    fastest rung that fits (`planner.search.rungs`), unless a variant with no more sharding is as
    fast or faster. No rung is faster than none (they only add recompute or host transfers), and
    no ZeRO stage is faster than a lower one with the same rung, so a base whose first stage fits
    without a rung is done. A ZeRO stage whose weights, gradients, optimizer state and buffers
    alone (`memory.state_floor`) exceed the capacity is rejected without trying a rung (`too_big`
    remembers that per vpp, split and stage of a structure: it holds at every micro-batch size);
    so is one where not even the leanest rungs (full recompute, the most offloading) fit, and
    then at every larger micro-batch of the same shape (`lean_fails` remembers the smallest, and
    each rung, or ladder's n, that did not fit: tests/search/test_search_memo.py). Block
    recompute and offloading are bisected for their smallest setting that fits (their memory falls
    and their time grows with it). A rung without the base's TP overlap is no faster than with
    it: tried only where it does not fit with it (a ladder's, below the smallest n that does).
    A stage whose fastest fitting rung the base's EP-overlap twin
    takes too (`Base.twin_takes`) yields nothing: the twin's variant dominates it. A base whose
    own lower bound (`base_bound`, at its micro-batch size) exceeds `cut`, the K-th best time so
    far, yields nothing either (checked once some ZeRO stage's states fit); nor does a stage
    where the base without memory savers does not fit and its exact time (NONE.on(zbase): no
    rung is faster, tests/search/test_top_k.py) is above `cut`, before any rung is tried."""
    base, single, ladders = base_of.layout, base_of.single, base_of.ladders
    found: list[Candidate] = []
    limit = cut  # `cut` is checked once on the bound; `limit` against each stage's plain time
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    mbs = base.micro_batch_size

    for z in zero_stages(space, base):
        zbase = base.with_(zero_stage=z)
        key = (base.vpp, base.pipeline_layers, z)
        if key not in too_big:
            too_big[key] = memory.state_floor(job, zbase) > capacity
        if too_big[key]:
            rejected["memory"] += 1
            continue
        if cut is not None:
            if base_bound(job, base) > cut:
                return []
            cut = None  # checked once: the bound does not depend on the ZeRO stage
        known: dict[Rung, MemoryReport | None] = {}
        lean_key = (key, base.moe_token_dispatcher_type, base.ep_comm_overlap)

        def fits(
            rung: Rung,
            fails: bool = False,
            *,
            zbase: Layout = zbase,
            known: dict[Rung, MemoryReport | None] = known,
            lean_key: tuple[object, ...] = lean_key,
        ) -> MemoryReport | None:
            if rung not in known:
                # memory grows with the micro-batch: a rung that did not fit at a smaller one
                # (or `fails`: is known not to) does not fit here (counted as an estimate)
                if fails or lean_fails.get((lean_key, rung), math.inf) < mbs:
                    rejected["memory"] += 1
                    known[rung] = None
                    return None
                rep = memory.estimate(job, rung.on(zbase), space.headroom_pct, all_stages=False)
                if not rep.fits:
                    rejected["memory"] += 1
                    lean_fails.setdefault((lean_key, rung), mbs)
                known[rung] = rep if rep.fits else None
            return known[rung]

        feasible: list[tuple[Rung, MemoryReport]] = []
        if NONE in single and (rep := fits(NONE)) is not None:
            feasible.append((NONE, rep))
        else:
            # memory grows with the micro-batch (the options come smallest first): where the
            # leanest rungs did not fit at a smaller one, they do not fit here
            if lean_fails.get(lean_key, math.inf) <= base.micro_batch_size:
                rejected["memory"] += 1
                continue
            if limit is not None and _slower(cost.estimate(job, NONE.on(zbase)).step_time_s, limit):
                continue  # every rung is slower than none at this stage: none makes the top K
            lean = leanest(single, ladders)
            if lean and all(fits(r) is None for r in lean):
                lean_fails[lean_key] = base.micro_batch_size
                continue
            for r in single:
                # without the TP overlap a rung is no faster: only where it does not fit with it
                dominated = not r.tp_overlap and fits(r.with_tp_overlap()) is not None
                if r != NONE and not dominated and (rep := fits(r)) is not None:
                    feasible.append((r, rep))
            smallest: dict[int, int] = {}
            for ld in ladders:
                hi = ld.hi
                if ld.with_tp_overlap is not None and id(ld.with_tp_overlap) in smallest:
                    hi = smallest[id(ld.with_tp_overlap)] - 1  # else the twin is as lean, faster
                floor_key = (lean_key, "ladder", ld.make(0))
                n = _smallest_fitting(ld, fits, hi, lean_fails.get(floor_key, 0))
                if hi >= ld.lo:  # every n below the smallest that fits does not fit
                    lean_fails[floor_key] = max(lean_fails.get(floor_key, 0), n or hi + 1)
                if n is not None:
                    rep = fits(ld.make(n))
                    assert rep is not None
                    feasible.append((ld.make(n), rep))
                    smallest[id(ld)] = n
        scored = [
            Candidate(r.on(zbase), rep, cost.estimate(job, r.on(zbase))) for r, rep in feasible
        ]
        if not scored:
            continue
        pick = min(range(len(scored)), key=lambda i: scored[i].step_time)  # first of equals
        best = scored[pick]
        twin = feasible[pick][0] in base_of.twin_takes
        if not twin and not any(
            c.layout.zero_stage <= z and c.step_time <= best.step_time for c in found
        ):
            found.append(best)
        if feasible[pick][0] == NONE:
            break  # every later stage is no faster than this
    return found


class _Bases:
    """A structure's `space.bases`, each (micro-batch size, vpp, split) built once: the bound,
    the space's size and the expansion ask for the same ones."""

    def __init__(self, job: Job, space: Space, s: Structure) -> None:
        self.job, self.space, self.s = job, space, s
        self.memo: dict[tuple[int, int, tuple[int, ...] | None], list[Base]] = {}

    def __call__(self, mbs: int, vpp: int, split: tuple[int, ...] | None) -> list[Base]:
        key = (mbs, vpp, split)
        if key not in self.memo:
            self.memo[key] = bases(self.job, self.s, mbs, vpp, split, self.space)
        return self.memo[key]


def _states_fit(
    job: Job, space: Space, base: Layout, capacity: float, too_big: dict[tuple[object, ...], bool]
) -> bool:
    """Whether some ZeRO stage's weights, gradients, optimizer state and buffers
    (`memory.state_floor`, a floor under every micro-batch size, rung, token dispatcher and
    overlap of the shape) fit in `capacity`; `too_big` records each stage's answer under
    `_best_variants`'s key, which then need not estimate it again."""
    fit = False
    for z in zero_stages(space, base):
        key = (base.vpp, base.pipeline_layers, z)
        if key not in too_big:
            too_big[key] = memory.state_floor(job, base.with_(zero_stage=z)) > capacity
        fit |= not too_big[key]
    return fit


def _slower(t: float, cut: float) -> bool:
    """A step time that cannot make the top K under `cut`: above it and not its twin
    (`twins.same_time`: the kept layouts reach that far above the K-th row's time)."""
    return t > cut and not same_time(t, cut)


def _smallest_fitting(
    ladder: Ladder, fits: Callable[[Rung, bool], MemoryReport | None], hi: int, floor: int = 0
) -> int | None:
    """The smallest n up to hi whose rung of the ladder fits, by bisection (memory falls as n
    grows); None when not even n = hi fits. `fits` remembers what it has estimated; each n
    below `floor` is known not to fit (below the smallest that fitted at a smaller micro-batch:
    memory grows with it), which `fits` is told, so that the bisection probes as it would."""
    if hi < ladder.lo or fits(ladder.make(hi), hi < floor) is None:
        return None
    lo = ladder.lo
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(ladder.make(mid), mid < floor) is not None:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _cutoff(best: list[Candidate], top_k: int, fold_twins: bool) -> float | None:
    """The step time of the K-th best layout (or, folding twins, of the K-th row), None while
    fewer have been scored: a structure whose bound exceeds it holds nothing of the top K."""
    if not fold_twins:
        return best[top_k - 1].step_time if len(best) >= top_k else None
    rows = fold(best)
    return rows[top_k - 1].candidate.step_time if len(rows) >= top_k else None


def _kept(
    best: list[Candidate], top_k: int, fold_twins: bool
) -> tuple[list[Candidate], float | None]:
    """The scored layouts worth keeping (`best` ranked): the first 4 K, or, folding twins, every
    layout no slower than the K-th row (its twins have its time); and `_cutoff` of them (the
    same as of `best`: what is kept is a prefix of the ranking holding its first K rows, and a
    row depends only on the layouts above it)."""
    cut = _cutoff(best, top_k, fold_twins)
    if not fold_twins:
        return best[: max(top_k, 1) * 4], cut
    if cut is None:
        return best, cut
    return [c for c in best if c.step_time <= cut or same_time(c.step_time, cut)], cut


def search(
    job: Job,
    space: Space | None = None,
    top_k: int = 5,
    progress: Callable[[str], None] | None = None,
    fold_twins: bool = False,
) -> SearchResult:
    """The top_k layouts by predicted step time (ties: `simplicity`), certified exact; with
    `fold_twins`, the top_k rows of twins (`planner.search.twins`), each row's layouts all
    scored. Without a `space`, every layout the job's training code runs."""
    space = space or Space(framework=job.framework)
    t0 = time.perf_counter()
    rejected: Counter[str] = Counter()
    structs = structures(job, space, rejected)
    # bound each structure at its largest micro-batch, for each (vpp, split)
    # (bound, index, structure, options, its too_big, its bases): shapes whose states fit in no
    # ZeRO stage hold no layout that fits, and a structure without any other is never expanded
    queue: list[
        tuple[float, int, Structure, list[Option], dict[tuple[object, ...], bool], _Bases]
    ] = []
    space_size = 0
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    same_opts: dict[tuple[int, int], list[Option]] = {}  # `options` reads only s.dp and s.pp
    for i, s in enumerate(structs):
        if (s.dp, s.pp) not in same_opts:
            same_opts[s.dp, s.pp] = options(job, space, s)
        opts = same_opts[s.dp, s.pp]
        if not opts:
            rejected["no micro-batch / vpp satisfies the schedule"] += 1
            continue
        of = _Bases(job, space, s)
        space_size += layouts_in(job, space, s, opts, of)
        top_mbs = max(o[0] for o in opts)
        too_big: dict[tuple[object, ...], bool] = {}
        bounds = []
        for vpp, split in dict.fromkeys((vpp, split) for _, vpp, split in opts):
            shape = of(top_mbs, vpp, split)
            if _states_fit(job, space, shape[0].layout, capacity, too_big):
                bounds += [lower_bound(job, b.layout) for b in shape]
        if not bounds:
            rejected["memory"] += 1
            continue
        queue.append((min(bounds), i, s, opts, too_big, of))
    heapq.heapify(queue)

    best: list[Candidate] = []
    cut: float | None = None  # _cutoff(best, ...), kept up to date with best
    scored = expanded = 0
    last_report = t0
    while queue:
        bound, _, s, opts, too_big, of = heapq.heappop(queue)
        if cut is not None and bound > cut:
            break
        expanded += 1
        lean_fails: dict[tuple[object, ...], int] = {}
        for mbs, vpp, split in opts:
            found = 0
            for base in of(mbs, vpp, split):
                variants = _best_variants(job, space, base, rejected, too_big, cut, lean_fails)
                found += len(variants)
                best += variants
            if found:  # a tighter cut for the structure's next options
                scored += found
                best.sort(key=rank_key)
                best, cut = _kept(best, top_k, fold_twins)
        now = time.perf_counter()
        if progress and now - last_report > 0.5:
            progress(f"searched {expanded}/{len(structs)} structures, scored {scored} layouts")
            last_report = now

    def whole(c: Candidate) -> Candidate:  # every stage's memory, for the report
        return replace(c, memory=memory.estimate(job, c.layout, space.headroom_pct))

    rows = fold(best) if fold_twins else [Row(c) for c in best]
    rows = [Row(whole(r.candidate), tuple(map(whole, r.equivalents))) for r in rows[:top_k]]
    return SearchResult(
        candidates=[r.candidate for r in rows],
        rows=rows,
        space_size=space_size,
        scored=scored,
        structures=len(structs),
        expanded=expanded,
        rejected=rejected,
        seconds=time.perf_counter() - t0,
    )
