"""Tests for planner.model.comms.

Oracles: NVIDIA nccl-tests doc/PERFORMANCE.md bus-bandwidth factors (all-reduce 2(n-1)/n,
reduce-scatter / all-gather / all-to-all (n-1)/n) and the two-level all-reduce of
stas00/ml-engineering, evaluated by hand in comments; Megatron's tp-cp-ep-dp-pp rank order for
placement.
"""

from __future__ import annotations

import pytest
from jobs import h100_cluster, job

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.model import calibratable, comms, dp_sync, layer_tp


def test_ring_all_reduce_by_hand() -> None:
    # n = 8, S = 1 GB, B = 100 GB/s, alpha = 5 us: 2*7/8 * 1e9/1e11 + 2*7*5e-6 = 0.0175 + 7e-5
    link = comms.Link(bandwidth=100e9, latency=5e-6)
    assert comms.ring_all_reduce(1e9, 8, link) == pytest.approx(0.0175 + 7e-5)
    assert comms.ring_all_reduce(1e9, 1, link) == 0.0


def test_tp_group_of_8_in_a_node_uses_nvlink() -> None:
    grp = comms.place(h100_cluster(64), stride=1, size=8)
    assert grp.tier_name == "nvlink"
    assert grp.outer is None
    # the link: 450 GB/s x 0.80 (H100 NVLink4 rings reach ~370 of 450 GB/s); NCCL's all-reduce
    # of 8 ranks reaches 1.195 x that (nccl-tests on H100 / H200: 0.96 of the line rate, NVLink
    # SHARP; nccl_shares.NCCL_NVLINK_SHARE) and costs 21.6 us a call (NCCL_CALL_S)
    assert grp.inner.bandwidth == pytest.approx(450e9 * 0.80)
    assert grp.nvlink == "hopper"
    # flat ring: 2*7/8 * 1 GB / (360 GB/s x 1.195) + 14 * 2 us + 21.6 us
    expected = 2 * 7 / 8 * 1e9 / (450e9 * 0.80 * 1.195) + 14 * 2e-6 + 21.6e-6
    assert comms.all_reduce(1e9, grp) == pytest.approx(expected)


def test_dp_group_across_nodes_uses_infiniband() -> None:
    # tp = 8: DP ranks are 8 apart, one per node; 4 of them span 32 ranks = 4 nodes
    grp = comms.place(h100_cluster(64), stride=8, size=4)
    assert grp.tier_name == "infiniband"
    assert (grp.per_domain, grp.domains) == (1, 4)
    assert grp.outer is not None
    # 50 GB/s x 0.92 (NDR 400 Gb/s NICs reach 46-48 of 50 GB/s in nccl-tests)
    assert grp.outer.bandwidth == pytest.approx(50e9 * 0.92)
    # one GPU per node: the whole all-reduce crosses the NICs, 2*3/4 * S/B_out + 2*ceil(log2 4)*5us,
    # plus NCCL's 21.6 us call
    b_out = 50e9 * 0.92
    expected = 2 * (3 / 4 * 1e9 / b_out + 2 * 5e-6) + 21.6e-6
    assert comms.all_reduce(1e9, grp) == pytest.approx(expected)


def test_hierarchical_all_reduce_by_hand() -> None:
    # tp = 1, dp = 16 on 8-GPU nodes: g = 8 per node, k = 2 nodes. Reduce-scatter + all-gather
    # inside the node 2*(7/8)*S/B_in, all-reduce of S/8 across nodes 2*(1/2)*(S/8)/B_out.
    grp = comms.place(h100_cluster(16), stride=1, size=16)
    assert (grp.per_domain, grp.domains) == (8, 2)
    # inside the node NCCL's ring of 8 reaches 0.915 of the link's 360 GB/s (NCCL_NVLINK_SHARE)
    S, b_in, b_out = 8e9, 450e9 * 0.80 * 0.915, 50e9 * 0.92
    bw = 2 * (7 / 8 * S / b_in) + 2 * (1 / 2 * (S / 8) / b_out)
    # the all-reduce pays NCCL's tree latency per phase: 7 NVLink steps, ceil(log2 2) = 1 across
    # and NCCL's call, 21.6 us (all-reduce), 16.8 us (ring: reduce-scatter, all-gather)
    lat = 2 * (7 * 2e-6 + 1 * 5e-6)
    assert comms.all_reduce(S, grp) == pytest.approx(bw + lat + 21.6e-6)
    # reduce-scatter and all-gather move half of its bytes, as rings only (NCCL tuning.cc): n-1 =
    # 15 steps, k-1 = 1 across nodes, (16 - 2) x 2 us + 1 x 5 us
    ring = 14 * 2e-6 + 1 * 5e-6 + 16.8e-6
    assert comms.reduce_scatter(S, grp) == pytest.approx(bw / 2 + ring)
    assert comms.all_gather(S, grp) == pytest.approx(bw / 2 + ring)


