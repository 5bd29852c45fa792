"""benchmarks/gpu_pairs.py: the model's error on one GPU over another within a cell of MLPerf runs
that share round, benchmark, precision and layout.

Oracles: hand arithmetic on made-up ratios, and the entries' own settings
(benchmarks/data/mlperf/runs.yaml): v4.1's GPT-3 175B ran tp 4, cp 1, micro-batch 2 on 64 B200
and on 256 / 512 H100 in FP8, so those rows share a cell.
"""

from __future__ import annotations

import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import gpu_pairs, mlperf


def test_bias_is_the_median_ratio_less_one() -> None:
    # ratios 0.9, 1.2, 1.1: median 1.1 -> bias +0.1
    assert gpu_pairs.bias([0.9, 1.2, 1.1]) == pytest.approx(0.1)


def test_ratio_error_divides_the_two_biases() -> None:
    # a: 1.10 (+10%), b: median of 0.98, 1.00, 1.06 = 1.00 (0%): a over b is 1.10 / 1.00 - 1 = +10%
    # a over c (0.80, -20%): 1.10 / 0.80 - 1 = +37.5%; b over c: 1.00 / 0.80 - 1 = +25%
    errors = gpu_pairs.pair_errors({"b": [0.98, 1.0, 1.06], "a": [1.1], "c": [0.8]})
    assert [(a, b) for a, b, _ in errors] == [("a", "b"), ("a", "c"), ("b", "c")]
    assert [e for _, _, e in errors] == pytest.approx([0.1, 0.375, 0.25])


def test_cells_group_runs_of_one_round_benchmark_precision_and_layout() -> None:
    cases = [c for c in mlperf.load_mlperf() if c.raw["round"] == "v4.1"]
    table = gpu_pairs.cells(cases)
    cell = table[("v4.1", "gpt3", "fp8", "tp4 cp1 ep1 mbs2")]
    assert set(cell) == {"b200-sxm-180gb", "h100-sxm-80gb"}
    assert len(cell["b200-sxm-180gb"]) == 1
