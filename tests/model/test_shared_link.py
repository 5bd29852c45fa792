"""Tests for planner.model.shared_link: a PCIe-only GPU's traffic over its one link.

Oracles: hand arithmetic from the layer times (what one link carries each way: every layer's TP
collectives, the offloaded layers' copies once, the data-parallel traffic), the breakdown's own
arithmetic, and properties any shared-link model has (it only binds where the GPUs have no
NVLink; light traffic under long compute never waits on it; offloading more never helps)."""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import comms, cost, host_link, shared_link, stage_time

# Llama 3.1 70B on 64 L40S, 4k sequences, batch 512: the layout `planner suggest` ranks first
# there (tp 2 x ZeRO-3 dp 32, micro-batch 4, 77 of the 80 layers' activations offloaded)
L40S = job("llama3.1-70b", "l40s-48gb", 64, 4096, 512)
OFFLOADED = Layout(
    tp=2, dp=32, sequence_parallel=True, tp_comm_overlap=True, micro_batch_size=4, zero_stage=3
).with_(cpu_offloading_num_layers=77)


def test_only_gpus_without_nvlink_share_one_link() -> None:
    assert shared_link.applies(L40S.cluster)
    for gpu in ("h100-sxm-80gb", "a100-sxm-80gb", "gb200-nvl72", "mi300x-192gb"):
        assert not shared_link.applies(job("llama3.1-8b", gpu, 64, 4096, 64).cluster)


def test_l40s_step_is_what_its_link_carries_each_way() -> None:
    # Each direction of the x16 link carries per micro-batch the 80 layers' TP collectives
    # (Layer.tp_traffic) and 77 layers' activations once (out in the forward, back in the
    # backward), m = 512 / (32 x 4) = 4 micro-batches a step, and the step's DP traffic
    # (exposed: dp_comm_exposed less the SM share of the hidden part it holds; hidden). Then the
    # optimizer and the fixed per-step costs, with nothing in flight.
    p = cost.estimate(L40S, OFFLOADED)
    b = p.breakdown
    layer = stage_time.layout_times(L40S, OFFLOADED).layers[0]
    # one layer's saved activations over the L40S's PCIe 4.0 x16 host link at 0.8 x 32 GB/s
    assert host_link.host_link_bandwidth(L40S) == pytest.approx(0.8 * 32e9)
    share = comms.sm_share(L40S.cluster)
    dp = b.dp_comm_exposed - share * b.dp_comm_hidden + b.dp_comm_hidden
    busy = 4 * (80 * layer.tp_traffic + 77 * layer.offload) + dp
    assert b.link_shared > 0  # the link, not the compute, sets this step
    assert p.step_time_s == pytest.approx(busy + b.optimizer + b.other)
    assert p.step_time_s == pytest.approx(b.step_time)


def test_the_same_layout_with_nvlink_waits_on_no_shared_link() -> None:
    h100 = job("llama3.1-70b", "h100-sxm-80gb", 64, 4096, 512)
    assert cost.estimate(h100, OFFLOADED).breakdown.link_shared == 0.0


def test_light_traffic_under_long_compute_keeps_the_link_free() -> None:
    # Llama 3.1 8B on 8 L40S, data parallel only, 32 micro-batches a step: the gradients'
    # reduce-scatter and the parameters' all-gather, once a step, are far below the compute
    j = job("llama3.1-8b", "l40s-48gb", 8, 4096, 256)
    b = cost.estimate(j, Layout(dp=8, zero_stage=1)).breakdown
    assert b.dp_comm_hidden + b.dp_comm_exposed < 0.2 * b.compute
    assert b.link_shared == 0.0


def test_offloading_more_layers_never_speeds_a_pcie_gpu() -> None:
    steps = [
        cost.estimate(L40S, OFFLOADED.with_(cpu_offloading_num_layers=k)).step_time_s
        for k in (0, 20, 40, 60, 77)
    ]
    assert steps == sorted(steps)
