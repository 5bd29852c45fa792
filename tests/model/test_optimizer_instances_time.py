"""Megatron's --num-distributed-optimizer-instances N > 1 in the step time
(`planner.model.dp_instances`): each instance's collectives on its own tier, the reduction across
the instances on theirs.

Oracles (NVIDIA/Megatron-LM d98e8a64):
- megatron/core/parallel_state.py:927-1011: instance i is the i-th consecutive slice of
  dp x cp / N ranks of each dp-cp group; :1474-1496 and :378-433 (create_hierarchical_groups):
  the group across instances takes one rank per slice; :2457-2467 the dense parameters share it;
- megatron/core/distributed/param_and_grad_buffer.py:676-762: per bucket a reduce-scatter over
  the instance and an all-reduce of its shard across the instances; :505-524 the parameter
  all-gather over the instance;
- megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py:776-787 and
  param_and_grad_buffer.py:4134-4225: Megatron-FSDP reduces a unit's shard across the instances
  (all-reduce; reduce-scatter under --outer-dp-sharding-strategy optim) at the last micro-batch
  only; megatron_fsdp.py:482-490, :905 and param_and_grad_buffer.py:4543-4563: under optim each
  unit's shard is all-gathered across the instances in the first micro-batch.
The seconds are hand arithmetic from the catalog's H100 tiers (hardware_catalog/gpus/
h100-sxm-80gb.toml: NVLink 450 GB/s per GPU, 2 us; InfiniBand 50 GB/s per GPU, 5 us), the
comms module's bus efficiencies (scale-up 0.80, scale-out 0.92) and NCCL's measured NVLink share
and call costs (nccl_shares: ring share 0.915 among 8 H100 ranks; calls 16.8 us ring, 21.6 us
all-reduce).
"""

from __future__ import annotations

import math

import pytest
from jobs import h100_cluster

from planner.inputs.layout import Layout
from planner.inputs.plan import Plan, parse_plan
from planner.model import comms, cost, dp_instances, dp_sync, stage_sync
from planner.model.stage_time import layout_times

B_IN = 450e9 * 0.80 * 0.915  # NVLink, 8 ranks of one node, NCCL's ring share
B_OUT = 50e9 * 0.92  # InfiniBand per GPU
RING_IN = 7 * 2e-6 + 16.8e-6  # a ring of 8 in a node: 7 steps' latency and NCCL's call


def _rs_node(size: float) -> float:
    """Ring reduce-scatter (or all-gather) of `size` bytes over one node's 8 GPUs."""
    return 7 / 8 * size / B_IN + RING_IN


def _ar_two_nodes(size: float) -> float:
    """All-reduce of `size` bytes over 2 ranks on 2 nodes (one each): both halves of 1/2 S over
    the NIC plus one tree step's latency each, and NCCL's all-reduce call."""
    return 2 * (1 / 2 * size / B_OUT + 5e-6) + 21.6e-6


def _groups(zero: int) -> tuple[Layout, dp_instances.Groups]:
    lay = Layout(tp=1, pp=1, dp=16, zero_stage=zero)
    return lay, dp_instances.instance_groups(h100_cluster(16), lay, 2)


def test_an_instance_is_a_node_and_the_instances_meet_over_infiniband() -> None:
    # dp 16 on two nodes of 8 at N = 2: ranks 0-7 and 8-15 (consecutive slices), the group
    # across them {r, r + 8}: one rank on each node
    _, (dense, expert, inter) = _groups(1)
    assert (dense.size, dense.domains, dense.tier_name) == (8, 1, "nvlink")
    assert (expert.size, expert.domains) == (8, 1)
    assert (inter.size, inter.per_domain, inter.domains, inter.tier_name) == (
        2,
        1,
        2,
        "infiniband",
    )


def test_zero1_by_hand() -> None:
    """8e8 parameters, fp32 gradients, bf16 weights; buckets of max(40M, 1M x 16) = 40M
    parameters (the whole dp group's size, training.py:2189): 20 buckets of 1.6e8 gradient and
    8e7 parameter bytes. Per bucket: a reduce-scatter in the node, the all-reduce of its 2e7-byte
    shard over the two nodes, a gather in the node. Without overlap every second shows, in one
    bucket of 3.2e9 gradient and 1.6e9 parameter bytes (Megatron sets bucket_size None then,
    training.py:2192-2193 at d98e8a64)."""
    lay, groups = _groups(1)
    shut = lay.with_(overlap_grad_reduce=False, overlap_param_gather=False)
    exposed, hidden = dp_instances.distributed_optimizer(groups, shut, 8e8, 0.0, 4.0, 1.0, 1.0, 4)
    whole = _rs_node(3.2e9) + _ar_two_nodes(3.2e9 / 8) + _rs_node(1.6e9)
    assert hidden == 0.0
    assert exposed == pytest.approx(whole)
    one = _rs_node(1.6e8) + _ar_two_nodes(1.6e8 / 8) + _rs_node(8e7)
    # windows longer than the traffic: the last bucket of each shows
    exposed, hidden = dp_instances.distributed_optimizer(groups, lay, 8e8, 0.0, 4.0, 1e3, 1e3, 4)
    assert exposed == pytest.approx(one)
    assert hidden == pytest.approx(19 * one)


