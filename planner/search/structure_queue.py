"""The search's queue of structures (`planner.search.top_k`), each refined only when it may come
next.

A structure is queued first on `structure_floor`: a floor from one of its shapes, without
memory. What queueing it on its own bound costs (its states per shape, `variants.states_fit`,
and the floors of its shapes whose states fit, `bound.floors_of`: most of the queue's time) is
paid only when it comes next: then it is queued again on its bound (the least floor of its
fitting shapes), or dropped where no shape's states fit (counted under "memory"; none of its
layouts fits). A refined structure comes out only when no structure still pending has a floor
below its (bound, index), and the floor is no more than the bound: so the structures come out
in the order of their bounds, then index, exactly as if every one had been refined first
(tests/search/test_search_queue.py), and one whose floor exceeds the search's cut is never
refined (DeepSeek-V3 on 2,048 H800: about two thirds of the structures whose states fit).

Beside the queue, what the search counts of every structure it queues: the layouts its bases
stand for (`layouts_in`, the search's `space_size`), counted without making them
(`planner.search.shape_counts`); the queue reads the layouts of a structure's bases alone
(`Bases.layouts`, `Bases.plain_layouts`), and the bases are made only where it is expanded.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cost, memory
from planner.model.routing_load import least_load_job
from planner.model.stage_time import a2a_floor, layout_times
from planner.search import shape_counts
from planner.search.bound import Floors, floors_of, tp_floor_share
from planner.search.floor_layers import floor_layers
from planner.search.rank_groups import rank_counts
from planner.search.rungs import NONE
from planner.search.shape_counts import VppCounts
from planner.search.space import (
    Base,
    Option,
    ShapeBases,
    Space,
    Structure,
    at_micro_batch,
    zero_stages,
)
from planner.search.splits import Split
from planner.search.variants import states_fit


def structure_floor(job: Job, shape: list[Layout]) -> float:
    """No more than the bound the search queues a structure on (the least `Floors.lower_bound`
    of the bases of its shapes whose states fit, at its largest micro-batch size), from one of
    its shapes (`shape`: that shape's bases at that size) and without asking memory: the
    search queues every structure on this first and computes its states and floors only when
    it comes next (`planner.search.structure_queue`). `shape` may hold the bases' layouts
    without the EP overlap alone (`Bases.plain_layouts`): each is taken without it below.

    Why. A base's `lower_bound` is m x max_r g_r + overhead, g_r the rank's floor per
    micro-batch (`_overlap_floors`: compute c_r, the all-to-all floor a2a_floor(a_r, s_r, c_r),
    output layers, the TP floor share of its TP traffic, the CP charge). The max is at least the
    mean over the pp ranks, and the sum over the ranks is the same in every shape of the
    structure but for the all-to-all term: every shape runs all the model's layers of each kind
    and its output layers and MTP depths once (`rank_mix.rank_layers`), on the same layer
    times (they read no pipeline field, `stage_time._FIXED`, and the micro-batches are the
    structure's at its largest size), the shapes' bases differ only in their vpp, split and EP
    overlap (the dispatchers, the TP overlap and the SM shares are the structure's), and the
    TP floor share reads only the TP overlap and tp. The all-to-all floor is linear without the
    overlap and, with it, (1 - share) max(a - c, 0) + share x a: convex and positively
    homogeneous, so the sum over the ranks is at least the floor of the sums. Each base of
    `shape` is taken with and without the overlap (where ep > 1), the least of them, as any
    shape may hold either. Taken less 1e-12 of itself for rounding (the sums run in another
    order). tests/search/test_structure_queue.py checks it below every fitting shape's floors
    of its problems."""
    best = float("inf")
    # a base's EP-overlap twin has its layer times and is taken below with and without it
    for lay in dict.fromkeys(NONE.on(x).with_(ep_comm_overlap=False) for x in shape):
        t = layout_times(least_load_job(job), lay)  # for every size: `least_load_job`
        share = comms.ep_sm_share(job.cluster, lay, job.gemm_sm_margin)
        c = a2a = shared = tp = cp = 0.0
        heads = ranks = 0
        for (counts, h), times in rank_counts(job, lay, t):
            for k, n in zip(floor_layers(t), counts, strict=True):
                c += times * n * (k.fwd + k.bwd)
                a2a += times * n * k.ep
                shared += times * n * k.ep_shared
                tp += times * n * k.tp_traffic
                cp += times * n * k.cp
            heads += times * h
            ranks += times
        rest = c + heads * t.out + tp_floor_share(job, lay) * tp + cp
        for x in (lay, lay.with_(ep_comm_overlap=True)) if lay.ep > 1 else (lay,):
            best = min(best, t.m * (rest + a2a_floor(x, a2a, shared, c, share)) / ranks)
    return best * (1 - 1e-12) + cost.step_overhead_s(job)


class Bases:
    """A structure's `space.bases`, each (micro-batch size, vpp, split) built once: the bound,
    the space's size and the expansion ask for the same ones. Each (vpp, split) is built once
    too, at the first micro-batch size asked; the others are those bases with their micro-batch
    size set (`space.at_micro_batch`)."""

    def __init__(self, job: Job, space: Space, s: Structure) -> None:
        self.job, self.space, self.s = job, space, s
        self.make: ShapeBases | None = None
        self.memo: dict[tuple[int, int, Split], list[Base]] = {}
        self.shapes: dict[tuple[int, Split], list[Base]] = {}
        self.plains: dict[tuple[int, int, Split], list[Layout]] = {}  # `plain_layouts`'

    def layouts(self, mbs: int, vpp: int, split: Split) -> list[Layout]:
        """The layouts of the shape's bases, in their order (`ShapeBases.layouts`), without
        making the bases where they are not made yet."""
        if (mbs, vpp, split) in self.memo:
            return [b.layout for b in self.memo[mbs, vpp, split]]
        return self.counter().layouts(mbs, vpp, split, self.plain_layouts(mbs, vpp, split))

    def plain_layouts(self, mbs: int, vpp: int, split: Split) -> list[Layout]:
        """The layouts of the shape's bases without the EP overlap (`ShapeBases.plain_layouts`:
        what `structure_floor` reads of them, each base taken without the overlap), without
        making the bases where they are not made yet."""
        key = (mbs, vpp, split)
        if key in self.memo:
            return [b.layout for b in self.memo[key] if not b.layout.ep_comm_overlap]
        if key not in self.plains:  # asked again where the structure is refined
            self.plains[key] = self.counter().plain_layouts(mbs, vpp, split)
        return self.plains[key]

    def shape_layout(self, mbs: int, vpp: int, split: Split) -> Layout:
        """One layout of the shape's bases at micro-batch size `mbs`: the structure's first
        plain layout with the shape's fields (`ShapeBases.plain_layouts`' first), without
        making the bases or remembering it."""
        make = self.counter()
        return make.plains[0].with_(**make.shape_fields(mbs, vpp, split))

    def counter(self) -> ShapeBases:
        """The structure's `ShapeBases` (made once)."""
        if self.make is None:
            self.make = ShapeBases(self.job, self.space, self.s)
        return self.make

    def __call__(self, mbs: int, vpp: int, split: Split) -> list[Base]:
        key = (mbs, vpp, split)
        if key not in self.memo:
            shape = self.shapes.get((vpp, split))
            if shape is None:
                if self.make is None:
                    self.make = ShapeBases(self.job, self.space, self.s)
                shape = self.make(mbs, vpp, split)
                self.shapes[vpp, split] = shape
            self.memo[key] = at_micro_batch(shape, mbs, self.job)
        return self.memo[key]


ShapeSizes = list[tuple[int, int, Split, int]]
"""Each (vpp, split) of a structure's options, in their order, as (its last micro-batch size,
vpp, split, how many micro-batch sizes it has): `shape_sizes`."""


def shape_sizes(opts: list[Option]) -> ShapeSizes:
    """The options' shapes with their micro-batch sizes counted (`ShapeSizes`): what
    `layouts_in` reads of the options, the same for every structure that shares them."""
    sizes = Counter((vpp, split) for _, vpp, split in opts)
    some_mbs = {(vpp, split): mbs for mbs, vpp, split in opts}
    return [(some_mbs[k], *k, n) for k, n in sizes.items()]


def layouts_in(
    job: Job,
    space: Space,
    s: Structure,
    opts: list[Option],
    of: Bases | None = None,
    sizes: ShapeSizes | None = None,
    alike: dict[tuple[object, ...], VppCounts] | None = None,
) -> int:
    """Layouts the options of one structure stand for: each base times its ZeRO stages and every
    rung Megatron allows on it, the ladders counted whole, without making the bases
    (`shape_counts.total`). `of`: the structure's `Bases`, where the caller has them; `sizes`:
    `shape_sizes(opts)`, where it has them; `alike`: where the caller keeps
    `shape_counts.vpp_counts` for its structures, keyed by `sizes`' identity (the caller keeps
    them alive) and what those read of the structure (pp, TP overlap)."""
    sizes = shape_sizes(opts) if sizes is None else sizes
    made = (of or Bases(job, space, s)).counter()
    if not made.plains:
        return 0
    key = (id(sizes), s.pp, made.plains[0].tp_comm_overlap)
    counts = None if alike is None else alike.get(key)
    if counts is None:
        counts = shape_counts.vpp_counts(made, sizes)
        if alike is not None:
            alike[key] = counts
    rungs = shape_counts.total(made, counts)
    # the ZeRO stages read the structure's degrees alone: its layout's are every base's
    return rungs * len(zero_stages(job, space, s.layout())) if rungs else 0


@dataclass(frozen=True)
class Queued:
    """What the search knows of a structure it queued, for a later pass over the same job and
    space (`planner.search.titan_every`): its bound (the least `Floors.lower_bound` of its
    shapes' bases at its largest micro-batch size), its bases, and those floors of each shape
    whose states fit in some ZeRO stage (a shape not here holds no layout that fits)."""

    bound: float
    bases: Bases
    floors: dict[tuple[int, Split], list[Floors]]


Refined = tuple[
    float,
    int,
    Structure,
    list[Option],
    dict[tuple[object, ...], bool],
    Bases,
    dict[tuple[int, Split], list[Floors]],
]
"""A refined structure: (bound, index, structure, options, its `too_big`, its bases, each
fitting shape's bases' `bound.floors`), keyed by its bound, then index (unique: nothing else is
compared), the bound the least of its shapes whose states fit in some ZeRO stage."""

_Pending = tuple[float, int, Structure, list[Option], Bases]
"""A structure not yet refined: (its `structure_floor`, index, structure, options, bases)."""


class StructureQueue:
    """The structures of one search, queued on their floors (`add`), refined as `visit` reaches
    them."""

    def __init__(self, job: Job, space: Space, rejected: Counter[str]) -> None:
        self.job, self.space, self.rejected = job, space, rejected
        self.capacity = memory.usable_bytes(job.cluster.capacity_bytes, space.headroom_pct)
        self._pending: list[_Pending] = []
        self._ready: list[Refined] = []  # a heap of refined ones not yet visited
        self.refined: list[Refined] = []  # every refined one, in the order refined

    def add(
        self, i: int, s: Structure, opts: list[Option], of: Bases, top_mbs: int | None = None
    ) -> None:
        """Queue structure `s` (index `i`) on its floor, from its first option's shape at its
        largest micro-batch size (`top_mbs`, where the caller has it)."""
        top_mbs = max(o[0] for o in opts) if top_mbs is None else top_mbs
        _, vpp, split = opts[0]
        floor = structure_floor(self.job, of.plain_layouts(top_mbs, vpp, split))
        heapq.heappush(self._pending, (floor, i, s, opts, of))

    def visit(self, cut: Callable[[], float | None]) -> Iterator[Refined]:
        """The structures whose bound is not above `cut()` (read before each, as it falls), by
        bound then index; refined on the way, each once."""
        pending, ready = self._pending, self._ready
        while True:
            limit = cut()
            while pending and (not ready or pending[0][:2] < ready[0][:2]):
                if limit is not None and pending[0][0] > limit:
                    break
                self._refine(heapq.heappop(pending), self.rejected)
            # a pending floor left before the next bound is above the cut, and so is that bound
            if not ready or (limit is not None and ready[0][0] > limit):
                return
            yield heapq.heappop(ready)

    def in_order(self) -> list[Refined]:
        """Every structure refined so far, by bound then index (a later pass's order: those not
        refined have floors, so bounds, above the cut that left them so)."""
        return sorted(self.refined, key=lambda q: q[:2])

    def within(self, cut: float | None) -> dict[Structure, Queued]:
        """What the search queued of each structure that may hold a layout no slower than `cut`
        (None: every structure), in the structures' order: those still pending whose floor,
        less 1e-12 of itself, is not above `cut` are refined now (uncounted: the search's
        rejections are counted already); the rest have bounds above it. Each structure not
        here holds no layout that fits, or none within `cut`."""
        scratch: Counter[str] = Counter()
        left: list[_Pending] = []
        for p in self._pending:
            if cut is None or p[0] * (1 - 1e-12) <= cut:
                self._refine(p, scratch)
            else:
                left.append(p)
        heapq.heapify(left)
        self._pending = left
        done = sorted(self.refined, key=lambda q: q[1])
        return {s: Queued(bound, of, tops) for bound, _, s, _, _, of, tops in done}

    def _refine(self, p: _Pending, rejected: Counter[str]) -> None:
        """Ask structure `p` its states per shape (at its largest micro-batch size) and queue it
        on the least floor of the shapes whose states fit; none: counted under "memory"."""
        _, i, s, opts, of = p
        top_mbs = max(o[0] for o in opts)
        too_big: dict[tuple[object, ...], bool] = {}
        fit = [
            k
            for k in dict.fromkeys((vpp, split) for _, vpp, split in opts)
            if states_fit(
                self.job, self.space, of.plain_layouts(top_mbs, *k)[0], self.capacity, too_big
            )
        ]
        if not fit:
            rejected["memory"] += 1
            return
        tops = {k: floors_of(self.job, of.layouts(top_mbs, *k)) for k in fit}
        bound = min(f.lower_bound() for shape_tops in tops.values() for f in shape_tops)
        q: Refined = (bound, i, s, opts, too_big, of, tops)
        heapq.heappush(self._ready, q)
        self.refined.append(q)
