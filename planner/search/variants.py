"""One base layout's variants, scored (`best_variants`): the memory-feasible (ZeRO stage,
memory-saving rung) variants of a base that can rank in `planner.search.top_k`'s top K, each
ZeRO stage's fastest that fits (`planner.search.stage_rungs`), with the shortcuts that spare
exact estimates (the bounds of `planner.search.bound`, the state floor, what did not fit at a
smaller micro-batch); and the
structure filter on the states alone (`states_fit`). Each shortcut's proof is in its docstring;
tests/search/test_top_k.py checks the search against a brute force that shares none of them."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, host_memory, memory
from planner.model.memory import MemoryReport
from planner.model.performance import Performance
from planner.model.stage_time import layout_times
from planner.search import dp_floor
from planner.search.bound import Floors, base_bound, below
from planner.search.rungs import FULL, NONE, Rung, leaner_first, leanest
from planner.search.space import Base, Space, zero_stages
from planner.search.stage_rungs import StageRungs, slower


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    memory: MemoryReport
    performance: Performance

    @property
    def step_time(self) -> float:
        return self.performance.step_time_s


def best_variants(
    job: Job,
    space: Space,
    base_of: Base,
    rejected: Counter[str],
    too_big: dict[tuple[object, ...], bool],
    cut: float | None,
    lean_fails: dict[tuple[object, ...], int],
    floor: Floors | None = None,
    zeros: list[int] | None = None,
) -> list[Candidate]:
    """The base's non-dominated variants, scored: for each ZeRO stage (`space.zero_stages`) its
    fastest rung that fits (`planner.search.rungs`), unless a variant with no more sharding is
    as fast or faster. No rung is faster than none (they only add recompute or host transfers),
    so a stage that fits without a rung takes none; every ZeRO stage is tried, since a higher
    one can be faster (ZeRO 3's per-layer gathers hide where ZeRO 1's last buckets show, at one
    micro-batch; ZeRO 0's whole optimizer step is slower than ZeRO 2's: a random-problem fuzz
    against the brute force found both). A ZeRO stage whose weights, gradients, optimizer state
    and buffers alone (`memory.state_floor`) exceed the capacity is rejected without trying a
    rung (`too_big` remembers that per vpp, split and stage of a structure: it holds at every
    micro-batch size); so is one where not even the leanest rungs (full recompute, the most
    offloading) fit, and then at every larger micro-batch of the same shape (`lean_fails`
    remembers the smallest, and each rung, or ladder's n, that did not fit:
    tests/search/test_search_memo.py). Block recompute and offloading are bisected for their
    smallest setting that fits (their memory falls and their time grows with it). Where the
    base's TP overlap pays (`overlap_pays`) a rung without it is no faster than with it: tried
    only where it does not fit with it (a ladder's, below the smallest n that does); where it
    does not, each rung is tried either way, none too (a stage's fastest is then the faster of
    the two when none fits). A stage whose fastest fitting rung the base's EP-overlap twin takes
    too (`Base.twin_takes`) yields nothing where the twin fits with it and (without pipelines,
    `Base.twin_timed`) is no slower: the twin's variant dominates it (the overlap holds one MoE
    layer more, so the twin may not fit). A base whose
    own lower bound (`base_bound`, at its micro-batch size) exceeds `cut`, the K-th best time so
    far, yields nothing either (checked once some ZeRO stage's states fit); `floor`, the base's
    `bound.floors` at its structure's largest micro-batch size (the search has them from
    queueing the structure), bounds base_bound from below without the layer times at this size
    (`bound.below`), and where that exceeds `cut` base_bound is not computed. Nor does a stage
    whose time without memory savers (NONE.on(zbase), and without the TP overlap where that does
    not pay: no rung is faster than both, tests/search/test_top_k.py) is above `cut`, asked
    before its memory (the stage's fastest takes that time where it fits). A stage of a base
    with Megatron's EP overlap skips what did not fit its twin without it
    (`StageRungs.twin_key`), and every stage a rung that a rung which did not fit covers
    (`rungs.covers`: its rungs' memory is asked leaner first). Of the rungs that fit a stage
    only those that may be its fastest, and not above `cut`, are estimated
    (`StageRungs.fastest`); a stage whose fastest is above `cut` yields nothing (it would be
    dropped from the top K, and so would every variant it dominates). Host memory
    (`planner.model.host_memory`) is a budget apart: a stage whose offloaded optimizer alone is
    over it yields nothing, and a rung is picked only where its offloaded activations fit what
    is left (of a ladder, its smallest n that fits the GPU or none: the host's bytes grow with
    n); what the GPU memory's shortcuts remember is the GPU's alone. `zeros`: the ZeRO stages
    tried (`space.zero_stages`, which reads the base's degrees alone), where the caller has them
    for its structure."""
    base, single, ladders = base_of.layout, base_of.single, base_of.ladders
    found: list[Candidate] = []
    limit = cut  # `cut` is checked once on the bound; `limit` against each stage's plain time
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    mbs = base.micro_batch_size
    asked: dict[bool, bool] = {}  # overlap_pays without and with full recompute, once asked

    def pays_for(rung: Rung = NONE) -> bool:
        for full in (False, True)[: 1 + (rung.recompute == "full")]:
            if full not in asked:
                asked[full] = overlap_pays(job, base, full)
            if not asked[full]:
                return False
        return True

    split = base.split_key()  # the same for every ZeRO stage
    for z in zero_stages(job, space, base) if zeros is None else zeros:
        key = (split, z)
        if _too_big(job, base, key, capacity, too_big):
            rejected["memory"] += 1
            continue
        if cut is not None:
            if (floor is not None and below(job, floor, base) > cut) or base_bound(
                job, base, floor
            ) > cut:
                return []
            cut = None  # checked once: the bound does not depend on the ZeRO stage
        zbase = base.with_(zero_stage=z)  # past the bound: most bases stop before it
        # the host's budget for offloaded activations, exact only where its cheap lower bound
        # (the pinned blocks at their ceilings) does not decide (the walk of the pinned pieces
        # is most of a budget's cost, and a roomy host never needs it)
        budget = Budget(job, zbase)
        if budget.below(0.0):  # the offloaded optimizer and the staging alone are over it
            rejected["host memory"] += 1
            continue

        def host_fits(rung: Rung, zbase: Layout = zbase, budget: Budget = budget) -> bool:
            if not rung.offload and not rung.offload_modules:
                return True  # nothing offloaded: the budget is not negative (above)
            fits = not budget.below(host_memory.activation_bytes(job, rung.on(zbase)))
            if not fits:
                rejected["host memory"] += 1
            return fits

        dispatcher = base.moe_token_dispatcher_type
        group = base.microbatch_group_size_per_vp_stage  # `space.group_of`: m's, not mbs's
        stage = StageRungs(
            job,
            zbase,
            space.headroom_pct,
            (key, group, dispatcher, base.ep_comm_overlap),
            lean_fails,
            rejected,
            twin_key=(key, group, dispatcher, False) if base.ep_comm_overlap else None,
        )
        # memory grows with the micro-batch at one micro-batch group (the options come smallest
        # first): where the leanest rungs did not fit at a smaller one, none fits here (none
        # holds less); not across groups: the interleaved warm-up holds (vpp - 1) g micro-batches
        # (schedules.py:964-965 d98e8a64), and a larger micro-batch can take a much smaller g
        # (Llama 3.1 8B pp 2 vpp 6, 100 sequences: rank 0's warm-up is 28 chunks of 4 at mbs 4,
        # g 5, and 13 of 5 at mbs 5, g 2)
        if lean_fails.get(stage.lean_key, math.inf) <= mbs or stage.failed():
            rejected["memory"] += 1
            continue
        if limit is not None and (
            _sync_slower(job, base, floor, zbase, limit) or _plain_slower(stage, pays_for, limit)
        ):
            continue  # every rung is slower than none here (a later stage may be faster)
        plain = stage.fits(NONE) if NONE in single else None
        if plain is not None:
            feasible = [NONE]
            # without the overlap (its userbuffers freed: it fits too), where faster (the
            # first of equals is taken, so it matters only then)
            off = NONE_OFF in single and not pays_for()
            faster = off and stage.time_of(NONE_OFF).step_time_s < stage.time_of(NONE).step_time_s
            if faster and stage.fits(NONE_OFF) is not None:
                feasible.append(NONE_OFF)
            picked = stage.fastest(feasible, limit)
        else:
            lean = leanest(single, ladders)
            if lean and all(stage.fits(r) is None for r in leaner_first(lean)):
                lean_fails[stage.lean_key] = mbs
                continue
            rest: list[Rung] = []
            # every rung's memory first, the rungs without the TP overlap first and leaner
            # first (`rungs.leaner_first`): where one does not fit, nor does its twin with the
            # overlap, nor a rung it covers (`StageRungs.fits`), which need not be estimated
            # then (the loop below asks each of them, in their own order, which decides ties)
            for r in leaner_first(single):
                stage.fits(r)
            for r in single:
                # without the TP overlap a rung is no faster where the overlap pays: then only
                # where it does not fit with it
                dominated = (
                    not r.tp_overlap and pays_for(r) and stage.fits(r.with_tp_overlap()) is not None
                )
                if r != NONE and not dominated and stage.fits(r) is not None and host_fits(r):
                    rest.append(r)
            smallest: dict[int, int] = {}
            for ld in ladders:
                hi = ld.hi
                with_it = ld.with_tp_overlap
                if with_it is not None and id(with_it) in smallest and pays_for(ld.make(ld.lo)):
                    hi = smallest[id(with_it)] - 1  # else the twin is as lean, faster
                n = stage.smallest(ld, hi)
                if n is not None:
                    smallest[id(ld)] = n
                    # the host's bytes grow with n: past the smallest n that fits the GPU's
                    # memory none fits the host's if that one does not
                    if host_fits(ld.make(n)):
                        rest.append(ld.make(n))
            picked = stage.fastest(rest, limit)  # memory known: the fastest by time
        if picked is None:  # nothing fits, or its fastest cannot make the top K
            continue
        rung, rep = picked
        best = Candidate(rung.on(zbase), rep, stage.time_of(rung))
        twin = rung in base_of.twin_takes and _twin_dominates(
            job,
            space,
            rung.on(zbase),
            best.step_time if base_of.twin_timed else None,
            best.memory.peak,
        )
        if not twin and not any(
            c.layout.zero_stage <= z and c.step_time <= best.step_time for c in found
        ):
            found.append(best)
    return found


def bound_exits(
    job: Job,
    space: Space,
    shape: Layout,
    floors: list[Floors],
    cut: float,
    too_big: dict[tuple[object, ...], bool],
    zeros: list[int],
) -> tuple[list[bool], int]:
    """Which bases of one shape at one micro-batch size `best_variants` answers [] for before
    its first estimate (each base's `floors`, `floors[j]` of the j-th, under `cut`), and the
    ZeRO stages it counts under "memory" for each on the way: those of `zeros` whose states are
    too big (`_too_big`) before the first that is not, every one where none is. Each such base
    is answered so (no other count, no estimate, nothing remembered but `too_big`): it has no
    ZeRO stage whose states fit, or `bound.below` of its floor exceeds `cut`.

    `shape` is any layout of the shape at the micro-batch size: a shape's bases differ only in
    their token dispatcher (and its backend), TP overlap and EP overlap (`space.ShapeBases`:
    each structure's plain layouts with the shape's fields, the EP overlap set on a twin; at a
    micro-batch size, that size set, `space.at_micro_batch`), and neither the split key (the
    states' key: pp, vpp, the split's fields, the V placement) nor `below` (the framework and
    vpp, or torchtitan's schedule by vpp, `fill_drain`; the micro-batches, dp and micro-batch
    size; pp, vpp and the micro-batch group for the unmerged share) reads any of those. So the
    search skips those bases, counting the same, without making them
    (tests/search/test_search_exits.py: the same answers and counts as `best_variants`)."""
    split = shape.split_key()
    capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
    lead = 0
    for z in zeros:
        if not _too_big(job, shape, (split, z), capacity, too_big):
            break
        lead += 1
    else:  # no ZeRO stage's states fit: every base is answered [] after counting them all
        return [True] * len(floors), lead
    return [below(job, floor, shape) > cut for floor in floors], lead


def _twin_dominates(
    job: Job, space: Space, layout: Layout, time: float | None, peak: float
) -> bool:
    """Whether the layout's EP-overlap twin fits (`Base.twin_takes`) in no more memory than the
    layout's `peak` (its one more in-flight micro-batch can take more: then the layout is an
    alternative of its own, as the brute force lists it) and, where `time` (the layout's step
    time) is given (`Base.twin_timed`), takes no longer."""
    twin = layout.with_(ep_comm_overlap=True)
    rep = memory.estimate(job, twin, space.headroom_pct, all_stages=False)
    if not rep.fits or rep.peak > peak:
        return False
    if not host_memory.estimate(job, twin).fits:  # what it offloads: the host's budget
        return False
    return time is None or cost.estimate(job, twin).step_time_s <= time


class Budget:
    """`host_memory.activation_budget` of a base at one ZeRO stage, asked only where its bounds
    cannot answer: its lower bound (rounding "ceiling": every pinned block at its ceiling, no
    less than the exact bytes), then its upper bound (rounding "floor", no walk of the pinned
    pieces), each computed once when first needed: `below(x)` is exactly
    `activation_budget(job, layout) < x`."""

    def __init__(self, job: Job, layout: Layout) -> None:
        self.job, self.layout = job, layout
        self.least = host_memory.activation_budget(job, layout, "ceiling")
        self.most: float | None = None
        self.exact: float | None = None

    def below(self, x: float) -> bool:
        if self.least >= x:
            return False
        if self.most is None:
            self.most = host_memory.activation_budget(self.job, self.layout, "floor")
        if self.most < x:
            return True
        if self.exact is None:
            self.exact = host_memory.activation_budget(self.job, self.layout)
        return self.exact < x


def states_fit(
    job: Job, space: Space, base: Layout, capacity: float, too_big: dict[tuple[object, ...], bool]
) -> bool:
    """Whether some ZeRO stage's weights, gradients, optimizer state and buffers
    (`memory.state_floor`, a floor under every micro-batch size, rung, token dispatcher and
    overlap of the shape) fit in `capacity`; `too_big` records each stage's answer under
    `best_variants`'s key, which then need not estimate it again."""
    fit = False
    split = base.split_key()
    for z in zero_stages(job, space, base):
        fit |= not _too_big(job, base, (split, z), capacity, too_big)
    return fit


def _too_big(
    job: Job,
    base: Layout,
    key: tuple[object, ...],
    capacity: float,
    too_big: dict[tuple[object, ...], bool],
) -> bool:
    """Whether the base's states at ZeRO stage key[1] (`key` = (split key, stage)) alone
    (`memory.state_floor`, its stages asked until one is over) exceed `capacity`, asked once
    per key (`too_big`)."""
    hit = too_big.get(key)
    if hit is None:
        lay = base.with_(zero_stage=key[1])
        hit = too_big[key] = memory.state_floor(job, lay, capacity) > capacity
    return hit


NONE_OFF = NONE.without_tp_overlap()


def overlap_pays(job: Job, base: Layout, full: bool = False) -> bool:
    """Whether the base's TP overlap (Megatron --tp-comm-overlap) makes no layer slower
    (`Layer.tp` no more than `Layer.tp_plain`, what it shows without; nothing else of a layer's
    time reads the overlap): without it a rung is then no faster than with it. `full`: with each
    forward recomputed (full recompute repeats the forward's collectives and GEMMs, differently
    with and without; selective re-runs add the same to both, so `full` = False decides every
    rung but full recompute's). Where it does not pay (its SM margin on long GEMMs against
    short transfers: `planner.model.tp_overlap`) each such rung is tried either way."""
    if not base.tp_comm_overlap:
        return True
    layers = layout_times(job, (FULL if full else NONE).on(base)).layers
    return all(k.tp <= k.tp_plain for k in layers)


def _sync_slower(job: Job, base: Layout, floor: Floors | None, zbase: Layout, limit: float) -> bool:
    """Whether no rung of the ZeRO stage `zbase` can make the top K under `limit` by the base's
    bound (`base_bound`, whose pipeline no rung goes under) plus the stage's DP sync and
    optimizer floor (`dp_floor.sync_floor`, whose docstring proves the sum; ZeRO 2 and 3 alone,
    `dp_floor.applies`): asked before the stage's estimate without memory savers."""
    if not dp_floor.applies(job, zbase):
        return False
    step = base_bound(job, base, floor) + dp_floor.sync_floor(job, zbase)
    return slower(step * (1 - 1e-12), limit)  # the estimate sums its terms in another order


def _plain_slower(stage: StageRungs, pays: Callable[[], bool], limit: float) -> bool:
    """Whether no rung of a stage can make the top K under `limit` (`best_variants`): none is
    above it, and so is none without the TP overlap where the overlap does not pay (every rung
    is at least one of the two)."""
    if not slower(stage.time_of(NONE).step_time_s, limit):
        return False
    return pays() or slower(stage.time_of(NONE_OFF).step_time_s, limit)
