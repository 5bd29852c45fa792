"""A slower GPU never predicts a faster step where two streams once took the same second of
window: hidden traffic on the data-parallel groups' own link (`stage_sync.dp_link_hidden`), the
CP ring hidden in a host-bound layer's slack (`host_floor.issued`) and the host copies' waits on
other links (`stage_offload`).

Oracles: the property itself on the concrete plans a metamorphic QA run found (each predicted a
faster step on the slower GPU before the fix: the figures in the tests' docstrings), the
catalog's tiers (H100: NVLink inside 8-GPU nodes, InfiniBand between; L40S: PCIe alone; MI300X:
a full xGMI mesh of 8, a link per pair) and hand arithmetic in the comments."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from planner.inputs import catalog
from planner.inputs.plan import parse_plan
from planner.model import cost, dp_sync, host_floor, stage_sync
from planner.model.layer_time import Layer
from planner.model.stage_offload import copy_windows


def plan(model: str, gpu: str, n: int, seq: int, gbs: int, par: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": n},
        "training": {"seq_length": seq, "global_batch_size": gbs, "precision": "bf16"},
        "parallel": par,
    }


def step(doc: dict[str, Any]) -> float:
    p = parse_plan(copy.deepcopy(doc))
    assert p.layout is not None
    return cost.estimate(p.job, p.layout).step_time_s


def capped(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan on its GPU capped at 70% of its TDP (slower clocks, nothing faster)."""
    out = copy.deepcopy(doc)
    out["cluster"]["power_limit_w"] = 0.7 * catalog.get_gpu(doc["cluster"]["gpu"]).tdp_w
    return out


