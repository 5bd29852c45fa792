"""MLPerf Training results as benchmarks/mlperf.py loads them (rows and cases, by id), shared by
the test_mlperf_data*.py files.
"""

from __future__ import annotations

import sys

from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import mlperf

ROWS = mlperf.load_rows()
CASES = mlperf.load_mlperf()
BY_ID = {c.id: c for c in CASES}
