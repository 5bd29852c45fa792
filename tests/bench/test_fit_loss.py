"""benchmarks/fit_constants.py's soft-L1 loss: quadratic for small log errors, linear for large.

Oracle: hand arithmetic on 2 d^2 (sqrt(1 + (r/d)^2) - 1).
"""

from __future__ import annotations

import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks.fit_constants import ROBUST_SCALE, loss


def test_small_errors_cost_their_square() -> None:
    # r = 0.001, d = 0.05: 2 x 0.0025 x (sqrt(1 + 0.0004) - 1) = 0.005 x 0.00019998 = 9.999e-7
    assert loss(0.001, 0.05) == pytest.approx(1e-6, rel=1e-3)


def test_large_errors_cost_linearly() -> None:
    # r = 1, d = 0.05: 0.005 x (sqrt(401) - 1) = 0.005 x 19.025 = 0.09512 (least squares: 1.0)
    assert loss(1.0, 0.05) == pytest.approx(0.09512, rel=1e-3)
    # doubling a large error about doubles its loss: (sqrt(1601) - 1) / (sqrt(401) - 1) = 2.05
    assert loss(2.0, 0.05) / loss(1.0, 0.05) == pytest.approx(2.05, rel=0.01)


def test_symmetric_over_and_under_prediction() -> None:
    assert loss(-0.3) == loss(0.3) == loss(0.3, ROBUST_SCALE)
