"""benchmarks/scale_series.py: the series it groups and the line it fits."""

from __future__ import annotations

import pytest

from benchmarks import mlperf, scale_series


def test_the_line_through_collinear_points_is_exact() -> None:
    # hand arithmetic: steps 1.5 + 0.25 m at m = 8, 16, 32 are 3.5, 5.5, 9.5
    a, b = scale_series.line([8.0, 16.0, 32.0], [3.5, 5.5, 9.5])
    assert a == pytest.approx(1.5)
    assert b == pytest.approx(0.25)


def test_a_series_is_one_configuration_at_several_gpu_counts() -> None:
    # runs.yaml: NVIDIA's four DeepSeek-V3 GB200 systems (512 to 8,192 GPUs) share the config
    # but MINIBS and the node count; the same layout in v3.0 and v3.1 (GPT-3 on 512 / 768 H100)
    # is two software generations and must not join one series
    found = scale_series.series(mlperf.load_mlperf())
    ids = [[c.id for c in s] for s in found]
    gb200 = [s for s in ids if "v6.0-nvidia-dsv3-gb200-512" in s]
    assert gb200 == [
        [
            "v6.0-nvidia-dsv3-gb200-512",
            "v6.0-nvidia-dsv3-gb200-2048",
            "v6.0-nvidia-dsv3-gb200-4096",
            "v6.0-nvidia-dsv3-gb200-8192",
        ]
    ]
    for s in found:
        assert len({c.raw["round"] for c in s}) == 1
        assert len({c.job.cluster.num_gpus for c in s}) >= 2
