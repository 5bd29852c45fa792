"""torchtitan's own settings that `planner suggest --framework torchtitan` searches beside the
layout: FSDP2's reshard_after_forward and HSDP's dp_replicate (`planner.inputs.torchtitan`).

Each setting variant is its own job (the job's `[torchtitan]` table with that setting), searched
by the certified search (`planner.search.top_k.search`) over the layouts it admits; the variants'
rankings are merged by the objective. The merged top K is exact over every (layout, variant):

- A candidate of a variant is listed unless a variant earlier in `variants`' order (the simpler
  settings) runs the same base layout (everything but the recompute policy) at no more step time
  with one of its policies that fits (`dominated`): "always" at pp 1 takes the same time as
  "default" and 0.2-odd GiB less, so it is listed only where "default" does not fit as fast.
- Each variant's ranking is read (`top_k.search` for K' rows, K' doubled while more are needed)
  until a row ranks below the K-th merged row, or K' rows of it are listed, or it ends: every
  listed (layout, variant) that ranks among the first K is then in the merge. Its search starts
  its cut at the merged K-th row's time so far (`top_k.search`'s `ceiling`): a slower row ranks
  below that row, and the merged K-th key only falls as rows join.
- The variants' jobs are made once and share the job's layer times (`Variant.job`); what each
  search queued (`SearchResult.queued`) is kept for the every-N pass.

Which variants: reshard_after_forward "default", "never" and "always", the last two only without
pipelining; dp_replicate r = 1 (plain FSDP) and every r > 1 dividing the GPU count, each layout
at the ZeRO stage of its shard group dp / r x cp (`space.zero_stages`, as
`rules.torchtitan.sharding` says: FSDP2 over two ranks or more, replicated, ZeRO 0, over one,
beside any TP and PP: b5bcd76c models/llama3/parallelize.py:57-77 applies FSDP2 over a shard
degree of 1 too; r = the GPU count, alone, is e347b1e5's DDP, models/llama3/infra/
parallelize.py:148-156); a layout whose dp r does not divide is left to that rule. Settings the
job's `[torchtitan]` table gives are kept as given. torchtitan's selective_layer_every (every
N-th layer recomputed whole, the model's block recompute), which the certified search does not
score for torchtitan (`space.bases` keeps none, full and per-op selective), is added after the
merge by `planner.search.titan_every`, exactly too.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import Reshard, TorchtitanSection
from planner.model import cost, memory
from planner.model.stage_time import LAYER_TIMES
from planner.search import space as space_mod
from planner.search import top_k
from planner.search.bound import PLAIN_STAGES
from planner.search.rules.torchtitan import sharding
from planner.search.space import Bound, Space
from planner.search.structure_queue import StructureQueue
from planner.search.top_k import Candidate, SearchResult, simplicity
from planner.search.twins import Row

Memo = dict[tuple[int, Layout], float | None]
"""(variant index, base layout) -> its fastest fitting step time (`best_time`)."""

RESHARDS: tuple[Reshard, ...] = ("default", "never", "always")
"""In order of preference on equal step times."""


@dataclass(frozen=True)
class Variant:
    """One setting of torchtitan's searched knobs."""

    reshard: Reshard = "default"
    replicate: int = 1

    def settings(self, base: TorchtitanSection) -> TorchtitanSection:
        return base.model_copy(
            update={"reshard_after_forward": self.reshard, "dp_replicate": self.replicate}
        )

    def job(self, job: Job) -> Job:
        """The job with this variant's `[torchtitan]` table, sharing `job`'s layer times
        (`stage_time.LAYER_TIMES`: a layer's time reads none of the settings a variant sets,
        only FSDP2's states and data-parallel traffic do, `planner.model.fsdp2`;
        tests/search/test_titan_variants.py checks them bit for bit) and the base bound's stage
        times made of them (`bound.PLAIN_STAGES`)."""
        out = replace(job, torchtitan=self.settings(job.titan))
        LAYER_TIMES.share(out, job)
        PLAIN_STAGES.share(out, job)
        return out

    def space(self, space: Space) -> Space | None:
        """The layouts searched under it: "never" and "always" only without pipelining (under
        PP torch pipelining keeps a stage's parameters gathered from the first all-gather to the
        step's last backward whatever the policy says, `planner.model.fsdp2`: "never" is
        "default" in memory and time, "always" only adds the backwards' re-gathers); dp at least
        r (HSDP: dp = r x the shard degree). None where nothing is left."""
        pp, dp = space.pp, space.dp
        if self.reshard != "default":
            pp = Bound(pp.lo, min(pp.hi, 1))
        dp = Bound(max(dp.lo, self.replicate), dp.hi)
        if pp.lo > pp.hi or dp.lo > dp.hi:
            return None
        return replace(space, pp=pp, dp=dp)


