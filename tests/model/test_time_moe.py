"""Step time of today's MoE recipes: token dispatchers, node-limited routing, grouped GEMMs.

Oracles: DeepEP's published kernel bandwidths on H800 (deepseek-ai/DeepEP docs/legacy.md, normal
kernels, 4096 tokens x 7168 hidden, top-8 of 256 experts, top-4 node groups; its "bottleneck
bandwidth" counts a token once per node it reaches, its own included, tests/test_internode.py
`num_rdma_token_sent`), DeepGEMM's published FP8 (1 x 128 / 128 x 128 blockwise) GEMM TFLOPS on
H800 (deepseek-ai/DeepGEMM README @7a70b439), exact combinatorics for the expected fan-out
(math.comb), and hand arithmetic in comments.
"""

from __future__ import annotations

from math import comb

import pytest
from paths import EXAMPLES

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import load_plan
from planner.model import comms, cost, dispatch, gemm, layer_time

EXAMPLE = EXAMPLES / "deepseek-v3-h800.toml"


def h800(num_gpus: int) -> ClusterSpec:
    gpu = catalog.get_gpu("h800-sxm-80gb")
    return ClusterSpec(
        gpu=gpu, num_gpus=num_gpus, gpus_per_node=8, memory_gib=gpu.memory_gib, tiers=gpu.tiers
    )


def deepep_routing(ep: int) -> dispatch.Routing:
    """DeepEP's benchmark: 4096 tokens, 7168 hidden, top-8 of 256 experts, top-4 node groups."""
    nodes = ep // 8
    limited = nodes > 1
    return dispatch.Routing(
        tokens=4096,
        hidden=7168,
        topk=8,
        experts=256,
        groups=nodes if limited else None,
        group_topk=min(nodes, 4) if limited else None,
    )


@pytest.mark.parametrize(
    ("ep", "published", "tol"),
    [
        (8, 153.0, 0.10),  # intranode, NVLink
        (16, 43.0, 0.15),  # internode, RDMA; the model is NVLink-bound here (see below)
        (32, 58.0, 0.10),
        (64, 51.0, 0.10),
    ],
)
def test_deepep_published_bandwidths(ep: int, published: float, tol: float) -> None:
    # One bf16 dispatch (the published rates are the same for fp8 bytes). DeepEP's "bottleneck
    # bandwidth": tokens x (nodes reached, own included) x h x bytes / time across nodes, tokens x
    # (GPUs reached) x h x bytes / time inside one. EP 64 by hand: 3.63 nodes reached, 7/8 of
    # them remote, at 0.88 x 50 GB/s: 44 x 8/7 = 50.3 GB/s. EP 16 reaches both nodes with
    # 6.5 GPUs per token; forwarding 6.5 x 7/8 copies over NVLink at 0.70 x 200 GB/s takes
    # longer than the half that crosses the NIC, so the model says 48.8, DeepEP measured 43.
    cluster = h800(max(ep, 8))
    r = deepep_routing(ep)
    grp = comms.place(cluster, 1, ep)
    nodes, gpus = dispatch.fused_dispatch_fanout(grp, r)
    one = dispatch.moe_dispatch(cluster, 1, ep, r, "flex", n_fwd=1) / 4  # 2 passes x 2 ops
    reached = nodes if grp.domains > 1 else gpus
    logical = 4096 * reached * 7168 * 2 / one / 1e9
    assert logical == pytest.approx(published, rel=tol)


def test_node_limited_fanout_by_hand() -> None:
    # DeepSeek-V3 on EP 64: 8 nodes, one 32-expert group per node, a token's 8 experts among the
    # 128 of its 4 groups. Nodes reached: 4 x (1 - C(96, 8) / C(128, 8)) = 3.63; GPUs reached
    # (4 experts each, 32 GPUs allowed): 32 x (1 - C(124, 8) / C(128, 8)) = 7.31. Without the
    # group limit: 8 x (1 - C(224, 8) / C(256, 8)) = 5.29 nodes.
    grp = comms.place(h800(64), 1, 64)
    nodes, gpus = dispatch.fused_dispatch_fanout(grp, deepep_routing(64))
    assert nodes == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)))
    assert nodes == pytest.approx(3.63, abs=0.01)
    assert gpus == pytest.approx(32 * (1 - comb(124, 8) / comb(128, 8)))
    free = dispatch.Routing(tokens=4096, hidden=7168, topk=8, experts=256)
    unlimited, _ = dispatch.fused_dispatch_fanout(grp, free)
    assert unlimited == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    assert unlimited == pytest.approx(5.29, abs=0.01)
    # so the fused dispatcher's NIC traffic falls by 3.63 / 5.29 with node-limited routing
    limited = dispatch.moe_dispatch(h800(64), 1, 64, deepep_routing(64), "flex")
    assert limited < dispatch.moe_dispatch(h800(64), 1, 64, free, "flex")