def test_all_to_all_and_p2p() -> None:
    # EP 8 inside a node: (n-1)/n * S/B + (n-1) alpha, at the link's rate (no NCCL share for the
    # all-to-all: nccl_shares.NCCL_NVLINK_SHARE says why)
    grp = comms.place(h100_cluster(8), stride=1, size=8)
    b = 450e9 * 0.80
    assert comms.all_to_all(1e9, grp) == pytest.approx(7 / 8 * 1e9 / b + 7 * 2e-6)
    link = comms.Link(bandwidth=10e9, latency=1e-5)
    assert comms.p2p(1e9, link) == pytest.approx(0.1 + 1e-5)


def test_pipeline_neighbours_across_nodes() -> None:
    # tp 8 x dp 1: stage r and r+1 are 8 ranks apart, on different nodes
    assert comms.p2p_link(h100_cluster(32), stride=8, size=4).bandwidth == pytest.approx(
        50e9 * 0.92
    )
    # tp 2, pp 4: all 4 stages in one node
    assert comms.p2p_link(h100_cluster(8), stride=2, size=4).bandwidth == pytest.approx(
        450e9 * 0.80
    )


def _tp(**kw: object) -> tuple[float, float]:
    """TP traffic of one layer, tp 8 in an H100 node, S = 64 MB, one forward pass."""
    args: dict = {"n_fwd": 1, "sequence_parallel": False, "windows": (0.0, 0.0)} | kw
    return layer_tp.tensor_parallel_layer(h100_cluster(8), 8, 64e6, **args)


def test_tensor_parallel_layer_by_hand() -> None:
    # all-reduce of S on tp 8: 2*7/8 * 64 MB / (360 GB/s x 1.195) + 14 * 2 us + 21.6 us; a
    # reduce-scatter or all-gather 7/8 * 64 MB / (360 GB/s x 0.915) + 7 * 2 us + 16.8 us (NCCL's
    # H100 shares and calls, nccl_shares.NCCL_NVLINK_SHARE / NCCL_CALL_S)
    ar = 2 * 7 / 8 * 64e6 / (450e9 * 0.80 * 1.195) + 14 * 2e-6 + 21.6e-6
    half = 7 / 8 * 64e6 / (450e9 * 0.80 * 0.915) + 7 * 2e-6 + 16.8e-6
    # synchronous code: 2 all-reduces forward, one per block backward, all exposed
    assert _tp(overlap_backward=False) == pytest.approx((4 * ar, 0.0))
    # ... with full recompute the forward's two run twice
    assert _tp(overlap_backward=False, n_fwd=2) == pytest.approx((6 * ar, 0.0))
    # SP, gathered input saved (DTensor): all-gather + reduce-scatter per block per direction
    sp = {"sequence_parallel": True, "overlap_backward": False, "regather": False}
    assert _tp(**sp) == pytest.approx((8 * half, 0.0))
    # Megatron's SP saves the shard: one more all-gather per block backward
    assert _tp(**(sp | {"regather": True})) == pytest.approx((10 * half, 0.0))
    # Megatron, GEMMs longer than every collective: the backward input-gradient all-reduces hide
    assert _tp(windows=(1.0, 1.0)) == pytest.approx((2 * ar, 2 * ar))
    # ... with SP only the row-parallel gradient all-gather per block stays exposed
    both = _tp(sequence_parallel=True, windows=(1.0, 1.0))
    assert both == pytest.approx((6 * half, 4 * half))
    # a window a quarter of the all-reduce hides a quarter of it; no window hides nothing
    assert _tp(windows=(ar / 4, 0.0)) == pytest.approx((2 * ar + 3 / 4 * ar + ar, ar / 4))


@pytest.mark.parametrize(
    ("gpu", "sms"),
    [
        ("a100-sxm-80gb", 108),
        ("h800-sxm-80gb", 132),
        ("b200-sxm-180gb", 148),
        ("b300-sxm-270gb", 148),
        ("gb300-nvl72", 148),
        ("mi300x-192gb", 304),
        ("mi325x-256gb", 304),
        ("mi355x-288gb", 256),
    ],
)
def test_sm_share_is_the_kernels_sms_over_the_parts(gpu: str, sms: int) -> None:
    # COMM_KERNEL_SMS = 20 (DeepSeek-V3's and DeepEP's dispatch SMs) over each part's SM count
    # (NVIDIA whitepapers: A100 108, H100 / H800 132, B200 148; Blackwell Ultra at least B200's
    # 148, not Hopper's 132; MI300X / MI325X 304 CUs, CDNA 4's MI355X 8 dies x 32 = 256)
    spec = catalog.get_gpu(gpu)
    cluster = ClusterSpec(
        gpu=spec, num_gpus=8, gpus_per_node=8, memory_gib=spec.memory_gib, tiers=spec.tiers
    )
    assert comms.sm_share(cluster) == pytest.approx(20 / sms)


