"""The search's queue of structures (`planner.search.top_k`), each refined only when it may come
next.

A structure is queued first on `bound.structure_floor`: a floor from one of its shapes, without
memory. What queueing it on its own bound costs (its states per shape, `variants.states_fit`,
and the floors of its shapes whose states fit, `bound.floors_of`: most of the queue's time) is
paid only when it comes next: then it is queued again on its bound (the least floor of its
fitting shapes), or dropped where no shape's states fit (counted under "memory"; none of its
layouts fits). A refined structure comes out only when no structure still pending has a floor
below its (bound, index), and the floor is no more than the bound: so the structures come out
in the order of their bounds, then index, exactly as if every one had been refined first
(tests/search/test_search_queue.py), and one whose floor exceeds the search's cut is never
refined (DeepSeek-V3 on 2,048 H800: about two thirds of the structures whose states fit).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from planner.inputs.plan import Job
from planner.model import memory
from planner.search.bound import Floors, floors_of, structure_floor
from planner.search.space import Base, Option, Space, Structure, at_micro_batch, bases
from planner.search.splits import Split
from planner.search.variants import states_fit


class Bases:
    """A structure's `space.bases`, each (micro-batch size, vpp, split) built once: the bound,
    the space's size and the expansion ask for the same ones. Each (vpp, split) is built once
    too, at the first micro-batch size asked; the others are those bases with their micro-batch
    size set (`space.at_micro_batch`)."""

    def __init__(self, job: Job, space: Space, s: Structure) -> None:
        self.job, self.space, self.s = job, space, s
        self.memo: dict[tuple[int, int, Split], list[Base]] = {}
        self.shapes: dict[tuple[int, Split], list[Base]] = {}

    def __call__(self, mbs: int, vpp: int, split: Split) -> list[Base]:
        key = (mbs, vpp, split)
        if key not in self.memo:
            shape = self.shapes.get((vpp, split))
            if shape is None:
                shape = bases(self.job, self.s, mbs, vpp, split, self.space)
                self.shapes[vpp, split] = shape
            self.memo[key] = at_micro_batch(shape, mbs)
        return self.memo[key]


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

    def add(self, i: int, s: Structure, opts: list[Option], of: Bases) -> None:
        """Queue structure `s` (index `i`) on its floor, from its first option's shape at its
        largest micro-batch size."""
        top_mbs = max(o[0] for o in opts)
        _, vpp, split = opts[0]
        floor = structure_floor(self.job, [b.layout for b in of(top_mbs, vpp, split)])
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
            if states_fit(self.job, self.space, of(top_mbs, *k)[0].layout, self.capacity, too_big)
        ]
        if not fit:
            rejected["memory"] += 1
            return
        tops = {k: floors_of(self.job, [b.layout for b in of(top_mbs, *k)]) for k in fit}
        bound = min(f.lower_bound() for shape_tops in tops.values() for f in shape_tops)
        q: Refined = (bound, i, s, opts, too_big, of, tops)
        heapq.heappush(self._ready, q)
        self.refined.append(q)
