"""planner's gated-delta-net kernel time against FLA's measured kernels (benchmarks/linear_kernels).

Oracle: flash-linear-attention's README benchmark of `chunk_gated_delta_rule` on one GB200
(benchmarks/data/fla_kernels), forward and forward with backward at six shapes. Time over
token-heads is a line (the host's launches, then the work); planner's seconds per token-head
(`planner.model.gdn.scan_time` plus the L2 norms the benchmarked call runs) are held to its slope.
"""

from __future__ import annotations

from benchmarks import linear_kernels as lk


def test_the_work_per_token_head_follows_the_measured_slopes() -> None:
    rows = lk.load()
    assert len(rows) == 12
    slopes = lk.measured_slopes(rows)
    base, gpu = lk.gb200()
    fwd, bwd = lk.predicted_per_token_head(base, gpu, lk.FIT_HEAD_DIM)
    # measured (2026-12-05): 0.891 ns forward, 3.323 ns backward a token-head at head dim 128
    assert abs(fwd / slopes["fwd"][1] - 1) < 0.10
    assert abs(bwd / slopes["bwd"][1] - 1) < 0.10


def test_the_forward_runs_at_its_roofline_and_the_backward_below_it() -> None:
    # what BWD_ROOFLINE_FRACTION rests on: the forward's measured slope (less the L2 norms) is
    # within a tenth of the roofline scan_time counts; the backward's is well under it
    f_fwd, f_bwd = lk.roofline_fractions(lk.load())
    assert 0.9 < f_fwd < 1.1
    assert 0.5 < f_bwd < 0.75


def test_each_head_dim_128_shape_within_8_percent() -> None:
    rows = lk.load()
    slopes = lk.measured_slopes(rows)
    fit = [r for r in rows if r.head_dim == lk.FIT_HEAD_DIM]
    assert len(fit) == 8
    for r in fit:
        assert abs(lk.predicted_ms(r, slopes) / r.ms - 1) < 0.08, r