def hbm_up(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan on its GPU with 1.5 x its HBM bandwidth (nothing slower)."""
    out = copy.deepcopy(doc)
    hbm = catalog.get_gpu(doc["cluster"]["gpu"]).hbm_bandwidth_tb_per_s
    out["cluster"]["hbm_bandwidth_tb_per_s"] = 1.5 * hbm
    return out


def _hidden(doc: dict[str, Any], hidden: tuple[float, float, float]) -> float:
    p = parse_plan(copy.deepcopy(doc))
    assert p.layout is not None
    groups = dp_sync.data_parallel_groups(p.job.cluster, p.layout)
    return stage_sync.dp_link_hidden(p.job, p.layout, groups, hidden)


H100_16 = plan("llama2-7b", "h100-sxm-80gb", 16, 2048, 32, {"cp": 2, "dp": 8})


def test_only_hidden_traffic_on_the_data_parallel_links_counts() -> None:
    # tp 1, cp 2, dp 8 on two 8-GPU nodes: CP's pairs are neighbours (NVLink), the dense DP
    # group (dp x cp = 16 ranks) spans both nodes (InfiniBand): CP's hidden 0.2 is on another
    # link
    assert _hidden(H100_16, (0.0, 0.2, 0.0)) == 0.0
    # 8 GPUs, cp 2 x dp 4 inside one node: CP's NVLink is DP's: its 0.2 counts
    one = copy.deepcopy(H100_16)
    one["cluster"]["num_gpus"], one["parallel"]["dp"] = 8, 4
    assert _hidden(one, (0.0, 0.2, 0.0)) == pytest.approx(0.2)
    # tp 8 x cp 2: TP inside a node (NVLink), CP's pairs 8 ranks apart across the nodes like
    # DP's group: CP's 0.2 counts, TP's 0.1 not
    wide = copy.deepcopy(H100_16)
    wide["parallel"].update({"tp": 8, "dp": 1})
    assert _hidden(wide, (0.1, 0.2, 0.0)) == pytest.approx(0.2)
    # L40S: one PCIe link carries everything: 0.1 + 0.2
    pcie = copy.deepcopy(H100_16)
    pcie["cluster"]["gpu"] = "l40s-48gb"
    assert _hidden(pcie, (0.1, 0.2, 0.0)) == pytest.approx(0.3)
    # MI300X, a full mesh of 8: tp 2 x cp 2 x dp 2. TP's pair (0, 1) and the dense DP group
    # (cp x dp = 4 ranks, 2 apart: 0, 2, 4, 6) share no peer, so no link: TP's 0.1 does not
    # count (and its exposed seconds are DP's window); CP's pair (0, 2) lies inside the DP group
    mesh = copy.deepcopy(H100_16)
    mesh["cluster"].update({"gpu": "mi300x-192gb", "num_gpus": 8})
    mesh["parallel"].update({"tp": 2, "dp": 2})
    assert _hidden(mesh, (0.1, 0.2, 0.0)) == pytest.approx(0.2)
    p = parse_plan(copy.deepcopy(mesh))
    assert p.layout is not None
    groups = dp_sync.data_parallel_groups(p.job.cluster, p.layout)
    seconds = (0.1, 0.2, 0.0, 0.3)
    assert stage_sync.other_link_seconds(p.job, p.layout, groups, seconds) == pytest.approx(0.4)
    # the windows' extra: the waits on other links (0.4) less the hidden seconds on DP's (0.2)
    extra = stage_sync.link_window_seconds(p.job, p.layout, groups, seconds, seconds[:3])
    assert extra == pytest.approx(0.2)


def test_the_windows_shrink_by_what_their_link_carries_and_stop_at_zero() -> None:
    # forward 1, backward 3 of which 1 recompute: -0.6 s split 1 : 2 -> (0.8, 2.6); -10 s
    # would take 3.33 and 6.67: both at 0
    assert stage_sync.sync_windows(1.0, 3.0, 1.0, -0.6) == pytest.approx((0.8, 2.6))
    assert stage_sync.sync_windows(1.0, 3.0, 1.0, -10.0) == (0.0, 0.0)


def test_the_ring_the_slack_hides_stays_hidden_traffic() -> None:
    # floor 1 ms, forward 0.4, backward 0.8: slack 1.8 ms takes the ring's exposed 0.5 ms,
    # which is then hidden: 0.1 + 0.5 = 0.6 ms (before, the 0.5 ms vanished from the traffic)
    ms = 1e-3
    layer = Layer(fwd=0.4 * ms, bwd=0.8 * ms, cp=0.5 * ms, cp_hidden=0.1 * ms)
    out = host_floor.issued(layer, ms, ring=True)
    assert out.cp == 0.0
    assert out.cp_hidden == pytest.approx(0.6 * ms)
    assert out.cp + out.cp_hidden == pytest.approx(layer.cp + layer.cp_hidden)


def test_host_copies_run_under_the_waits_on_other_links() -> None:
    # forward 1, backward 2, TP 0.6 and CP 0.3 exposed: 0.9 split 1 : 2 -> (1.3, 2.6) on an
    # NVLink GPU; on a PCIe-only one the copies share the link they wait on: (1, 2)
    layer = Layer(fwd=1.0, bwd=2.0, tp=0.6, cp=0.3)
    p = parse_plan(copy.deepcopy(H100_16))
    nv, lay = p.job, p.layout
    assert lay is not None
    assert copy_windows(nv, lay, layer) == pytest.approx((1.3, 2.6))
    pcie = copy.deepcopy(H100_16)
    pcie["cluster"]["gpu"] = "l40s-48gb"
    assert copy_windows(parse_plan(pcie).job, lay, layer) == (1.0, 2.0)
    assert copy_windows(nv, lay, replace(layer, tp=0.0, cp=0.0)) == (1.0, 2.0)


def test_host_copies_run_under_the_recompute_and_the_exposed_all_to_all() -> None:
    # the recompute runs inside the backward (0.5 more: 2.5), and an expert all-to-all none of
    # which the shared experts hide (no EP overlap: all 0.6 exposed, as ep_exposed charges it;
    # stage_sync.other_link_seconds counts it as window for DP): waits 0.9 + 0.6 = 1.5 split
    # 1 : 2.5 -> (1 + 1.5 / 3.5, 2.5 + 1.5 x 2.5 / 3.5)
    p = parse_plan(copy.deepcopy(H100_16))
    assert p.layout is not None and not p.layout.ep_comm_overlap
    layer = Layer(fwd=1.0, bwd=2.0, recompute=0.5, tp=0.6, cp=0.3, ep=0.6)
    want = (1.0 + 1.5 / 3.5, 2.5 + 1.5 * 2.5 / 3.5)
    assert copy_windows(p.job, p.layout, layer) == pytest.approx(want)


TP_ON_DP_LINK = plan(
    "gpt-sc21-7.5b", "mi325x-256gb", 4, 2048, 4,
    {"tp": 2, "dp": 2, "micro_batch_size": 2, "zero_stage": 1, "recompute": "selective"},
)  # fmt: skip
"""TP 2 and DP 2 in one xGMI node, a full mesh: TP's pair (ranks 0, 1) and DP's (0, 2) use
different links, so the GPU's waits on TP are DP's window; read as one link (the same tier),
they were neither window nor shared, and a capped GPU's TP hid more under its longer GEMMs while
DP did too (0.3578 -> 0.3568 s capped before the fix)."""

CP_ON_DP_LINK = plan(
    "gpt-neox-20b", "mi300x-192gb", 2, 4096, 2,
    {"cp": 2, "dp": 1, "micro_batch_size": 1, "zero_stage": 3, "recompute": "selective",
     "cp_comm_type": "p2p"},
)  # fmt: skip
"""The p2p CP ring and ZeRO 3's gathers over the same two GPUs' link (3.9211 -> 3.9202 s capped
before the fix)."""

PCIE_ONLY: dict[str, Any] = {
    "model": {"name": "llama4-17bx128e-titan"},
    "cluster": {"gpu": "l40s-48gb", "num_gpus": 64},
    "training": {
        "seq_length": 8192, "global_batch_size": 16, "precision": "fp8",
        "fp8_recipe": "tensorwise",
    },
    "parallel": {
        "tp": 8, "ep": 2, "dp": 8, "micro_batch_size": 2, "zero_stage": 2, "recompute": "none",
        "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep",
        "tp_comm_overlap": True, "cpu_offloading_num_layers": 1,
    },
}  # fmt: skip
"""A MoE on L40S at ZeRO 2 (Megatron-FSDP's per-layer reduce-scatters): TP, EP and DP on one
PCIe link (7.7002 -> 7.6942 s capped before the fix)."""


@pytest.mark.parametrize("doc", [TP_ON_DP_LINK, CP_ON_DP_LINK, PCIE_ONLY])
def test_traffic_hidden_on_the_dp_link_leaves_a_capped_gpu_no_faster(doc: dict[str, Any]) -> None:
    """A second of compute hides a second of traffic on one link, not one for TP's (or CP's)
    hidden collectives and one more for DP's: the capped GPU's step is no shorter."""
    assert step(capped(doc)) >= step(doc)


RING_IN_SLACK: dict[str, Any] = {
    "model": {"name": "bloom-176b"},
    "cluster": {"gpu": "mi355x-288gb", "num_gpus": 4},
    "training": {"seq_length": 1024, "global_batch_size": 2, "precision": "fp8"},
    "parallel": {
        "cp": 2, "dp": 2, "micro_batch_size": 1, "zero_stage": 3, "recompute": "selective",
        "cp_comm_type": "p2p",
    },
}  # fmt: skip


def test_the_ring_hidden_in_the_recomputes_slack_leaves_full_recompute_no_faster() -> None:
    """Full recompute reruns each host-bound forward, whose slack hides the CP ring; the ring
    shares the four GPUs' xGMI links with ZeRO 3's collectives, which hid under the same
    recompute (6.7001 s selective, 6.6914 s full before the fix)."""
    full = copy.deepcopy(RING_IN_SLACK)
    full["parallel"]["recompute"] = "full"
    assert step(full) >= step(RING_IN_SLACK)


OFFLOAD_UNDER_TP = plan(
    "hagemann-llama-13b", "b200-sxm-180gb", 16, 8192, 64,
    {"tp": 8, "dp": 2, "micro_batch_size": 2, "zero_stage": 1, "recompute": "none",
     "tp_comm_overlap": True, "offload_modules": ["core_attn", "attn_norm"]},
)  # fmt: skip
"""Fine-grained offloading beside NVLink TP: the host copies and the TP collectives both hid
under the same compute growth (4.7377 s; 4.7330 capped, 4.7431 with 1.5 x the HBM bandwidth,
before the fix)."""


def test_host_copies_and_tp_waits_leave_a_slower_gpu_no_faster() -> None:
    """The waits on TP's NVLink are window for the copies on the host link: a second less of
    compute can show a second more of copies, or of TP, not of both."""
    base = step(OFFLOAD_UNDER_TP)
    assert step(capped(OFFLOAD_UNDER_TP)) >= base
    assert step(hbm_up(OFFLOAD_UNDER_TP)) <= base