def test_group_limited_fanout_inside_one_node_by_hand() -> None:
    # Megatron's MoE layer test's DeepSeek proxy (tests/functional_tests/test_cases/common/
    # moe_perf/test_cases.py @ d98e8a64): 32 experts in 8 groups, top-8 from 4 groups, EP 8 on one
    # node. A rank holds 4 contiguous experts, one group, so a token reaches at most 4 GPUs:
    # 4 x (1 - C(12, 8) / C(16, 8)) = 3.85 of them, against 8 x (1 - C(28, 8) / C(32, 8)) = 5.64
    # without the group limit; one node either way.
    grp = comms.place(h800(8), 1, 8)
    proxy = dispatch.Routing(tokens=4096, hidden=7168, topk=8, experts=32, groups=8, group_topk=4)
    nodes, gpus = dispatch.fused_dispatch_fanout(grp, proxy)
    assert nodes == pytest.approx(1.0)
    assert gpus == pytest.approx(4 * (1 - comb(12, 8) / comb(16, 8)))
    assert gpus == pytest.approx(3.85, abs=0.01)
    free = dispatch.Routing(tokens=4096, hidden=7168, topk=8, experts=32)
    _, unlimited = dispatch.fused_dispatch_fanout(grp, free)
    assert unlimited == pytest.approx(8 * (1 - comb(28, 8) / comb(32, 8)))
    # NVLink carries the copies to the other GPUs, so the fused dispatch takes 3.85 / 5.64 as
    # long (less the latency, the same in both)
    lat = grp.inner.latency * comms.LATENCY_SCALE * 4
    ratio = (dispatch.moe_dispatch(h800(8), 1, 8, proxy, "flex") - lat) / (
        dispatch.moe_dispatch(h800(8), 1, 8, free, "flex") - lat
    )
    assert ratio == pytest.approx(gpus / unlimited)


def test_nccl_all_to_all_sends_every_copy_whatever_the_groups() -> None:
    # Megatron's alltoall dispatcher permutes one row per (token, expert): S = t x k x h x 2 x
    # load per all-to-all, four per forward + backward, group limit or not.
    cluster = h800(64)
    r = dispatch.Routing(tokens=4096, hidden=7168, topk=8, experts=256, load=1.2)
    limited = dispatch.Routing(
        tokens=4096, hidden=7168, topk=8, experts=256, groups=8, group_topk=4, load=1.2
    )
    size = 4096 * 8 * 7168 * 2 * 1.2
    expected = dispatch.expert_all_to_all(cluster, 1, 64, size, 1)
    assert dispatch.moe_dispatch(cluster, 1, 64, r, "alltoall") == pytest.approx(expected)
    assert dispatch.moe_dispatch(cluster, 1, 64, limited, "alltoall") == pytest.approx(expected)


def test_fused_dispatch_beats_nccl_by_the_copies_it_saves() -> None:
    # DeepSeek-V3 on EP 64, both NIC-bound: NCCL moves 8 x 7/8 copies per token at 0.92 x 50
    # GB/s, DeepEP 3.63 x 7/8 at 0.88 x 50: (8 / 0.92) / (3.63 / 0.88) = 2.11 x faster
    # (latencies aside: 7 x 5 us per NCCL call, 5 us per fused one).
    cluster = h800(64)
    r = dispatch.Routing(
        tokens=4096, hidden=7168, topk=8, experts=256, groups=8, group_topk=4, load=1.2
    )
    nccl = dispatch.moe_dispatch(cluster, 1, 64, r, "alltoall")
    fused = dispatch.moe_dispatch(cluster, 1, 64, r, "flex")
    nodes = 4 * (1 - comb(96, 8) / comb(128, 8))
    ratio = (8 / comms.SCALEOUT_BUS_EFFICIENCY) / (nodes / dispatch.FUSED_EP_RDMA_EFFICIENCY)
    assert nccl / fused == pytest.approx(ratio, rel=0.01)


def test_fp8_dispatch_moves_fewer_bytes() -> None:
    # NIC-bound: a dispatch in fp8 (1 + 4/128 bytes) and a combine in bf16 (2) against 2 + 2
    cluster = h800(64)
    r = deepep_routing(64)
    bf16 = dispatch.moe_dispatch(cluster, 1, 64, r, "flex")
    fp8 = dispatch.moe_dispatch(
        cluster, 1, 64, r, "flex", dispatch_bytes=dispatch.FP8_DISPATCH_BYTES
    )
    assert fp8 / bf16 == pytest.approx((1 + 4 / 128 + 2) / 4, rel=0.01)