def test_megatron_fsdp_zero3_by_hand() -> None:
    """4 units of 1e8 parameters, bf16 gradients and weights, 2 micro-batches. Per unit and
    micro-batch: the gather in the node (2e8 bytes) before its forward and its backward, the
    reduce-scatter in the node; at the last micro-batch also the all-reduce of the unit's
    2.5e7-byte shard over the two nodes. With no window all shows; with long windows the first
    unit's forward gather, its backward gather and reduce-scatter, and in the last micro-batch
    its reduction across the nodes."""
    lay, groups = _groups(3)
    ag = rs = _rs_node(2e8)
    o_red = _ar_two_nodes(2.5e7)
    sizes = (2.0, (2.0, 2.0))
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 0.0, 0.0, 2, 4)
    # the reductions across the nodes run on the NICs beside the next units' NVLink traffic:
    # only the last unit's shows (test_hfsdp_two_streams_by_hand)
    assert shown == pytest.approx(4 * (2 * (2 * ag + rs)) + o_red)
    assert hidden == pytest.approx(0.0, abs=1e-12)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 1e3, 1e3, 2, 4)
    assert shown == pytest.approx(2 * (2 * ag + rs) + o_red)
    # --outer-dp-sharding-strategy optim: the shard is reduce-scattered across the nodes, and
    # gathered across them before the first micro-batch's forward and backward
    o_rs = 1 / 2 * 2.5e7 / B_OUT + 5e-6 + 16.8e-6  # a ring of 2 across nodes, one step
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 1e3, 1e3, 2, 4, optim=True)
    assert shown == pytest.approx(2 * (2 * ag + rs) + o_rs + 2 * o_rs)
    # ZeRO 2: whole weights, one gather a step; the reduce-scatters every micro-batch and the
    # reduction across the nodes at the last: the first unit's shows of each
    lay, groups = _groups(2)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 1e3, 1e3, 2, 4)
    assert shown == pytest.approx(2 * rs + o_red + ag)
    assert shown + hidden == pytest.approx(4 * (2 * rs + o_red + ag))


def test_hfsdp_two_streams_by_hand() -> None:
    """Megatron-FSDP runs a unit's reduce-scatter over the instance on the reduce-scatter stream
    and its reduction across the instances on `outer_fsdp_group_grad_reduce_stream`, which waits
    only for that reduce-scatter (megatron_fsdp.py:406-411, param_and_grad_buffer.py:3849-3851,
    :4037-4045, :4135-4139); under optim the gather across the instances on its own stream, the
    instance's gather waiting for it (:4540-4568). Here the instance is one NVLink node and the
    group across two nodes one rank each: the links are disjoint, so a unit's NICs work runs
    beside the next unit's NVLink work, a flow shop: the first (last) unit's whole chain shows,
    each later one max(NVLink, NICs) less its window (before: their sum).

    4 units of 1e8 parameters, bf16: per unit over the node ag = rs = 7/8 x 2e8 B / 329.4 GB/s
    + 30.8 us = 562.1 us; the all-reduce of the 2.5e7-byte shard over the two nodes 2 x (1.25e7
    / 46 GB/s + 5 us) + 21.6 us = 575.1 us; its ring reduce-scatter or all-gather 1.25e7 / 46
    GB/s + 5 + 16.8 us = 293.5 us."""
    lay, groups = _groups(3)
    ag = rs = _rs_node(2e8)
    o_red = _ar_two_nodes(2.5e7)
    o_rs = 1 / 2 * 2.5e7 / B_OUT + 5e-6 + 16.8e-6
    assert ag == pytest.approx(562.1e-6, abs=0.1e-6)
    assert o_red == pytest.approx(575.1e-6, abs=0.1e-6)
    assert o_rs == pytest.approx(293.5e-6, abs=0.1e-6)
    assert dp_instances.disjoint_links((groups[0], groups[1]), groups[2])
    sizes = (2.0, (2.0, 2.0))
    # ZeRO 3, one micro-batch, a 0.8 ms window per unit in the backward, none in the forward:
    # forward 4 ag; backward (ag + rs) + o_red + 3 x (max(ag + rs, o_red) - 0.8 ms)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 0.0, 3.2e-3, 1, 4)
    back = (ag + rs) + o_red + 3 * (ag + rs - 0.8e-3)
    assert shown == pytest.approx(4 * ag + back)  # before: + 3 x o_red more
    # the rest, 4 (2 ag + rs + o_red) - shown = 4.13 ms, partly beside the other link only:
    # hidden counts at most the 3.2 ms of compute
    assert 4 * (2 * ag + rs + o_red) - shown > 3.2e-3
    assert hidden == pytest.approx(3.2e-3)
    # optim, 2 micro-batches, no windows: the first micro-batch's forward ag + o_rs + 3 ag
    # (the NVLink gather the slower), its backward (ag + rs) + o_rs + 3 (ag + rs); the last's
    # forward 4 ag, its backward (ag + rs) + o_rs + 3 (ag + rs)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 0.0, 0.0, 2, 4, optim=True)
    assert shown == pytest.approx(4 * ag + 4 * (ag + rs) + o_rs + 4 * ag + 4 * (ag + rs) + 2 * o_rs)
    assert hidden == 0.0  # no compute to hide under
    # ZeRO 2, no windows: here the NICs are the slower link (o_red > rs): the last
    # micro-batch's backward rs + o_red + 3 o_red, the first's 4 rs, one forward gather 4 ag
    lay, groups = _groups(2)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 0.0, 0.0, 2, 4)
    assert shown == pytest.approx(4 * rs + (rs + 4 * o_red) + 4 * ag)  # before: 4 rs + 4 o_red
    assert hidden == 0.0


