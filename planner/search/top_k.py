"""The layout search behind `planner suggest`: bound, score exactly, certify.

The space (DESIGN.md section 4, issue "suggest"): tp, cp, pp, dp, ep (and expert-tp), vpp,
micro-batch size (and so the number of micro-batches), pipeline split, ZeRO stage, recompute.

1. Structures. Every (tp, cp, pp, dp, ep, etp) whose product is the GPU count and that passes
   Megatron's rules on those degrees and the user's pins and bounds (`Space`) is a structure.
   Each rule that removes some is counted.
2. Bound. For each structure a lower bound on the step time of every layout in it: the step's
   compute at the largest micro-batch (GEMM efficiency only grows with the micro-batch), without
   recompute, plus the expert all-to-all, or with Megatron's EP overlap only what of it outlasts
   the compute (`planner.cost.compute_floor`), plus a share of the TP traffic and the CP
   exchange's charge (`planner.search.bound.lower_bound`). A structure is queued first on a
   floor under that bound, from one shape and without memory, and its states and bound are
   computed only when it may come next (`planner.search.structure_queue`): the structures come
   in the same order, and those whose floor is above the final cut never cost more than it.
3. Score. Structures are expanded in order of their bound: every (micro-batch size, vpp, pipeline
   split), shapes (vpp, split) in order of their own bound and none above the K-th best, and base
   layout (with and, where Megatron allows it, without the EP all-to-all overlap),
   each with its cheapest memory-feasible (ZeRO stage, recompute) variants scored by the exact
   model (`planner.memory`, `planner.cost`). A variant (z, r) is only scored when no variant with
   less sharding and less recompute fits, since those are never slower (ZeRO 1 over 0: same
   traffic, sharded optimizer step; tests/test_search.py checks it); with pipelines the layout
   without the EP overlap is only tried with full recompute, the one policy Megatron bars from
   the overlap (the overlap holds no more memory there and only hides time).
   Two passes over the structures, in that order (`_search`): a survey first scores each shape's
   smallest micro-batch size alone (where memory leaves the fastest layouts most often), so the
   K-th best time falls early, then the expansion scores every option the survey did not, each
   against the K-th best so far. The order only decides how soon the cut falls: every option
   whose shape's bound is not above the final K-th best is scored in one pass or the other,
   against a cut no lower than that (the cut only falls), so the same layouts make the top K;
   and layouts that tie on `rank_key` (their simplicity alike: the same degrees but expert-TP,
   vpp and micro-batch size, so the same options of each shape) fall in the same pass, in the
   order one pass scores them, so ties rank alike. Only what the cut spares (`scored`,
   `rejected`) depends on the order (tests/search/test_search_survey.py: the same rows as one
   pass on every brute-forced problem).
4. Certify. Once the K-th best exact time is no worse than the next structure's bound, no layout
   left can enter the top K: the result is the exact top K of the model (the brute-force test
   enumerates every layout to prove it). With `fold_twins` the K-th best is the K-th row of the
   ranking folded by `planner.search.twins` (layouts that only trade cp for micro-batch size at
   the same step time share a row): every layout no slower than that row's time has then been
   scored, and so every twin of the first K rows (a twin has its row's time); the scored layouts
   are kept down to that time, not to a count, so none of them is dropped.

The space itself (structures, options, base layouts, variants) is `planner.search.space`; one
base's variants, scored with their shortcuts, `planner.search.variants`.
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import memory
from planner.search.shape_counts import VppCounts
from planner.search.space import (
    RECOMPUTE_ORDER,
    Option,
    Space,
    options,
    structures,
    zero_stages,
)
from planner.search.splits import Split
from planner.search.structure_queue import (
    Bases,
    Queued,
    ShapeSizes,
    StructureQueue,
    layouts_in,
    shape_sizes,
)
from planner.search.twins import TWIN_REL_TOL, Ranked, Row, fold, same_time
from planner.search.variants import Candidate, best_variants, bound_exits

__all__ = ["Candidate", "Queued", "SearchResult", "rank_key", "search", "simplicity"]


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
        int(not lay.even_split),
    )


def rank_key(c: Ranked) -> tuple[float, tuple[int, ...]]:
    """Step time first; `simplicity` breaks exact ties (of twins, the fewest cp ranks first;
    a pooled search's plans too)."""
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
    """Structures expanded before the bound certified the top K (by the expansion pass; the
    survey before it visits them too)."""
    rejected: Counter[str] = field(default_factory=Counter)
    """Removed: structures by the first rule they break (rule ids of planner.rules), layouts by
    memory."""
    seconds: float = 0.0
    rows: list[Row[Candidate]] = field(default_factory=list)
    """The candidates as rows of twins (`planner.search.twins`): folded with `fold_twins`, else
    one row per candidate."""
    queued: StructureQueue | None = None
    """The search's queue of structures: `StructureQueue.within(cut)` gives what it knows of
    each that may hold a layout no slower than `cut` (`Queued`), in `space.structures`' order;
    one not there holds no layout that fits (no micro-batch / vpp its schedule takes, or no
    shape whose states fit in some ZeRO stage), or none within `cut`."""


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


def _pass(kept: list[Option], surveying: bool, surveyed: bool) -> Iterator[Option]:
    """A structure's options (`kept`: shapes best first, micro-batch sizes ascending within one)
    that one pass scores: the survey each shape's first (its smallest micro-batch size); the
    expansion after it the rest, or every option without one. The lean_fails a structure keeps
    across the passes stay valid: each shape's sizes are still tried smallest first."""
    seen: set[tuple[int, Split]] = set()
    for o in kept:
        first = o[1:] not in seen
        seen.add(o[1:])
        if surveying == first or not surveyed:
            yield o


def search(
    job: Job,
    space: Space | None = None,
    top_k: int = 5,
    progress: Callable[[str], None] | None = None,
    fold_twins: bool = False,
    survey: bool = True,
    ceiling: float | None = None,
) -> SearchResult:
    """The top_k layouts by predicted step time (ties: `simplicity`), certified exact; with
    `fold_twins`, the top_k rows of twins (`planner.search.twins`), each row's layouts all
    scored. Without a `space`, every layout the job's training code runs. `survey` False: one
    pass over the structures (the same answers, more layouts scored: the module docstring).

    `ceiling`: the caller needs no layout slower than this (another search's K-th best, as
    `planner.search.titan_variants` merges several): the cut starts there, so the result is the
    exact top_k of the layouts no slower than it (all of them where fewer; every twin of
    theirs too, the cut widened by `TWIN_REL_TOL`), and may hold slower ones scored on the way."""
    with _cyclic_gc_paused():
        return _search(job, space, top_k, progress, fold_twins, survey, ceiling)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused, and restored after. The search allocates
    hundreds of thousands of short-lived tuples, layouts and reports and remembers many of them:
    the collector, run by allocation counts, would walk the growing memos again and again (a few
    percent of the search) for cycles the search does not make (what it drops, reference
    counting frees). No number depends on it.

    After the search what the process holds is frozen (`gc.freeze`: out of the collector's
    reach) until the next search starts (`_FROZEN`): else the collector's next run, and the
    interpreter's exit, would walk all that the search remembers once more (about 0.1 s after
    DeepSeek-V3's search), and `planner suggest` exits right after it. Unfrozen at the next
    search, none of it stays out of reach longer than until then; nothing is frozen where
    something else froze objects already (it manages its own)."""
    was = gc.isenabled()
    if _FROZEN:
        _FROZEN.clear()
        gc.unfreeze()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not gc.get_freeze_count():
                gc.freeze()
                _FROZEN.append(True)
            gc.enable()


_FROZEN: list[bool] = []
"""[True] while the objects frozen after a search (`_cyclic_gc_paused`) wait for the next."""


def job_zero_stages(job: Job, zeros: tuple[int, ...]) -> tuple[int, ...]:
    """The ZeRO stages of `zeros` the job's settings run with, whatever the layout (the rules
    that read the stage and the job alone; the search sets the stage after every other rule
    has passed): Megatron's Muon not with Megatron-FSDP (`rules.muon`), the CPU-offloaded
    optimizer only with the distributed optimizer or FSDP (`rules.optimizer_offload`), the
    "optim" outer sharding only over ZeRO 3 (`rules.parallel`). torchtitan's stage follows its
    degrees (`space.zero_stages`)."""
    if job.framework == "torchtitan":
        return zeros
    if job.optimizer == "muon":
        zeros = tuple(z for z in zeros if z < 2)
    if job.optimizer_offload_fraction > 0:
        zeros = tuple(z for z in zeros if z >= 1)
    if job.outer_dp_sharding_strategy == "optim":
        zeros = tuple(z for z in zeros if z == 3)
    return zeros


def _search(
    job: Job,
    space: Space | None,
    top_k: int,
    progress: Callable[[str], None] | None,
    fold_twins: bool,
    survey: bool = True,
    ceiling: float | None = None,
) -> SearchResult:
    space = space or Space(framework=job.framework)
    space = replace(space, zero_stages=job_zero_stages(job, space.zero_stages))
    t0 = time.perf_counter()
    rejected: Counter[str] = Counter()
    structs = structures(job, space, rejected)
    # each structure queued on its floor, refined (its states, then its bound over the shapes
    # whose states fit) only when it may come next: `StructureQueue`
    queue = StructureQueue(job, space, rejected)
    space_size = 0
    # `options` reads only s.dp and s.pp: them, their shapes and largest micro-batch size once
    same_opts: dict[tuple[int, int], tuple[list[Option], ShapeSizes, int]] = {}
    alike: dict[tuple[object, ...], VppCounts] = {}  # `layouts_in`'s, keyed on same_opts' sizes
    for i, s in enumerate(structs):
        if (s.dp, s.pp) not in same_opts:
            opts = options(job, space, s)
            same_opts[s.dp, s.pp] = opts, shape_sizes(opts), max((o[0] for o in opts), default=0)
        opts, sizes, top_mbs = same_opts[s.dp, s.pp]
        if not opts:
            rejected["no micro-batch / vpp satisfies the schedule"] += 1
            continue
        of = Bases(job, space, s)
        queue.add(i, s, opts, of, top_mbs)
        space_size += layouts_in(job, space, s, opts, of, sizes, alike)

    best: list[Candidate] = []
    # the least of `ceiling` and _cutoff(best, ...), kept up to date with best
    top = None if ceiling is None else ceiling * (1.0 + TWIN_REL_TOL)
    cut: float | None = top
    scored = expanded = 0
    last_report = t0
    lean: dict[int, dict[tuple[object, ...], int]] = {}  # each structure's lean_fails
    ordered: dict[int, tuple[dict[tuple[int, Split], float], list[Option], list[int]]] = {}

    def cut_now() -> float | None:  # the cut as it falls, for the queue's first pass
        return cut

    for surveying in (True, False) if survey else (False,):
        # the first pass refines the structures it reaches; the next visits them again in the
        # same order (those it did not reach have bounds above the cut, which only falls)
        passing = queue.visit(cut_now) if surveying or not survey else queue.in_order()
        for visited, (bound, i, s, opts, too_big, of, tops) in enumerate(passing, 1):
            if cut is not None and bound > cut:
                break
            expanded += not surveying
            lean_fails = lean.setdefault(i, {})
            # each shape's bound holds at every micro-batch size: shapes best first (micro-batch
            # sizes ascending within one), none whose states fit in no ZeRO stage (not in `tops`:
            # none of its layouts fits), and none from the first whose bound exceeds the cut
            # (the cut only falls); each pass its own options of them (`_pass`), the order made
            # once per structure, and its ZeRO stages (they read its degrees alone)
            if i not in ordered:
                bounds = {k: min(f.lower_bound() for f in fs) for k, fs in tops.items()}
                kept = sorted((o for o in opts if o[1:] in tops), key=lambda o: bounds[o[1:]])
                ordered[i] = bounds, kept, zero_stages(job, space, s.layout())
            shape_bound, kept, zeros = ordered[i]
            for mbs, vpp, split in _pass(kept, surveying, survey):
                if cut is not None and shape_bound[vpp, split] > cut:
                    break
                shape_tops = tops[vpp, split]
                found = 0
                # the bases `best_variants` answers [] for at once (their states too big, or
                # their floor's `below` over the cut), counted alike, without making them
                exits, lead = [False] * len(shape_tops), 0
                if cut is not None:
                    shape = of.shape_layout(mbs, vpp, split)
                    exits, lead = bound_exits(job, space, shape, shape_tops, cut, too_big, zeros)
                if all(exits):
                    if lead:
                        rejected["memory"] += lead * len(exits)
                    continue
                for j, base in enumerate(of(mbs, vpp, split)):
                    if exits[j]:
                        if lead:
                            rejected["memory"] += lead
                        continue
                    floor = shape_tops[j]
                    variants = best_variants(
                        job, space, base, rejected, too_big, cut, lean_fails, floor, zeros
                    )
                    found += len(variants)
                    best += variants
                if found:  # a tighter cut for the next options
                    scored += found
                    best.sort(key=rank_key)
                    best, cut = _kept(best, top_k, fold_twins)
                    if top is not None and (cut is None or cut > top):
                        cut = top
            now = time.perf_counter()
            if progress and now - last_report > 0.5:
                what = "surveyed" if surveying else "searched"
                progress(f"{what} {visited}/{len(structs)} structures, scored {scored} layouts")
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
        queued=queue,
    )
