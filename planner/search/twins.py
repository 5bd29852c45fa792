"""Twins: layouts that differ only by trading context parallelism for micro-batch size, at the same
predicted step time. `planner suggest` shows each group as one row ("also: cp 2 x mbs 4") instead
of filling its top K with them; `planner.search.top_k.search(..., fold_twins=True)` certifies the
top K rows.

Why such layouts tie: with dp x cp and micro_batch_size / cp fixed, every rank holds the same
tokens per micro-batch (micro_batch_size x seq_length / cp), runs the same number of micro-batches
(global_batch / (dp x micro_batch_size)) and reduces gradients over the same dp x cp group, so the
model predicts the same step time (bit-identical in practice; the memory may differ a little, by
the ring-attention buffers of cp > 1). Not where a layer's small kernels set its time
(`planner.model.layer_time.KERNEL_MIN_S`, a few hundred tokens per GPU): the ring's steps launch
kernels of their own, so there the cp layout is the slower, and it is ranked as its own row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Generic, Protocol, TypeVar

from planner.inputs.layout import Layout

TWIN_REL_TOL = 1e-9
"""Two step times are "the same" when they differ by at most this fraction of the larger
(`math.isclose`). Twins come out bit-identical (different summation orders could differ by
~1e-15); any difference the model means is orders above it (a microsecond in a one-second step is
1e-6)."""


class Ranked(Protocol):
    """What folding reads of a ranked layout (`planner.search.top_k.Candidate`)."""

    @property
    def layout(self) -> Layout: ...

    @property
    def step_time(self) -> float: ...


C = TypeVar("C", bound=Ranked)


def twin_key(lay: Layout) -> tuple[Layout, int, Fraction]:
    """What a layout keeps when it trades context parallelism for micro-batch size: every field
    except cp, dp and micro_batch_size, and dp x cp (the group gradients are reduced and the
    optimizer sharded over, `Layout.dense_dp`) and micro_batch_size / cp (each rank's tokens per
    micro-batch are micro_batch_size x seq_length / cp). With both fixed so is the number of
    micro-batches, global_batch / (dp x micro_batch_size). E.g. dp 4 cp 1 mbs 1, dp 2 cp 2 mbs 2
    and dp 1 cp 4 mbs 4 share a key."""
    rest = lay.with_(cp=1, dp=1, micro_batch_size=1)
    return rest, lay.dp * lay.cp, Fraction(lay.micro_batch_size, lay.cp)


def same_time(a: float, b: float) -> bool:
    """Equal within TWIN_REL_TOL of the larger."""
    return math.isclose(a, b, rel_tol=TWIN_REL_TOL, abs_tol=0.0)


@dataclass(frozen=True)
class Row(Generic[C]):
    """One row of a ranking: a layout and its twins (same `twin_key`, `same_time`), in rank
    order."""

    candidate: C
    equivalents: tuple[C, ...] = ()


def fold(ranked: Sequence[C]) -> list[Row[C]]:
    """Fold a ranked list: each candidate joins the first row above it whose candidate has its
    twin key and the same step time, else starts a row. A row's candidate is so the best ranked of
    its twins (with equal times, the fewest cp ranks: `top_k.simplicity`), and which row a
    candidate joins depends only on the candidates above it."""
    rows: list[Row[C]] = []
    by_key: dict[tuple[Layout, int, Fraction], list[int]] = {}
    for c in ranked:
        same = by_key.setdefault(twin_key(c.layout), [])
        for i in same:
            if same_time(rows[i].candidate.step_time, c.step_time):
                rows[i] = replace(rows[i], equivalents=(*rows[i].equivalents, c))
                break
        else:
            same.append(len(rows))
            rows.append(Row(c))
    return rows