def test_hfsdp_instances_across_nodes_share_the_nics() -> None:
    """dp 32 on four nodes at N = 2: an instance is 16 ranks over two nodes (its ring crosses the
    NICs), the group across the instances {r, r + 16}: both on the NICs, so they share them and
    a unit's two collectives add, as before (no window: every second shows)."""
    lay = Layout(tp=1, pp=1, dp=32, zero_stage=3)
    groups = dp_instances.instance_groups(h100_cluster(32), lay, 2)
    dense, expert, inter = groups
    assert dense.domains == 2 and inter.per_domain == 1
    assert not dp_instances.disjoint_links((dense, expert), inter)
    sizes = (2.0, (2.0, 2.0))
    ag = comms.all_gather(2e8, dense)
    rs = comms.reduce_scatter(2e8, dense)
    o_red = comms.all_reduce(2e8 / 16, inter)
    shown, hidden = dp_instances.fsdp(groups, lay, 4e8, 0.0, sizes, 0.0, 0.0, 2, 4)
    assert shown == pytest.approx(4 * (2 * (2 * ag + rs) + o_red))
    assert hidden == pytest.approx(0.0, abs=1e-12)


def test_one_instance_is_the_old_arithmetic() -> None:
    """At N = 1 the instance is the whole group and nothing crosses: the ZeRO 1 arithmetic is
    `dp_sync.data_parallel`'s to the bit, and stage_sync never takes the instances' path."""
    lay = Layout(tp=1, pp=1, dp=16, zero_stage=1)
    cluster = h100_cluster(16)
    groups = dp_instances.instance_groups(cluster, lay, 1)
    old = dp_sync.data_parallel(
        dp_sync.data_parallel_groups(cluster, lay), lay, 8e8, 0.0, 4.0, 0.05, 0.1, 4
    )
    new = dp_instances.distributed_optimizer(groups, lay, 8e8, 0.0, 4.0, 0.05, 0.1, 4)
    assert new == old
    assert not dp_instances.applies(_job(1).job, lay)


def _job(n: int, zero: int = 1) -> Plan:
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 64},
        "training": {"seq_length": 8192, "global_batch_size": 512, "optimizer_instances": n},
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": zero},
    }
    return parse_plan(doc)


def test_8b_on_64_at_eight_instances_moves_its_traffic_onto_nvlink() -> None:
    """The QA case (8B, 64 H100, Megatron-FSDP ZeRO 3, N = 8): every micro-batch's unit traffic
    runs inside a node, not over InfiniBand: less DP traffic than at N = 1 (before: the same),
    and each rank updates a dp / N = 8th of the parameters, 8 times N = 1's 64th."""
    lay = Layout(tp=1, pp=1, dp=64, micro_batch_size=1, zero_stage=3)
    one, eight = _job(1, 3), _job(8, 3)
    b1 = cost.estimate(one.job, lay).breakdown
    b8 = cost.estimate(eight.job, lay).breakdown
    assert b8.dp_comm_exposed + b8.dp_comm_hidden < 0.7 * (b1.dp_comm_exposed + b1.dp_comm_hidden)
    gpu = layout_times(one.job, lay).gpu
    zero1 = lay.with_(zero_stage=1)
    o1 = stage_sync.optimizer_time(one.job, zero1, 6.4e8, 0.0, gpu)
    o8 = stage_sync.optimizer_time(eight.job, zero1, 6.4e8, 0.0, gpu)
    zeroing = 4.0 * 6.4e8 / gpu.hbm  # fp32 gradients: the whole buffer zeroed either way
    assert (o8 - zeroing) == pytest.approx(8 * (o1 - zeroing))
    assert math.isfinite(o8)
