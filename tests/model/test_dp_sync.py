"""Tests for planner.model.dp_sync: the shared overlap window of dense and expert buckets.

Oracle: hand arithmetic on the documented rule (the bucketed reduce-scatters of both kinds add
before the backward window comes off when one tier bounds both groups; each kind's last bucket
shows whatever the window), with the collectives of planner.model.comms (tested against
nccl-tests' bus-bandwidth factors in tests/model/test_comms.py).
"""

from __future__ import annotations

import math

import pytest
from jobs import h100_cluster

from planner.inputs.layout import Layout
from planner.model import comms, dp_sync, interleaved_sync


def _reduce(n: float, grp: comms.Group) -> tuple[float, float]:
    """(seconds, last bucket's seconds) of Megatron's bucketed fp32 reduce-scatter of n params:
    buckets of max(40M, 1M x group) parameters."""
    buckets = math.ceil(n / max(40e6, 1e6 * grp.size))
    red = buckets * comms.reduce_scatter(n * 4.0 / buckets, grp)
    return red, red / buckets


def test_dense_and_expert_gradients_share_the_backward_window() -> None:
    """64 H100 (8 nodes), dp 64, ep 8: the dense group (64 ranks) and the expert group (8 ranks,
    8 apart) both cross the nodes' NICs. Each kind's reduce-scatter alone fits a backward window
    of 3/4 of their sum, so a window per kind would show only the last buckets; sharing the NICs,
    the sum outlasts the window by a quarter of it."""
    cluster = h100_cluster(64)
    lay = Layout(tp=1, pp=1, dp=64, ep=8, overlap_grad_reduce=True, overlap_param_gather=False)
    dense_grp, expert_grp = dp_sync.data_parallel_groups(cluster, lay)
    assert dense_grp.tier_name == expert_grp.tier_name == "infiniband"
    n_dense, n_expert = 1e9, 0.2e9
    red_d, last_d = _reduce(n_dense, dense_grp)
    red_e, last_e = _reduce(n_expert, expert_grp)
    window = 0.75 * (red_d + red_e)
    assert red_d < window and red_e < window  # alone, each would hide but for its last bucket
    with_window, _ = dp_sync.data_parallel(
        (dense_grp, expert_grp), lay, n_dense, n_expert, 4.0, 0.0, window, 1
    )
    no_window, _ = dp_sync.data_parallel(
        (dense_grp, expert_grp), lay, n_dense, n_expert, 4.0, 0.0, 0.0, 1
    )
    gathers = no_window - (red_d + red_e)  # no forward window: every gather shows
    # what outlasts the window, plus the tier's first bucket's share of the backward (the
    # smaller kind's bucket share; here the backward is the window), before which nothing sends
    fill = window * min(last_d / red_d, last_e / red_e)
    assert with_window - gathers == pytest.approx(red_d + red_e - window + fill)
    assert red_d + red_e - window > last_d + last_e  # the shared window, not the floors, binds


def test_kinds_on_different_tiers_keep_a_window_each() -> None:
    """windowed() by hand: 3 s and 2 s of gradients under a 4 s backward window. On one tier
    1 s shows (5 - 4) and the first bucket's fill: the smaller share is 0.1 / 3 = 1/30 of the
    4 s backward, 0.133 s; on two tiers each hides but for its last bucket (0.1 + 0.2 s)."""
    one = [("infiniband", 3.0, 0.0, 0.1, 0.0, ()), ("infiniband", 2.0, 0.0, 0.2, 0.0, ())]
    two = [("infiniband", 3.0, 0.0, 0.1, 0.0, ()), ("nvlink", 2.0, 0.0, 0.2, 0.0, ())]
    assert dp_sync.windowed(one, 0.0, 4.0) == pytest.approx((1.0 + 4.0 / 30, 4.0 - 4.0 / 30))
    assert dp_sync.windowed(two, 0.0, 4.0) == pytest.approx((0.3, 4.7))


