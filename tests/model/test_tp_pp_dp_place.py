"""Placement under Megatron's --use-tp-pp-dp-mapping (`Layout.use_tp_pp_dp_mapping`).

Oracle: Megatron-LM d98e8a64 initialize.py:395 passes order 'tp-cp-ep-pp-dp' under the flag
(default 'tp-cp-ep-dp-pp'); parallel_state.py's RankGenerator numbers ranks with the first token
fastest, global rank = tp_r + tp (cp_r + cp (pp_r + pp dp_r)) (the expert generator the same
with etp, ep, pp, expert dp, parallel_state.py:887-896). The brute force below lists the groups
of rank 0 from that formula and counts the members per 8-GPU node.
"""

from __future__ import annotations

import itertools

from jobs import h100_cluster

from planner.inputs.layout import Layout
from planner.model import comms, dp_sync

NODE = 8


def _ranks(order: str, sizes: dict[str, int], vary: set[str]) -> list[int]:
    """Rank 0's group over the tokens `vary`: every rank whose other coordinates are 0."""
    tokens = order.split("-")
    axes = [range(sizes[t]) if t in vary else range(1) for t in tokens]
    out = []
    for coords in itertools.product(*axes):
        rank, scale = 0, 1
        for t, c in zip(tokens, coords, strict=True):
            rank += c * scale
            scale *= sizes[t]
        out.append(rank)
    return sorted(out)


def _per_node(ranks: list[int]) -> tuple[int, int]:
    """(members per node, nodes) of a group spread evenly over nodes of 8."""
    nodes = {r // NODE for r in ranks}
    return len(ranks) // len(nodes), len(nodes)


MAPPED = "tp-cp-ep-pp-dp"
DEFAULT = "tp-cp-ep-dp-pp"


def test_64_h100_pipeline_in_a_node_data_parallel_over_8_nodes() -> None:
    """tp 2 pp 4 dp 8 on 8 nodes of 8: with the flag rank 0's pipeline is {0, 2, 4, 6} (one
    node; default {0, 16, 32, 48}, four nodes) and its DP group {0, 8, ..., 56}, one rank on
    each of 8 nodes (default {0, 2, ..., 14}: 4 ranks on each of 2 nodes)."""
    sizes = {"tp": 2, "cp": 1, "ep": 1, "pp": 4, "dp": 8}
    assert _ranks(MAPPED, sizes, {"pp"}) == [0, 2, 4, 6]
    assert _ranks(DEFAULT, sizes, {"pp"}) == [0, 16, 32, 48]
    assert _per_node(_ranks(MAPPED, sizes, {"dp"})) == (1, 8)
    assert _per_node(_ranks(DEFAULT, sizes, {"dp"})) == (4, 2)
    cluster = h100_cluster(64)
    lay = Layout(tp=2, pp=4, dp=8)
    mapped = lay.with_(use_tp_pp_dp_mapping=True)
    assert dp_sync.pp_stride(lay) == 16 and dp_sync.pp_stride(mapped) == 2
    inner = comms.place(cluster, dp_sync.pp_stride(mapped), 4)
    assert inner.outer is None and inner.domains == 1  # the pipeline inside one NVLink node
    assert comms.place(cluster, dp_sync.pp_stride(lay), 4).domains == 4
    dense, _ = dp_sync.data_parallel_groups(cluster, mapped)
    assert (dense.per_domain, dense.domains, dense.tier_name) == (1, 8, "infiniband")
    dense, _ = dp_sync.data_parallel_groups(cluster, lay)
    assert (dense.per_domain, dense.domains) == (4, 2)


def test_context_parallel_blocks_and_the_expert_grid() -> None:
    """Megatron's functional-test shape tp 2 cp 2 pp 2 (etp 4 = tp x cp, as the flag needs with
    pp > 1), dp 4 on 32 GPUs: the dense dp x cp group of rank 0 is {0, 2} + 8 dp_r, 2 per node
    on 4 nodes; the expert-dp group (etp 4, ep 1, expert dp 4) {0, 8, 16, 24}, 1 per node."""
    dense_sizes = {"tp": 2, "cp": 2, "ep": 1, "pp": 2, "dp": 4}
    assert _per_node(_ranks(MAPPED, dense_sizes, {"cp", "dp"})) == (2, 4)
    expert_sizes = {"tp": 4, "cp": 1, "ep": 1, "pp": 2, "dp": 4}
    assert _ranks(MAPPED, expert_sizes, {"dp"}) == [0, 8, 16, 24]
    assert _ranks(MAPPED, expert_sizes, {"pp"}) == _ranks(MAPPED, dense_sizes, {"pp"}) == [0, 4]
    lay = Layout(tp=2, cp=2, pp=2, dp=4, etp=4, use_tp_pp_dp_mapping=True)
    dense, expert = dp_sync.data_parallel_groups(h100_cluster(32), lay)
    assert (dense.size, dense.per_domain, dense.domains) == (8, 2, 4)
    assert (expert.size, expert.per_domain, expert.domains) == (4, 1, 4)
    assert dp_sync.pp_stride(lay) == 4  # tp x cp: rank 0's pipeline {0, 4}


def test_pp_1_is_the_default_order() -> None:
    """Without pipeline parallelism the two orders number ranks alike."""
    lay = Layout(tp=2, cp=2, dp=16)
    cluster = h100_cluster(64)
    assert dp_sync.data_parallel_groups(cluster, lay) == dp_sync.data_parallel_groups(
        cluster, lay.with_(use_tp_pp_dp_mapping=True)
    )