@dataclass(frozen=True)
class TitanCandidate(Candidate):
    """A candidate of a torchtitan search with the `[torchtitan]` settings it runs under."""

    titan: TorchtitanSection | None = None


SEARCHED = (
    ("reshard_after_forward", "reshard"),
    ("dp_replicate", "hsdp"),
    ("selective_layer_every", "every"),
)
"""The `[torchtitan]` settings the search varies, and their short names in tables."""


def changed(prev: TorchtitanSection, cur: TorchtitanSection) -> list[tuple[str, object, object]]:
    """(short name, before, after) of each searched setting `cur` changes from `prev`."""
    return [
        (name, getattr(prev, attr), getattr(cur, attr))
        for attr, name in SEARCHED
        if getattr(prev, attr) != getattr(cur, attr)
    ]


def variant_text(job: Job, c: Candidate) -> str:
    """The candidate's searched settings where they differ from the job's ("reshard never",
    "hsdp 2"), "" for the job's own."""
    titan = getattr(c, "titan", None)
    if titan is None:
        return ""
    return ", ".join(f"{name} {new}" for name, _, new in changed(job.titan, titan))


def candidate_job(job: Job, c: Candidate) -> Job:
    """The job a candidate runs: the job with the candidate's `[torchtitan]` settings."""
    titan = getattr(c, "titan", None)
    return job if titan is None else replace(job, torchtitan=titan)


def given(job: Job) -> set[str]:
    """The `[torchtitan]` settings the job names (kept as given, not searched)."""
    return set(job.torchtitan.model_fields_set) if job.torchtitan is not None else set()


def variants(job: Job) -> list[Variant]:
    """The variants searched for a torchtitan job, in order of preference (the job's own first);
    a setting the job's `[torchtitan]` table gives is kept."""
    titan = job.titan
    reshards: tuple[Reshard, ...] = (titan.reshard_after_forward,)
    if "reshard_after_forward" not in given(job):
        reshards += tuple(r for r in RESHARDS if r != titan.reshard_after_forward)
    n = job.cluster.num_gpus
    reps = [titan.dp_replicate]
    if "dp_replicate" not in given(job):
        # every r torchtitan takes: shard groups of one too (`rules.torchtitan.sharding`)
        reps += [r for r in space_mod.divisors(n) if r > 1 and r != titan.dp_replicate]
    return [Variant(s, r) for r in reps for s in reshards]


def base_of(lay: Layout) -> Layout:
    """The layout without its recompute policy."""
    return lay.with_(
        recompute="none",
        recompute_modules=("core_attn",),
        recompute_method="uniform",
        recompute_num_layers=1,
    )


def dominated(
    jobs: list[Job], space: Space, order: list[Variant], vi: int, c: Candidate, memo: Memo
) -> bool:
    """Whether a variant before `order[vi]` runs c's base layout, with some recompute policy
    the space allows, at no more step time, fitting (vi = len(order): any variant); `jobs` are
    the variants' jobs (`Variant.job`, made once: the model's memos are per job)."""
    for ui in range(vi):
        u = order[ui]
        sp = u.space(space)
        lay = c.layout
        if sp is None or not (sp.pp.admits(lay.pp) and sp.dp.admits(lay.dp)):
            continue
        key = (ui, base_of(lay))
        if key not in memo:
            memo[key] = best_time(jobs[ui], sp, lay)
        best = memo[key]
        if best is not None and best <= c.step_time:
            return True
    return False


def best_time(job: Job, space: Space, lay: Layout) -> float | None:
    """The fastest fitting step time of `lay`'s base under `job` over the space's recompute
    policies (torchtitan's: none, per-op selective, full), None where none fits or the job's
    settings do not run it."""
    if sharding(job, lay) is not None:
        return None
    best: float | None = None
    for r in space.recompute:
        trial = lay.with_(
            recompute=r,
            recompute_modules=("core_attn",),
            recompute_method="uniform",
            recompute_num_layers=1,
        )
        if not memory.estimate(job, trial, space.headroom_pct, all_stages=False).fits:
            continue
        t = cost.estimate(job, trial).step_time_s
        best = t if best is None else min(best, t)
    return best