def test_the_chunks_launch_the_last_groups_chunk_backwards_apart() -> None:
    """Megatron's interleaved 1F1B launches each chunk's gradient sync once its last
    micro-batch's backward is done (align_grad_reduce, schedules.py:1446-1453 d98e8a64), and
    the cooldown runs the last group of L micro-batches (m mod g, g where g divides m:
    schedules.py:989-1003) through the chunks from the last to the first: the launches are L
    chunk backwards apart. Hand arithmetic, one micro-batch's backward b on the stage: pp 8,
    vpp 12, m 96 (g 8 divides it: L 8): 8 b / 12; pp 4, vpp 2, m 2 (g min(4, 2) = 2: L 2):
    2 b / 2 = b; pp 4, vpp 2, m 14 at g 5: L = 14 mod 5 = 4, 4 b / 2 = 2 b; at g 7 (divides
    14): L 7, 3.5 b. Rank 3's drain: 3 chunk backwards, 3 b / 2. Without interleaving, None."""
    b = 0.06
    assert interleaved_sync.chunk_sync(b, Layout(tp=4, pp=8, dp=16, vpp=12), 96) == (
        pytest.approx((12, 8 * b / 12, 0.0))
    )
    assert interleaved_sync.chunk_sync(b, Layout(pp=4, dp=2, vpp=2), 2) == pytest.approx(
        (2, b, 0.0)
    )
    five = Layout(pp=4, vpp=2, microbatch_group_size_per_vp_stage=5)
    assert interleaved_sync.chunk_sync(b, five, 14, 3) == pytest.approx((2, 2 * b, 1.5 * b))
    seven = five.with_(microbatch_group_size_per_vp_stage=7)
    assert interleaved_sync.chunk_sync(b, seven, 14) == pytest.approx((2, 3.5 * b, 0.0))
    assert interleaved_sync.chunk_sync(b, Layout(tp=1, pp=4, dp=2), 32) is None


def test_the_wider_window_hides_what_one_backward_does_not() -> None:
    """GPT-3 175B's stage at tp 4 pp 8 over 16 nodes' dp: a reduce-scatter longer than one
    micro-batch's backward shows beyond it without interleaving; with vpp 12 and 96 micro-batches
    only chunk 0's twelfth shows (Megatron launches each chunk's buckets whole, chunk 0's after
    rank 0's last backward, `dp_sync.chunk_sync`; chunk 11's 11 x 8 chunk backwards, 7.33
    backwards, outlast the rest). The parameter all-gather (no overlap asked) shows whole in
    both, so the difference is the gradients'."""
    cluster = h100_cluster(512)
    n, b = 5.5e9, 0.05
    plain = Layout(tp=4, pp=8, dp=16, overlap_grad_reduce=True, overlap_param_gather=False)
    inter = plain.with_(vpp=12)
    groups = dp_sync.data_parallel_groups(cluster, plain)
    red, last = _reduce(n, groups[0])
    assert red > b  # the premise: one backward does not hide it
    e_plain, _ = dp_sync.data_parallel(groups, plain, n, 0.0, 4.0, 0.03, b, 96)
    e_inter, _ = dp_sync.data_parallel(groups, inter, n, 0.0, 4.0, 0.03, b, 96)
    assert red < 89 / 12 * b
    # without interleaving: what outlasts b plus the first bucket's b x last / red
    assert e_plain - e_inter == pytest.approx((red - b + b * last / red) - red / 12)


def _pipeline(n: int, produce: float, send: float) -> float:
    """Brute force: n buckets, bucket i ready at (i + 1) x produce, sent one after another on
    one link for `send` seconds each; seconds the last send ends after the n x produce of
    compute."""
    link = 0.0
    for i in range(n):
        link = max(link, (i + 1) * produce) + send
    return link - n * produce


@pytest.mark.parametrize("n", [1, 2, 5, 12])
@pytest.mark.parametrize("send", [0.01, 0.03, 0.05, 0.2])
def test_the_gradient_sync_shows_what_a_bucket_pipeline_does(n: int, send: float) -> None:
    """windowed() against a step-by-step simulation of n equal buckets, one produced every
    0.04 s of a 0.04 n s backward, each sent for `send` s: compute-bound (send < 0.04) only the
    last bucket shows, link-bound the sync less the backward plus the first bucket's 0.04."""
    bwd = 0.04 * n
    part = [("infiniband", n * send, 0.0, send, 0.0, ())]
    exposed, hidden = dp_sync.windowed(part, 0.0, bwd)
    assert exposed == pytest.approx(_pipeline(n, 0.04, send))
    assert exposed + hidden == pytest.approx(n * send)