def test_allgather_dispatcher_by_hand() -> None:
    # ep 8 in one node: each pass all-gathers the 8 ranks' tokens (S = 8 x 1024 x 4096 x 2 bytes)
    # and reduce-scatters them back; forward + backward = 2 passes, top-k does not enter
    cluster = h800(8)
    r = dispatch.Routing(tokens=1024, hidden=4096, topk=2, experts=8)
    grp = comms.place(cluster, 1, 8)
    s = 8 * 1024 * 4096 * 2
    expected = 2 * (comms.all_gather(s, grp) + comms.reduce_scatter(s, grp))
    assert dispatch.moe_dispatch(cluster, 1, 8, r, "allgather") == pytest.approx(expected)
    more = dispatch.Routing(tokens=1024, hidden=4096, topk=8, experts=8)
    assert dispatch.moe_dispatch(cluster, 1, 8, more, "allgather") == pytest.approx(expected)


# (M, N, K, TFLOPS) of DeepGEMM's published H800 table with at least 4096 rows and K >= 1536:
# normal GEMMs, then grouped (contiguous layout; M per group)
DEEPGEMM = [
    (4096, 2112, 7168, 1058),
    (4096, 24576, 1536, 990),
    (4096, 7168, 16384, 1358),
    (4096, 4096, 7168, 1304),
    (4096, 7168, 2048, 1025),
    (8192, 4096, 7168, 1297),
    (8192, 7168, 2048, 1099),
    (4096, 4096, 7168, 1288),
    (4096, 7168, 2048, 1093),
]


@pytest.mark.parametrize(("m", "n", "k", "tflops"), DEEPGEMM)
def test_blockwise_fp8_gemms_run_at_the_fp8_roofline(m: int, n: int, k: int, tflops: float) -> None:
    # The roofline at the H800's FP8 ceiling (H100 MAMF 1402.6 / 1979) against DeepGEMM's
    # blockwise kernels: -6% to +18% on these shapes. Not covered: K = 512 (MLA's kv
    # up-projection), where DeepGEMM's 590 TFLOPS is 62% below the roofline (short K loops:
    # tile prologue and epilogue), and M <= 128 (decode shapes).
    spec = catalog.get_gpu("h800-sxm-80gb")
    e = min(layer_time.GEMM_EFFICIENCY_MAX, spec.matmul_ceiling("fp8") or 1.0)
    ridge = spec.peak_tflops_bf16 / spec.hbm_bandwidth_tb_per_s
    assert spec.peak_tflops_fp8 is not None
    model = spec.peak_tflops_fp8 * gemm.gemm_efficiency(m, k, n, ridge, e)
    assert model == pytest.approx(tflops, rel=0.20)


def test_grouped_gemm_pads_each_expert_to_its_row_tile() -> None:
    # an expert with 10 tokens computes a whole 128-row tile; with 10,000 about half a tile more
    tile = gemm.GROUPED_GEMM_TILE_ROWS
    assert gemm.grouped_rows(10) == tile
    assert gemm.grouped_rows(10_000) == 10_000 + tile / 2


def test_deepseek_v3_example_uses_node_limited_deepep_traffic() -> None:
    # per MoE layer and micro-batch: 4096 tokens, 4 ops (dispatch and combine, forward and
    # backward) of 4096 x 3.63 x 7/8 x 7168 x 2 bytes x 1.069 at 0.88 x 50 GB/s = 4.53 ms each
    # over the NIC; 1.069 the busiest of 8 nodes of 32 experts (routing_load.node_load:
    # 1 + z(8) 0.274 / sqrt(32) = 1 + 1.4342 x 0.04844), what each GPU's NIC receives: its
    # node's share (DeepEP sends a token to the same-index GPU of each target node, DeepSeek-V3
    # Sec. 3.2.2). The NVLink leg at the busiest GPU's 1.320 (64 ranks of 4 experts,
    # 1 + z(64) 0.274 / sqrt(4)) over 7.36 GPUs is 3.57 ms, under it.
    plan = load_plan(EXAMPLE)
    lay = plan.require_layout()
    job = plan.job
    assert (job.moe_router_num_groups, job.moe_router_group_topk) == (8, 4)
    moe = layer_time.layer_time(job, lay, layer_time.gpu_of(job), True)
    nodes = 4 * (1 - comb(96, 8) / comb(128, 8))
    op = 4096 * nodes * 7 / 8 * 7168 * 2 * 1.06947 / (0.88 * 50e9) + 5e-6
    assert moe.ep == pytest.approx(4 * op, rel=1e-4)
    perf = cost.estimate(job, lay)
    # Megatron's EP overlap hides most of it under the other micro-batch's compute
    assert perf.breakdown.ep_comm_hidden > perf.breakdown.ep_comm_exposed
