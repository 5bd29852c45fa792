"""The regimes explain flags as optimistic (planner/model/known_gaps.py).

Oracle: the measured runs themselves (benchmarks/data/mlperf/runs.yaml; for the folded MoE regime
also Megatron-LM's release runs, benchmarks/functional_steps.py `load_release_steps`): the median of
predicted over measured throughput, less one, over the runs in a regime is the gap its note states
(within 3 points), and over the comparable runs outside it the median is small; so a note's figure
cannot drift from the data it cites.

One micro-batch (ONE_MICRO_BATCH_GAP): the one-micro-batch MLPerf runs with tp > 1 or ep > 1 and at
most ONE_MICRO_BATCH_TOKENS tokens per GPU per micro-batch, against the other one-micro-batch runs.
Folded MoE (FOLDED_MOE_GAP): the MoE runs with tensor-parallel attention over experts at expert tp
1 (ep > 1), against the other MoE runs.
"""

from __future__ import annotations

import statistics
import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import functional_steps, mlperf
from benchmarks.runs import Case
from planner.model.known_gaps import (
    FOLDED_MOE_GAP,
    ONE_MICRO_BATCH_GAP,
    in_folded_moe_regime,
    in_one_micro_batch_regime,
)

CASES = mlperf.load_mlperf()


def _gap(c: Case) -> float:
    return c.estimate().tokens_per_s_per_gpu / c.tokens_per_s_per_gpu - 1


def _one(c: Case) -> bool:
    return c.layout.num_microbatches(c.job.global_batch_size) == 1


def _flagged(c: Case) -> bool:
    return in_one_micro_batch_regime(c.job, c.layout)


def test_the_stated_gap_is_the_median_of_its_runs() -> None:
    flagged = [_gap(c) for c in CASES if _flagged(c)]
    assert len(flagged) >= 10
    assert statistics.median(flagged) == pytest.approx(ONE_MICRO_BATCH_GAP, abs=0.03)


def test_the_other_one_micro_batch_runs_are_not_the_regime() -> None:
    # tp 1 and ep 1, or more tokens per GPU (Cisco's B300 8B at tp 2, Dell's GB300 gpt-oss at ep 2)
    plain = [_gap(c) for c in CASES if _one(c) and not _flagged(c)]
    assert len(plain) >= 48
    assert abs(statistics.median(plain)) < 0.05


MOE = [c for c in CASES + functional_steps.load_release_steps() if c.job.arch.is_moe]


def test_the_folded_moe_gap_is_the_median_of_its_runs() -> None:
    folded = [_gap(c) for c in MOE if in_folded_moe_regime(c.job, c.layout)]
    assert len(folded) >= 10
    assert statistics.median(folded) == pytest.approx(FOLDED_MOE_GAP, abs=0.03)


def test_the_other_moe_runs_are_not_the_folded_regime() -> None:
    # tp 1, or the experts split as the attention is (expert tp = tp): a median gap under half
    # the regime's (+5% against +18%, 2026-12-05)
    other = [_gap(c) for c in MOE if not in_folded_moe_regime(c.job, c.layout)]
    assert len(other) >= 20
    assert abs(statistics.median(other)) < FOLDED_MOE_GAP / 2
