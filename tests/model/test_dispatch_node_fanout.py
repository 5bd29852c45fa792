"""The fused (flex) dispatchers' fan-out with expert TP, and their NIC leg at the node's load.

Oracles: Megatron-LM d98e8a64 megatron/core/transformer/moe/token_dispatcher.py :1905-1918 (the
flex dispatcher's routing map [tokens, ep, 1, local] expanded over tp to ranks
ep_idx x etp + tp_idx of the etp x ep group), brute-force enumeration of every routing of a
small layer under that rank order, exact combinatorics (math.comb), DeepSeek-V3 Sec. 3.2.2 for
the node-level receive (a token crosses the NIC to the same-index GPU of each target node, which
forwards it over NVLink), and hand arithmetic in comments.
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import pytest
from jobs import job

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.model import comms, dispatch, routing_load


def _cluster(gpu: str, num_gpus: int, per_node: int) -> ClusterSpec:
    g = catalog.get_gpu(gpu)
    return ClusterSpec(
        gpu=g, num_gpus=num_gpus, gpus_per_node=per_node, memory_gib=g.memory_gib, tiers=g.tiers
    )


def _brute(
    experts: int, topk: int, ep: int, etp: int, per_node: int, groups: int, group_topk: int
) -> tuple[float, float]:
    """Mean (nodes, GPUs) a token reaches over every routing: group_topk of `groups` contiguous
    groups, then top_k of their experts, all equally likely; expert e on EP rank
    e // (E / ep), whose etp GPUs are ranks ep_idx x etp + tp_idx (token_dispatcher.py :1905-1918),
    GPU r on node r // per_node."""
    local, per_group = experts // ep, experts // groups
    nodes = gpus = count = 0
    for chosen in combinations(range(groups), group_topk):
        pool = [e for g in chosen for e in range(g * per_group, (g + 1) * per_group)]
        for picks in combinations(pool, topk):
            ranks = {(e // local) * etp + t for e in picks for t in range(etp)}
            nodes += len({r // per_node for r in ranks})
            gpus += len(ranks)
            count += 1
    return nodes / count, gpus / count


@pytest.mark.parametrize("groups,group_topk", [(1, 1), (4, 2)])
def test_expert_tp_fanout_matches_brute_force(groups: int, group_topk: int) -> None:
    # 64 experts, top-3, ep 16 x etp 2 on 4 nodes of 8 GPUs: each node holds 4 EP ranks of 4
    # experts (16 experts, one group of 4), and a chosen expert's 2 etp ranks share its node.
    # No group limit: nodes 4 (1 - C(48, 3) / C(64, 3)) = 2.34, GPUs 2 x 16 (1 - C(60, 3) /
    # C(64, 3)) = 5.72; folding etp into top_k x etp of E x etp experts gave
    # 4 (1 - C(96, 6) / C(128, 6)) = 3.32 nodes.
    cl = _cluster("h100-sxm-80gb", 32, 8)
    grp = comms.place(cl, 1, 32)
    assert (grp.domains, grp.per_domain) == (4, 8)
    limited = groups > 1
    r = dispatch.Routing(
        tokens=1,
        hidden=1,
        topk=3,
        experts=64,
        groups=groups if limited else None,
        group_topk=group_topk if limited else None,
    )
    nodes, gpus = dispatch.fused_dispatch_fanout(grp, r, 2)
    want = _brute(64, 3, 16, 2, 8, groups, group_topk)
    assert (nodes, gpus) == pytest.approx(want, rel=1e-9)
    if not limited:
        assert nodes == pytest.approx(4 * (1 - comb(48, 3) / comb(64, 3)))
        assert gpus == pytest.approx(32 * (1 - comb(60, 3) / comb(64, 3)))


def test_flex_expert_tp_nic_traffic_counts_nodes_once() -> None:
    # DeepSeek-V3 shapes (4096 tokens x 7168, top-8 of 256), flex over ep 32 x etp 2 on 8 nodes
    # of 8 H800: a token reaches 8 (1 - C(224, 8) / C(256, 8)) = 5.29 nodes (the planner had
    # 7.09, the etp copies taken as independent picks) and 2 x 32 (1 - C(248, 8) / C(256, 8)) =
    # 14.53 GPUs. Per op: the NIC 4096 x 7168 x 2 x 5.29 x 7/8 at 0.88 of 50 GB/s, NVLink
    # 4096 x 7168 x 2 x 14.53 x 7/8 at 0.70 of the NVLink bus rate; 4 ops (dispatch and combine,
    # forward and backward), each the slower leg plus one NIC latency.
    cl = _cluster("h800-sxm-80gb", 64, 8)
    r = dispatch.Routing(tokens=4096, hidden=7168, topk=8, experts=256)
    grp = comms.place(cl, 1, 64)
    nodes = 8 * (1 - comb(224, 8) / comb(256, 8))
    gpus = 2 * 32 * (1 - comb(248, 8) / comb(256, 8))
    elems = 4096 * 7168 * 2
    assert grp.outer is not None
    rdma = grp.outer.bandwidth / comms.SCALEOUT_BUS_EFFICIENCY * dispatch.FUSED_EP_RDMA_EFFICIENCY
    nvl = grp.inner.bandwidth / comms.SCALEUP_BUS_EFFICIENCY * dispatch.FUSED_EP_NVLINK_EFFICIENCY
    op = max(elems * nodes * 7 / 8 / rdma, elems * gpus * 7 / 8 / nvl)
    op += grp.outer.latency * comms.LATENCY_SCALE
    assert dispatch.moe_dispatch(cl, 2, 32, r, "flex") == pytest.approx(4 * op)


def test_node_load_of_deepseek_v3() -> None:
    # 256 experts over ep 64 on 8 nodes of 8: the busiest GPU 1 + z(64) 0.274 / sqrt(4) = 1.320,
    # the busiest node (32 experts) 1 + z(8) 0.274 / sqrt(32), z(8) = Phi^-1(7.625 / 8.25) =
    # 1.4342: 1.0695. One node: no NIC leg, 1.
    j = job("deepseek-v3", "h800-sxm-80gb", 64, 4096, 64)
    lay = Layout(tp=1, pp=1, dp=64, ep=64)
    assert routing_load.step_load(j, lay) == pytest.approx(1.3201, abs=1e-4)
    assert routing_load.node_load(j, lay, 8) == pytest.approx(1.06947, abs=1e-4)
    assert routing_load.node_load(j, lay, 1) == 1.0


def test_flex_nic_leg_takes_the_node_load() -> None:
    # the same layer at GPU load 1.320 and node load 1.069, node-limited (4 of 8 groups): the NIC
    # leg 4096 x 7168 x 2 x 3.63 x 7/8 x 1.069 / (0.88 x 50 GB/s) = 4.53 ms beats NVLink's
    # 4096 x 7168 x 2 x 7.36 x 7/8 x 1.320 / nvl = 3.57 ms; at node load = GPU load the NIC leg
    # is 5.59 ms (the planner's old 22.4 ms a layer a micro-batch, now 18.1).
    cl = _cluster("h800-sxm-80gb", 64, 8)
    grp = comms.place(cl, 1, 64)
    assert grp.outer is not None
    r = dispatch.Routing(
        tokens=4096, hidden=7168, topk=8, experts=256, groups=8, group_topk=4, load=1.3201
    )
    nodes = 4 * (1 - comb(96, 8) / comb(128, 8))
    rdma = grp.outer.bandwidth / comms.SCALEOUT_BUS_EFFICIENCY * dispatch.FUSED_EP_RDMA_EFFICIENCY
    lat = grp.outer.latency * comms.LATENCY_SCALE
    elems = 4096 * 7168 * 2
    node = dispatch.Routing(**{**r.__dict__, "node_load": 1.06947})
    got = dispatch.moe_dispatch(cl, 1, 64, node, "flex")
    assert got == pytest.approx(4 * (elems * nodes * 7 / 8 * 1.06947 / rdma + lat))
    assert got == pytest.approx(18.15e-3, abs=0.05e-3)
    old = dispatch.moe_dispatch(cl, 1, 64, r, "flex")  # node_load None: the GPU's
    assert old == pytest.approx(4 * (elems * nodes * 7 / 8 * 1.3201 / rdma + lat))


def _flex_forced(model: str, ep: int, **kw: object) -> tuple[object, Layout]:
    j = job(model, "h800-sxm-80gb", ep, 4096, ep, moe_router_force_load_balancing=True, **kw)
    return j, Layout(tp=1, pp=1, dp=ep, ep=ep, moe_token_dispatcher_type="flex")


def test_forced_node_load_counts_distinct_tokens() -> None:
    """Under forced balance a node's NIC receives each token once however many of its experts
    the token picks (DeepEP dd758caf csrc/kernels/legacy/layout.cu:87, :100), so its count is
    binomial over the block's T tokens at the chance p one token reaches it: the busiest of n
    nodes 1 + z(n) sqrt((1 - p) / (T p)). Random logits still go through the group limits
    (Megatron d98e8a64 router.py:861-871).

    DeepSeek-V3, ep 64 on 8 nodes, 4 of 8 groups: a token reaches 4 (1 - C(96, 8) / C(128, 8))
    = 3.6290 nodes, p = 0.45363, T = 4,096 x 64 = 262,144, z(8) = 1.4342:
    1 + 1.4342 x 1.0975 / 512 = 1.003074 (the routed copies', over all 256 experts and centred
    as `relative_spread`: 1 + 1.4342 x 0.9225 x sqrt(8 / 7) / 512 = 1.002762).
    Qwen3-235B-A22B (128 experts, top 8, no groups), ep 32 on 4 nodes:
    p = 1 - C(96, 8) / C(128, 8) = 0.90725, T = 131,072, z(4) = Phi^-1(3.625 / 4.25) = 1.04913:
    1 + 1.04913 x 0.31973 / 362.04 = 1.000927 (copies: 0.59526 x sqrt(4 / 3), 1.001992)."""
    cases = (
        ("deepseek-v3", 64, 8, {"moe_router_num_groups": 8, "moe_router_group_topk": 4}),
        ("qwen3-235b-a22b", 32, 4, {}),
    )
    for model, ep, nodes, kw in cases:
        j, lay = _flex_forced(model, ep, **kw)
        r = dispatch.Routing(
            tokens=4096, hidden=j.arch.hidden_size, topk=8, experts=j.arch.num_moe_experts or 1,
            groups=j.moe_router_num_groups, group_topk=j.moe_router_group_topk,
        )  # fmt: skip
        share = dispatch.node_share(r, nodes)
        got = routing_load.node_load(j, lay, nodes, share)
        if model == "deepseek-v3":
            assert share == pytest.approx(4 * (1 - comb(96, 8) / comb(128, 8)) / 8)
            assert got == pytest.approx(1.003074, abs=2e-6)
            assert routing_load.node_load(j, lay, nodes) == pytest.approx(1.002762, abs=2e-6)
        else:
            assert share == pytest.approx(1 - comb(96, 8) / comb(128, 8))
            assert got == pytest.approx(1.000927, abs=2e-6)
            assert routing_load.node_load(j, lay, nodes) == pytest.approx(1.001992, abs=2e-6)


def test_flex_layer_dispatch_reads_the_distinct_node_load() -> None:
    """The flex layer's NIC leg takes the distinct-token node load (above: 1.000927 for
    Qwen3-235B at ep 32 on 4 nodes), not the copies' (1.001992)."""
    j, lay = _flex_forced("qwen3-235b-a22b", 32)
    r = dispatch.Routing(tokens=4096, hidden=j.arch.hidden_size, topk=8, experts=128)
    want = 1.0009265
    load = routing_load.step_load(j, lay)
    a2a, _ = dispatch.layer_dispatch(j, lay, 4096, load, 1, (), 1)
    node = dispatch.Routing(**{**r.__dict__, "load": load, "node_load": want})
    wd = 2.0  # bf16 hidden states
    assert a2a == pytest.approx(dispatch.moe_dispatch(j.cluster, 1, 32, node, "flex", 1, wd, wd))