@pytest.mark.parametrize("send", [0.01, 0.05])
def test_the_parameter_gather_shows_what_a_bucket_pipeline_does(send: float) -> None:
    """The gathers mirror it: 5 buckets gathered one after another, each bucket's 0.04 s of
    forward waiting for its gather (the first gather before any compute). By hand, as the
    pipeline c + 4 max(c, r) + r after the start over the forward's 5 c: r = 0.01 shows 0.01,
    r = 0.05 shows 5 x 0.05 - 4 x 0.04 = 0.09."""
    part = [("infiniband", 0.0, 5 * send, 0.0, send, ())]
    exposed, _ = dp_sync.windowed(part, 0.2, 0.0)
    assert exposed == pytest.approx({0.01: 0.01, 0.05: 0.09}[send])


def test_zero3_without_windows_hides_nothing_not_less() -> None:
    """ZeRO-3 with no window (no forward or backward to hide under; Megatron-FSDP forces both
    overlaps on at ZeRO 3, megatron_fsdp.py:328-333 at d98e8a64, so the flags alone no longer
    empty the windows): every unit's all-gathers and reduce-scatter show, so the
    hidden seconds are exactly 0 (the difference of two sums once came out at -1e-16, which
    explain's JSON printed as a negative hidden time). 3 layers of 1e9 parameters over 8 H100."""
    cluster = h100_cluster(8)
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=3, overlap_grad_reduce=False)
    lay = lay.with_(overlap_param_gather=False)
    groups = dp_sync.data_parallel_groups(cluster, lay)
    exposed, hidden = dp_sync.data_parallel(groups, lay, 3e9, 0.0, 2.0, 0.0, 0.0, 4, layers=3)
    assert hidden == 0.0
    assert math.copysign(1.0, hidden) == 1.0
    ag = comms.all_gather(1e9 * 2.0, groups[0])
    rs = comms.reduce_scatter(1e9 * 2.0, groups[0])
    assert exposed == pytest.approx(4 * 3 * (2 * ag + rs))


def test_zero3_dense_and_expert_gathers_share_a_units_window() -> None:
    """ZeRO-3 on an MoE stage: a unit's dense all-gather (64 ranks) and expert all-gather (8 ranks,
    8 apart) run one after the other on FSDP's all-gather stream, and the reduce-scatters on its
    reduce-scatter stream, so they hide under one window per unit, not one each (they used to,
    and on a ZeRO-3 DeepSeek-V3 the DP traffic then ran 1.19x the whole step). Hand arithmetic
    on the documented per-unit rule with the summed seconds: 2 units, each kind's gather alone
    under its forward window, the two together 4/3 of it; 3 micro-batches."""
    cluster = h100_cluster(64)
    lay = Layout(tp=1, pp=1, dp=64, ep=8, zero_stage=3)
    dense_grp, expert_grp = dp_sync.data_parallel_groups(cluster, lay)
    u, m, n_dense, n_expert = 2, 3, 2e9, 1e9
    ag = comms.all_gather(n_dense / u * 2.0, dense_grp) + comms.all_gather(
        n_expert / u * 2.0, expert_grp
    )
    rs = comms.reduce_scatter(n_dense / u * 4.0, dense_grp) + comms.reduce_scatter(
        n_expert / u * 4.0, expert_grp
    )
    f = 0.75 * ag  # one unit's forward window
    assert comms.all_gather(n_dense / u * 2.0, dense_grp) < f  # alone, it would hide
    b = 2.0 * (ag + rs)  # the backward hides both there
    exposed, hidden = dp_sync.data_parallel(
        (dense_grp, expert_grp), lay, n_dense, n_expert, 4.0, u * f, u * b, m, layers=u
    )
    shown_f = ag + (u - 1) * (ag - f)  # the first gather shows, the second its excess
    shown_b = ag + rs  # the first unit's gather and the last one's reduce-scatter
    assert exposed == pytest.approx(m * (shown_f + shown_b))
    assert exposed + hidden == pytest.approx(m * u * (2 * ag + rs))  # every byte moves once
