"""The rungs of a structure's bases counted without making the bases (`total`): what the
search's `space_size` counts of every shape of every structure it queues
(`structure_queue.layouts_in`), though it makes the bases of few of them (DeepSeek-V3 on 2,048
H800: 1,074 of its 1,655 structures are never refined, their bases never asked).

Exact: a base's rungs are `rungs.rung_tuples`' (torchtitan's filtered as `space.ShapeBases`
filters them) or, on a base with the EP overlap, `rungs.overlap_rungs`', and both read of the
base its split and TP overlap alone (`rungs._key`), which every dispatcher's base of a shape
shares (the structure's plains differ in their dispatcher fields alone; the split fields are pp
and `ShapeBases.shape_fields`', the rest Layout's defaults): counted once per job and those
(`_RUNG_COUNTS`). Whether a dispatcher's base has an EP-overlap twin (`space.ep_overlap`) reads
no split or micro-batch size: `_twin`, remembered per job under what it reads (`_TWINS`).
tests/search/test_shape_counts.py checks every structure of its problems against the bases made
afresh, counted base by base."""

from __future__ import annotations

from planner.model.job_memo import JobMemo
from planner.search.rungs import Ladder, Rung, overlap_rungs, rung_tuples
from planner.search.space import ShapeBases, ep_overlap
from planner.search.splits import Split

VppCounts = dict[int, tuple[int, int]]
"""`vpp_counts`: per vpp, the two sums of rungs `total` reads."""


def vpp_counts(made: ShapeBases, sizes: list[tuple[int, int, Split, int]]) -> VppCounts:
    """`total`'s sums over the shapes `sizes` ((mbs, vpp, split, micro-batch sizes) each,
    `structure_queue.shape_sizes`): per vpp, the sums of the rungs of a base without and with
    the EP overlap, each shape's times its micro-batch sizes. They read of the structure its
    pp and TP overlap alone, so structures alike in those and in their options share them
    (`structure_queue.layouts_in`)."""
    out: VppCounts = {}
    if not made.plains:  # no base: nothing to count
        return out
    for _, vpp, split, n in sizes:
        a, b = _rungs_of(made, vpp, split)
        x, y = out.get(vpp, (0, 0))
        out[vpp] = (x + n * a, y + n * b)
    return out


def total(made: ShapeBases, counts: VppCounts) -> int:
    """The rungs (each ladder counted whole) of the bases `made` makes of the shapes `counts`
    sums (`vpp_counts`), each times its micro-batch sizes: per dispatcher a base without the
    EP overlap, and its twin with it where `_twin` says."""
    out = 0
    for vpp, (a, b) in counts.items():
        out += len(made.plains) * a
        if b:
            out += b * sum(_twin(made, i, vpp) for i in range(len(made.plains)))
    return out


def _twin(made: ShapeBases, i: int, vpp: int) -> bool:
    """Whether dispatcher i's base at vpp has an EP-overlap twin: `space.ep_overlap` of the
    plain with that vpp alone, remembered per job under what it reads (`_TWINS`)."""
    plain = made.plains[i]
    key = (
        made.space.ep_comm_overlap,
        plain.ep,
        plain.pp,
        vpp,
        plain.zero_stage,
        plain.moe_token_dispatcher_type,
        plain.recompute,
        plain.recompute_modules,
    )
    memo = _TWINS.of(made.job)
    twin = memo.get(key)
    if twin is None:
        twin = memo[key] = ep_overlap(made.job, plain.with_(vpp=vpp), made.space) is not None
    return twin


_TWINS: JobMemo[tuple[object, ...], bool] = JobMemo()
"""`_twin` per job and what `space.ep_overlap` reads of a plain base besides the job: the
space's EP-overlap switch, and of the layout (`rules.expert_overlap`: `features.expert_overlap`
and `hybrid.expert_overlap`, whose other conditions read the job alone) ep, pp, vpp, the ZeRO
stage, dispatcher, recompute and recompute modules; no split, micro-batch size, tp, cp, dp or
expert TP."""


def _rungs_of(made: ShapeBases, vpp: int, split: Split) -> tuple[int, int]:
    """The rungs of a base of the shape without the EP overlap and with it, from
    `_RUNG_COUNTS`."""
    job, space = made.job, made.space
    first = made.plains[0]
    memo = _RUNG_COUNTS.of(job)
    key = (first.pp, vpp, split, first.tp_comm_overlap, space.recompute, made.offload)
    counts = memo.get(key)
    if counts is None:
        plain = first.with_(**made.shape_fields(1, vpp, split))
        single, ladders = rung_tuples(job, plain, space.recompute, made.offload)
        if made.titan:  # as `ShapeBases` takes them
            single = tuple(r for r in single if r.modules == ("core_attn",))
            ladders = ()
        ov_single, ov_ladders, _ = overlap_rungs(job, plain, space.recompute, made.offload)
        counts = memo[key] = (_count(single, ladders), _count(ov_single, ov_ladders))
    return counts


_RUNG_COUNTS: JobMemo[tuple[object, ...], tuple[int, int]] = JobMemo()
"""`_rungs_of` per job and per what it reads (pp, vpp, split, TP overlap, recompute kinds,
offloading)."""


def _count(single: tuple[Rung, ...], ladders: tuple[Ladder, ...]) -> int:
    """Rungs, each ladder counted whole."""
    return len(single) + sum(ld.hi - ld.lo + 1 for ld in ladders)
