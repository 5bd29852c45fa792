"""benchmarks/precision_pairs.py: MLPerf runs that differ only in precision, paired.

Oracle: the entries' own settings (benchmarks/data/mlperf/runs.yaml): a pair is one model, GPU,
GPU count and parallel layout in two precisions, the lower one second; and the NVFP4 entries of
the same layout as an FP8 one (v5.0 / v5.1 Llama 3.1 405B on 512 GB200, tp 4 pp 8 vpp 8 cp 2;
v5.1 Llama 3.1 8B on 8 B200, dp 8, micro-batch 2) are among them.
"""

from __future__ import annotations

import sys

from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import mlperf, precision_pairs

PAIRS = precision_pairs.pairs(mlperf.load_mlperf())


def test_pairs_differ_in_precision_only_and_put_the_lower_one_second() -> None:
    rank = precision_pairs.ORDER
    for hi, lo in PAIRS:
        assert rank[hi.job.precision] < rank[lo.job.precision]
        assert hi.job.arch.name == lo.job.arch.name and hi.job.cluster == lo.job.cluster
        for field in ("tp", "pp", "vpp", "cp", "ep", "dp", "micro_batch_size"):
            assert getattr(hi.layout, field) == getattr(lo.layout, field), field


def test_the_nvfp4_entries_with_an_fp8_twin_are_paired() -> None:
    ids = {(hi.id, lo.id) for hi, lo in PAIRS}
    assert ("v5.0-nvidia-405b-gb200-512", "v5.1-nvidia-405b-gb200-512-fp4") in ids
    assert ("v5.1-university-8b-b200-8", "v5.1-dell-8b-b200-8-fp4") in ids