RowKey = tuple[float, tuple[int, ...], int]


def row_key(row: Row[Candidate], vi: int) -> RowKey:
    return (row.candidate.step_time, simplicity(row.candidate.layout), vi)


@dataclass
class Merged:
    """The merged ranking: the counts summed over the variants' searches, the first rows (each
    with its `row_key`), the variants, what `dominated` remembered, and each variant's queued
    structures (`SearchResult.queued`, by its index in `order`)."""

    total: SearchResult
    rows: list[tuple[RowKey, Row[Candidate]]]
    order: list[Variant]
    jobs: list[Job]
    """Each variant's job (`Variant.job`), made once."""
    memo: Memo
    queued: dict[int, StructureQueue]


def search_variants(
    job: Job,
    space: Space,
    top: int,
    progress: Callable[[str], None] | None = None,
) -> Merged:
    """The top `top` rows of twins over every (layout, variant), each candidate a
    `TitanCandidate` (`result` makes them a SearchResult)."""
    order = variants(job)
    jobs = [v.job(job) for v in order]
    merged: list[tuple[RowKey, Row[Candidate]]] = []
    total = SearchResult([], 0, 0, 0, 0)
    memo: Memo = {}
    queued: dict[int, StructureQueue] = {}
    for vi, v in enumerate(order):
        sp = v.space(space)
        if sp is None:
            continue
        vjob = jobs[vi]
        ask = top
        # no row slower than the merged K-th can enter: the variant's search starts its cut there
        ceiling = merged[top - 1][0][0] if len(merged) >= top else None
        while True:
            res = top_k.search(vjob, sp, ask, progress=progress, fold_twins=True, ceiling=ceiling)
            rest = [e for e in merged if e[0][2] != vi]
            kept, more = _read(jobs, space, order, vi, res, rest, top, memo)
            if not more or len(res.rows) < ask:
                break
            ask *= 2
        merged = heapq.nsmallest(top, rest + kept, key=lambda e: e[0])
        if res.queued is not None:
            queued[vi] = res.queued
        total.space_size += res.space_size
        total.scored += res.scored
        total.structures += res.structures
        total.expanded += res.expanded
        for why, count in res.rejected.items():
            if vi and why in ("user bound on pp", "user bound on dp"):
                why = "outside a setting's layouts (pp > 1 or dp < dp_replicate)"
            total.rejected[why] += count
        total.seconds += res.seconds
    return Merged(total, merged, order, jobs, memo, queued)


def result(merged: Merged) -> SearchResult:
    """The merged rows as the search's result."""
    rows = [r for _, r in merged.rows]
    return replace(merged.total, candidates=[r.candidate for r in rows], rows=rows)


def _read(
    jobs: list[Job],
    space: Space,
    order: list[Variant],
    vi: int,
    res: SearchResult,
    others: list[tuple[RowKey, Row[Candidate]]],
    top: int,
    memo: Memo,
) -> tuple[list[tuple[RowKey, Row[Candidate]]], bool]:
    """The listed rows of one variant's ranking that can rank among the first `top` with
    `others`, and whether the ranking must be read further (every row was read, and fewer than
    `top` rank at or above the last)."""
    kept: list[tuple[RowKey, Row[Candidate]]] = []
    for row in res.rows:
        key = row_key(row, vi)
        pool = heapq.nsmallest(top, [e[0] for e in others + kept])
        if len(pool) >= top and key > pool[-1]:
            return kept, False
        members: list[Candidate] = [
            TitanCandidate(c.layout, c.memory, c.performance, jobs[vi].titan)
            for c in (row.candidate, *row.equivalents)
            if not _invalid(jobs, space, order, vi, c, memo)
        ]
        if members:
            lead = Row(members[0], tuple(members[1:]))
            kept.append((row_key(lead, vi), lead))
    # every row not read ranks at or below the last one read (a row's lead can only move down
    # when a twin takes its place): read on unless `top` rows rank at or above it
    last = row_key(res.rows[-1], vi) if res.rows else None
    return kept, last is not None and sum(e[0] <= last for e in others + kept) < top


def _invalid(
    jobs: list[Job], space: Space, order: list[Variant], vi: int, c: Candidate, memo: Memo
) -> bool:
    """Not a torchtitan setting for this layout, or dominated by an earlier variant."""
    return sharding(jobs[vi], c.layout) is not None or dominated(jobs, space, order, vi, c, memo)
