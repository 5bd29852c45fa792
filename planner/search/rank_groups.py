"""Pipeline ranks grouped by what they run, so that the search's bounds (`planner.search.bound`)
compute a rank's terms once per group of ranks alike rather than once per rank: `rank_counts`
(each distinct layer count of the ranks, for the floors without memory savers) and
`rank_values` (a value of each rank from its mix, computed once per group of ranks with the same
mix). Both are remembered per model and pipeline split, all they read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TypeVar

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import block_ranges
from planner.model.rank_mix import rank_layers
from planner.model.schedule import Chunks
from planner.model.stage_time import LayoutTimes

_RankLayers = tuple[tuple[int, ...], int]
_COUNTS: dict[tuple[object, ...], tuple[ModelArch, list[tuple[_RankLayers, int]]]] = {}


def rank_counts(job: Job, lay: Layout, t: LayoutTimes) -> list[tuple[_RankLayers, int]]:
    """Each distinct `rank_mix.rank_layers` of the layout's ranks and how many ranks have it;
    remembered per model and pipeline split (all they depend on)."""
    key = (id(job.arch), lay.split_key(), t.mtp_rank)
    hit = _COUNTS.get(key)
    if hit is not None and hit[0] is job.arch:
        return hit[1]
    counts = Counter(
        rank_layers(job, lay, rank, chunks, t)
        for rank, chunks in enumerate(lay.chunk_layers(job.arch.num_layers))
    )
    _COUNTS[key] = (job.arch, list(counts.items()))
    return _COUNTS[key][1]


_GROUPS: dict[tuple[object, ...], tuple[ModelArch, tuple[list[int], list[int]]]] = {}
_Sums = TypeVar("_Sums")


def rank_values(
    job: Job,
    lay: Layout,
    t: LayoutTimes,
    mix: Callable[[int, Chunks], _Sums],
    value: Callable[[int, _Sums], float],
    ranked: bool | None = None,
) -> list[float]:
    """`value(rank, mix(rank, chunks))` of each pipeline rank, in rank order: `mix`, what the
    rank's value reads of its mix, computed once per group of ranks that run the same mix
    (`_rank_groups`); `value` once per group too, and repeated for the others, but with
    Megatron's EP overlap or fine-grained offloading, where a rank's value reads its rank beyond
    its mix (its unmerged share, `stage_time.ep_exposed`; its reloads' wait on the copies out,
    `stage_offload.fine_offload_exposed`), once per rank on its group's mix. `ranked`: whether
    `value` reads the rank beyond its mix, where the caller knows (a value without the
    offloading's waits does not under fine-grained offloading); None: it does under either. The
    same list, bit for bit, as one call of each per rank (tests/search/test_stage_rungs.py), so
    its max and its sum are too. With bf16 layers (where they fall in a rank's chunks) one call
    of each per rank."""
    chunks = lay.chunk_layers(job.arch.num_layers)
    if job.quantised and (job.bf16_layers_at_start or job.bf16_layers_at_end):
        return [value(rank, mix(rank, c)) for rank, c in enumerate(chunks)]
    firsts, group = _rank_groups(job, lay, t, chunks)
    mixes = [mix(rank, chunks[rank]) for rank in firsts]
    if ranked is None:
        ranked = lay.ep_comm_overlap or bool(lay.offload_modules)
    if ranked:
        return [value(rank, mixes[g]) for rank, g in enumerate(group)]
    values = [value(rank, sums) for rank, sums in zip(firsts, mixes, strict=True)]
    return [values[g] for g in group]


def _rank_groups(
    job: Job, lay: Layout, t: LayoutTimes, chunks: tuple[Chunks, ...]
) -> tuple[list[int], list[int]]:
    """The first rank of each group of ranks with the same mix, and each rank's group: ranks
    that run the same layers of each kind (`rank_mix.rank_layers`, which counts the MTP
    depths' layers and the output layers), the same layers of each kind in their chunks (what
    fine-grained offloading's transfers read), are the MTP rank or not (its MTP projections),
    and under block recompute the same layers of each kind in the first recompute_num_layers of
    each chunk (`rank_mix.rank_mix`: those run recomputed, the rest plain). Remembered per
    model, split, MTP rank and block count (all they read)."""
    block = lay.recompute == "full" and lay.recompute_method == "block"
    k = (lay.recompute_num_layers, lay.recompute_every) if block else (0, 0)
    key = (id(job.arch), lay.split_key(), t.mtp_rank, k)
    hit = _GROUPS.get(key)
    if hit is not None and hit[0] is job.arch:
        return hit[1]
    arch = job.arch
    seen: dict[tuple[object, ...], int] = {}
    firsts: list[int] = []
    group: list[int] = []
    for rank, cs in enumerate(chunks):
        ran = block_ranges(lay, cs)
        kinds = (rank_layers(job, lay, rank, cs, t), arch.kind_counts(cs), rank == t.mtp_rank)
        mix_key = (*kinds, arch.kind_counts(ran) if block else None)
        if mix_key not in seen:
            seen[mix_key] = len(firsts)
            firsts.append(rank)
        group.append(seen[mix_key])
    _GROUPS[key] = (arch, (firsts, group))
    return firsts, group
