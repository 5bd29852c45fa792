"""NCCL's collectives inside one NVLink domain against nccl-tests.

Oracle: nccl-tests' measured all-gather, reduce-scatter and all-reduce times on 2, 4 and 8 GPUs of
A100, H100, H200, B200, B300, GB200 and GB300 nodes (benchmarks/data/nccl_nvlink, NVIDIA's AI
Configurator tables). nccl_shares.NCCL_NVLINK_SHARE and NCCL_CALL_S are derived from these rows by
benchmarks/nccl_nvlink.py --fit (each series' affine fit over 4-512 MiB, the family's median);
here the model meets every row of 4 MiB and more, and the constants are checked to be what the
script derives.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

import numpy as np
import pytest

from benchmarks import nccl_nvlink
from planner.model import comms, nccl_shares


def _errors(op_filter: set[str]) -> dict[str, list[float]]:
    """|model / measured - 1| at 4 MiB and more, by GPU, for the given nccl-tests operations."""
    out: dict[str, list[float]] = defaultdict(list)
    for (gpu, _, op, n), points in nccl_nvlink.load().items():
        if op not in op_filter:
            continue
        big = sorted(p for p in points if p[0] >= nccl_nvlink.FIT_FROM)
        out[gpu].extend(abs(r - 1.0) for r in nccl_nvlink.ratios(gpu, op, n, big))
    return out


def test_rings_and_all_reduces_within_a_tenth_on_every_gpu() -> None:
    # the median error per GPU over its rows of 4 MiB and more (18-36 series of 10 sizes each);
    # the model before the measured shares was 33-75% off (benchmarks/nccl_nvlink.py)
    errors = _errors({"all_gather", "reduce_scatter", "all_reduce"})
    assert len(errors) == 7
    for gpu, errs in errors.items():
        assert statistics.median(errs) < 0.10, gpu


def test_a_ring_of_two_reaches_about_half_the_line_rate() -> None:
    # 512 MiB all-gather on 2 B200 (NCCL 2.29.2): measured 612.3 us, i.e. 256 MiB sent each way
    # in it, 438 GB/s of NVLink5's 900; the model's rate there, 900 x 0.80 x 0.604 = 435 GB/s
    rows = nccl_nvlink.load()[("b200-sxm-180gb", "2.29.2", "all_gather", 2)]
    size, seconds = max(rows)
    assert seconds == pytest.approx(612.3e-6, rel=1e-3)
    assert 0.5 * size / seconds / 900e9 == pytest.approx(0.80 * 0.604, rel=0.02)


def test_the_constants_are_what_the_data_gives() -> None:
    # benchmarks/nccl_nvlink.py --fit's medians (`derive`): every share within 0.002 (printed to 3
    # decimals), every call cost within 0.1 us
    etas, calls = nccl_nvlink.derive(nccl_nvlink.load())
    for family, table in nccl_shares.NCCL_NVLINK_SHARE.items():
        for cls, shares in table.items():
            for n, share in zip(nccl_shares.NCCL_NVLINK_RANKS, shares, strict=True):
                eta = etas[(family, cls, n)]
                assert share == pytest.approx(eta / comms.SCALEUP_BUS_EFFICIENCY, abs=2e-3)
    for cls, call in nccl_shares.NCCL_CALL_S.items():
        assert call == pytest.approx(calls[cls], abs=1e-7)


def test_shares_interpolate_between_measured_sizes() -> None:
    # 6 ranks: log2 6 lies 0.585 of the way from 4 to 8; 16 ranks take the 8-rank share
    lo, hi = nccl_shares.NCCL_NVLINK_SHARE["hopper"]["ring"][1:]
    w = (np.log2(6) - 2) / 1
    assert nccl_shares.share("hopper", "ring", 6) == pytest.approx(lo + w * (hi - lo))
    assert nccl_shares.share("hopper", "ring", 16) == hi
    assert (
        nccl_shares.share("hopper", "ring", 1) == nccl_shares.NCCL_NVLINK_SHARE["hopper"]["ring"][0]
    )
