"""A `memory_gib` override above the catalog GPU's memory is allowed (a variant with more, as
tests/data/plans/torchtitan-style.toml's 95 GiB HBM2e H100) but warned of, field and value
named: QA found `check` saying "fits: peak 242.4 GiB of 291.0 GiB" on an H100 (79.6 GiB in the
catalog, hardware_catalog) given memory_gib = 300, with nothing said.

Oracle: the catalog's own memory for the GPU (`catalog.get_gpu(...).memory_gib`)."""

from __future__ import annotations

from typing import Any

from planner.inputs import catalog
from planner.inputs.plan import parse_plan

H100 = catalog.get_gpu("h100-sxm-80gb").memory_gib  # 79.6 GiB (80 GB)


def _plan(cluster: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"name": "llama3.1-8b"},
        "cluster": cluster,
        "training": {"seq_length": 8192, "global_batch_size": 128},
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 4},
    }


def test_an_override_above_the_catalog_gpu_is_named_with_its_value() -> None:
    plan = parse_plan(_plan({"gpu": "h100-sxm-80gb", "num_gpus": 8, "memory_gib": 300}))
    (note,) = [m for f, m in plan.inert if f == "cluster.memory_gib"]
    assert "memory_gib = 300" in note and f"{H100:.1f} GiB" in note
    assert plan.job.cluster.memory_gib == 300  # allowed: the verdict is for that memory


def test_an_override_at_or_below_the_catalog_gpu_says_nothing() -> None:
    for gib in (40, H100):
        plan = parse_plan(_plan({"gpu": "h100-sxm-80gb", "num_gpus": 8, "memory_gib": gib}))
        assert not [f for f, _ in plan.inert if f.endswith("memory_gib")]


def test_each_pool_is_judged_against_its_own_gpu() -> None:
    b200 = catalog.get_gpu("b200-sxm-180gb").memory_gib
    pools = [
        {"name": "a", "gpu": "h100-sxm-80gb", "num_gpus": 8, "memory_gib": 100},
        {"name": "b", "gpu": "b200-sxm-180gb", "num_gpus": 8, "memory_gib": 100},
    ]
    assert H100 < 100 < b200
    cluster = {"pools": pools, "between_pools": {"bandwidth_gb_per_s_per_gpu": 25}}
    plan = parse_plan(_plan(cluster) | {"parallel": {"tp": 1, "pp": 2, "micro_batch_size": 1}})
    assert [f for f, _ in plan.inert if f.endswith("memory_gib")] == ["cluster.pools[0].memory_gib"]
