"""How the groups of one kind split over the link tiers' domains, every group counted.

Rank order. Megatron orders ranks tp-cp-ep-dp-pp, TP fastest (Megatron-LM d98e8a64
megatron/training/initialize.py:395 'tp-cp-ep-dp-pp'; expert groups etp, ep, edp:
megatron/core/parallel_state.py:1656-1664), so the groups of a kind (`stride`, `size`) are, in
each block of stride x size consecutive ranks starting at a multiple of it, the ranks
base + off + i x stride (off < stride, i < size).

Ranks to domains. Rank r of the job runs on domain r // span of every tier with a span, the spans
in ranks the job holds (`ClusterSpec.placement_spans`): the job fills `domain_used` GPUs of each
innermost domain, rack after rack (node after node): all of it, or a Slurm segment of it (64 of an
NVL72 rack's 72 GPUs: 16 trays of 4, as NVIDIA's MLPerf GB200/GB300 runs). A job that starts
mid-rack is not modelled.

Where every group lines up with the domains (8-GPU nodes, power-of-two groups) each group splits
alike. Where it does not, groups of one kind split differently: on GB200 NVL72 (72-GPU racks) the
EP 32 group of ranks 64-95 has 8 members in rack 0 and 24 in rack 1; an EP 12 group on 8-GPU nodes
splits 8 + 4. Collectives of one kind run in lockstep, so the slowest group sets their time:
`splits` gives each distinct way a group of the kind splits that no other is worse than in every
respect (a candidate for the slowest), worst first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Split:
    """How one group lies: `tier`, the index of the innermost tier one of whose domains holds
    all its members; `domains`, the innermost tier's domains it touches; `most` and `fewest`, its
    members on the fullest and the emptiest of them."""

    tier: int
    domains: int
    most: int
    fewest: int

    def no_better(self, other: Split) -> bool:
        """Whether this split is at least as bad as `other` in every respect: an outer tier, more
        domains, a fuller domain (more in-domain steps), an emptier one (more bytes leave it)."""
        return (
            self.tier >= other.tier
            and self.domains >= other.domains
            and self.most >= other.most
            and self.fewest <= other.fewest
        )


def group_split(ranks: range, spans: tuple[int | None, ...]) -> Split:
    """The `Split` of one group's ranks (ascending) over tiers of `spans` (None: every GPU)."""
    tier = next(
        (t for t, s in enumerate(spans) if s is None or ranks[0] // s == ranks[-1] // s),
        len(spans) - 1,
    )
    span0 = spans[0]
    if span0 is None or tier == 0:
        return Split(tier, 1, len(ranks), len(ranks))
    counts: dict[int, int] = {}
    for r in ranks:
        counts[r // span0] = counts.get(r // span0, 0) + 1
    return Split(tier, len(counts), max(counts.values()), min(counts.values()))


@lru_cache(maxsize=8192)
def splits(spans: tuple[int | None, ...], stride: int, size: int, world: int) -> tuple[Split, ...]:
    """The ways groups of `size` ranks `stride` apart split over a job of `world` ranks on tiers
    of `spans`: those no other split is worse than (`Split.no_better`), the worst first (the most
    members off the emptiest domain's, then the outermost tier, the most domains, the fullest).
    Remembered: the search places the same kinds again and again."""
    aligned = _aligned(spans, stride, size)
    return (aligned,) if aligned is not None else every_split(spans, stride, size, world)


def _aligned(spans: tuple[int | None, ...], stride: int, size: int) -> Split | None:
    """The one split of every group where each span s with s < stride x size divides the block
    and s divides the stride (each member on a domain of its own) or the stride divides s (s /
    stride members on each); None where some group may split otherwise."""
    block = stride * size
    if size == 1:
        return Split(0, 1, 1, 1)
    tier = next((t for t, s in enumerate(spans) if s is None or s % block == 0), None)
    inner = [s for s in spans[: len(spans) if tier is None else tier] if s is not None]
    if tier is None or any(block % s or (s % stride and stride % s) for s in inner):
        return None
    if tier == 0:
        return Split(0, 1, size, size)
    span0 = spans[0]
    assert span0 is not None  # an inner tier's span is set (`check_tiers`)
    per = max(span0 // stride, 1)
    return Split(tier, size // per, per, per)


def every_split(
    spans: tuple[int | None, ...], stride: int, size: int, world: int
) -> tuple[Split, ...]:
    """`splits`, every group placed (the brute force `_aligned` spares aligned kinds): the
    pattern repeats every lcm(block, largest span) ranks (each span divides the next), so one
    period of groups is placed. Only whole blocks are groups; a world under one block is taken
    as one block."""
    found = _period_splits(spans, stride, size, world)
    kept = [s for s in found if not any(o != s and o.no_better(s) for o in found)]
    kept.sort(key=lambda s: (size - s.fewest, s.tier, s.domains, s.most), reverse=True)
    return tuple(kept)


@lru_cache(maxsize=1024)
def domain_counts(
    spans: tuple[int | None, ...], stride: int, size: int, world: int
) -> tuple[int, ...]:
    """The innermost domains each group of the kind touches, every distinct count ascending
    (`splits` keeps only the worst groups; a rule on the fewest reads this)."""
    if _aligned(spans, stride, size) is not None:
        return (splits(spans, stride, size, world)[0].domains,)
    return tuple(sorted({s.domains for s in _period_splits(spans, stride, size, world)}))


def _period_splits(spans: tuple[int | None, ...], stride: int, size: int, world: int) -> set[Split]:
    """The distinct splits of every group of one period (`every_split`)."""
    block = stride * size
    whole = max(world // block, 1) * block
    finite = [s for s in spans if s is not None]
    period = math.lcm(block, finite[-1]) if finite else block
    return {
        group_split(range(base + off, base + off + block, stride), spans)
        for base in range(0, min(whole, period), block)
        for off in range(stride)
    }
