"""The data-parallel sync's windows hold the stage's waits on other links
(`stage_sync.other_link_seconds`, `stage_sync.sync_windows`).

Oracles: hand arithmetic (in the comments) and the tiers of the catalog's H100 (NVLink inside
8-GPU nodes, InfiniBand between) and L40S (PCIe, no NVLink)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.model import cost, dp_sync, stage_sync

QA_CASE: dict[str, Any] = {
    "model": {"name": "llama2-7b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
    "training": {"seq_length": 2048, "global_batch_size": 32, "precision": "bf16"},
    "parallel": {
        "cp": 2, "dp": 8, "micro_batch_size": 2, "zero_stage": 1, "recompute": "none",
        "cp_comm_type": "a2a", "offload_modules": ["qkv_linear", "core_attn"],
    },
}  # fmt: skip
"""The QA's case: 16 H100, cp 2 over all-to-alls, dp 8, ZeRO 1, fine-grained offloading."""


def test_the_windows_split_the_waits_as_the_compute_without_recompute() -> None:
    # forward 1, backward 3 of which 1 recompute, 0.6 s of waits: split 1 : 2 (the backward
    # without its recompute), so 0.2 to the forward and 0.4 to the backward
    assert stage_sync.sync_windows(1.0, 3.0, 1.0, 0.6) == pytest.approx((1.2, 3.4))
    assert stage_sync.sync_windows(1.0, 3.0, 1.0, 0.0) == (1.0, 3.0)


def _other(doc: dict[str, Any], exposed: tuple[float, float, float, float]) -> float:
    plan = parse_plan(copy.deepcopy(doc))
    assert plan.layout is not None
    groups = dp_sync.data_parallel_groups(plan.job.cluster, plan.layout)
    return stage_sync.other_link_seconds(plan.job, plan.layout, groups, exposed)


def test_only_links_other_than_the_data_parallel_groups_count() -> None:
    # QA case: CP's pairs are neighbours (tp 1, cp 2: inside a node, NVLink), the dense DP
    # group 16 ranks over two nodes (InfiniBand): CP's 0.2 and the offload's 0.3 both count
    assert _other(QA_CASE, (0.0, 0.2, 0.0, 0.3)) == pytest.approx(0.5)
    # tp 8 x cp 2 on 16 GPUs: CP's pairs are 8 ranks apart, across the two nodes like DP's
    # group (dp 1 x cp 2 = 2 ranks, 8 apart): CP shares the NIC and does not count; TP (8 in a
    # node, NVLink) does
    doc = copy.deepcopy(QA_CASE)
    doc["parallel"].update({"tp": 8, "dp": 1})
    assert _other(doc, (0.1, 0.2, 0.0, 0.3)) == pytest.approx(0.4)
    # all inside one node (8 GPUs, cp 2 x dp 4 over NVLink): CP shares DP's NVLink
    doc = copy.deepcopy(QA_CASE)
    doc["cluster"]["num_gpus"] = 8
    doc["parallel"]["dp"] = 4
    assert _other(doc, (0.0, 0.2, 0.0, 0.3)) == pytest.approx(0.3)
    # L40S: one PCIe link carries every transfer (planner.model.shared_link): nothing counts
    doc = copy.deepcopy(QA_CASE)
    doc["cluster"]["gpu"] = "l40s-48gb"
    assert _other(doc, (0.1, 0.2, 0.0, 0.3)) == 0.0


def test_the_qa_case_is_no_faster_with_its_power_capped() -> None:
    """The QA's repro: 0.5912 s, and 0.5817 s at 490 W (slower clocks) before the fix."""
    capped = copy.deepcopy(QA_CASE)
    capped["cluster"]["power_limit_w"] = 490
    steps = []
    for doc in (QA_CASE, capped):
        plan = parse_plan(copy.deepcopy(doc))
        assert plan.layout is not None
        steps.append(cost.estimate(plan.job, plan.layout).step_time_s)
    assert steps[1] >= steps[0]