def test_fp8_param_gather_halves_the_fp8_weights_all_gather() -> None:
    """Megatron-LM d98e8a64 param_and_grad_buffer.py keeps FP8 parameters' buffer as torch.uint8:
    with --fp8-param-gather the distributed optimizer gathers 1 byte per FP8 weight, not 2. With
    no window to hide in (no overlap), the exposed all-gather is the bucketed all_gather of the
    bytes; the reduce-scatter is unchanged (hand arithmetic on the definition)."""
    from planner.inputs.layout import Layout

    cluster = h100_cluster(64)
    lay = Layout(tp=1, pp=1, dp=64, overlap_grad_reduce=False, overlap_param_gather=False)
    groups = dp_sync.data_parallel_groups(cluster, lay)
    n = 1e9
    bf16, _ = dp_sync.data_parallel(groups, lay, n, 0.0, 2.0, 0.0, 0.0, 1)
    fp8, _ = dp_sync.data_parallel(groups, lay, n, 0.0, 2.0, 0.0, 0.0, 1, param_bytes=(1.0, 1.0))
    buckets = int(n // 64_000_000) + 1  # max(40M, 1M x 64) parameters a bucket
    ag = buckets * comms.all_gather(n / buckets, groups[0])  # 1 byte a parameter
    assert bf16 - fp8 == pytest.approx(buckets * comms.all_gather(2 * n / buckets, groups[0]) - ag)


def test_a_full_mesh_gives_a_group_its_own_links_only() -> None:
    # MI300X: 7 xGMI links of 64 GB/s per direction, 448 together (the catalog's tier), each to
    # one peer. A group of g GPUs in one node uses its g - 1 links, x 0.75 achieved
    # (the xgmi tier's bus_efficiency: AMD's measured ~48 of 64 GB/s per link, rocm.blogs.amd.com
    # "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X", 2025-03-02)
    c = job("llama3.1-8b", "mi300x-192gb", 64, 4096, 64).cluster
    for size, peers in ((2, 1), (4, 3), (8, 7)):
        grp = comms.place(c, stride=1, size=size)
        assert grp.outer is None
        assert grp.inner.bandwidth == pytest.approx(peers * 64e9 * 0.75)
    # strided: 4 ranks 2 apart (GPUs 0, 2, 4, 6 of a node) still reach 3 peers
    assert comms.place(c, stride=2, size=4).inner.bandwidth == pytest.approx(3 * 64e9 * 0.75)
    # a pipeline hop inside a node crosses the one link between the pair
    assert comms.p2p_link(c, stride=1, size=4).bandwidth == pytest.approx(64e9 * 0.75)
    # two-level: 4 ranks 4 apart span two nodes, 2 per node: their pair's link inside, the NIC
    # (50 GB/s x 0.92) across
    grp = comms.place(c, stride=4, size=4)
    assert (grp.per_domain, grp.domains) == (2, 2)
    assert grp.inner.bandwidth == pytest.approx(64e9 * 0.75)
    assert grp.outer is not None and grp.outer.bandwidth == pytest.approx(50e9 * 0.92)
    # a TP all-reduce of 1 GB in a pair: 2 * 1/2 * 1e9 / 48e9 + 2 * 2 us, seven times the
    # bandwidth term a switch of the same aggregate rate would give
    pair = comms.place(c, stride=1, size=2)
    assert comms.all_reduce(1e9, pair) == pytest.approx(1e9 / 48e9 + 4e-6)


def test_nvlink_behind_a_switch_gives_any_group_the_whole_rate() -> None:
    c = h100_cluster(64)
    for size in (2, 4, 8):
        assert comms.place(c, stride=1, size=size).inner.bandwidth == pytest.approx(450e9 * 0.80)
    assert comms.p2p_link(c, stride=1, size=4).bandwidth == pytest.approx(450e9 * 0.80)


def test_a_calibrated_scaleup_bandwidth_scales_a_tier_of_its_own_measured_efficiency() -> None:
    # MI300X's xGMI tier carries its own measured bus efficiency, 0.75 (the catalog's source,
    # above); the scale-up constant ships at 0.80. A profile's scaleup_bandwidth 0.4 halves the
    # constant, so it halves the tier's too: 0.75 x 0.4 / 0.8 = 0.375 (hand arithmetic). It was
    # read only where a tier had none, so on every AMD part a profile changed nothing.
    c = job("llama3.1-8b", "mi300x-192gb", 64, 4096, 64).cluster
    xgmi = c.tiers[0]
    assert xgmi.bus_efficiency == 0.75 and comms.bus_efficiency(xgmi, True) == 0.75
    with calibratable.calibrated({"scaleup_bandwidth": 0.4}):
        assert comms.bus_efficiency(xgmi, True) == pytest.approx(0.375)
        # a TP group of 8 in a node, over its 7 links of 64 GB/s: 448e9 x 0.375
        assert comms.place(c, stride=1, size=8).inner.bandwidth == pytest.approx(448e9 * 0.375)
    assert comms.place(c, stride=1, size=8).inner.bandwidth == pytest.approx(448e9 * 0.75)
