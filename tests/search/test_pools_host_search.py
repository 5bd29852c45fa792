"""The pooled search keeps no plan over a pool's host memory (QA: `suggest` on pools never asked
it, and ranked first a plan whose h100 stage offloads 0.75 GiB of optimizer a GPU to a host
share of 0.5 GiB, which `check` of the written plan then refused).

Oracle: `host_memory.estimate` of each plan returned (each stage against its own pool's share),
and hand arithmetic for the refusal: a pool with 260 GiB nodes of 8 GPUs leaves 260 / 8 - 32 =
0.5 GiB a GPU (HOST_RESERVED_GIB_PER_GPU 32), under the 16 B x 6.44e9 / 128 = 0.75 GiB its
stage's offloaded optimizer takes at the layouts that fit the GPUs (tests/model/
test_pools_host_memory.py)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from planner.inputs.plan import parse_plan
from planner.model import host_memory
from planner.search import pool_search

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools-llama3.1-70b-h100-a100.toml"


def _job(small: str) -> Any:
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["training"]["optimizer_offload_fraction"] = 1.0
    for pool in doc["cluster"]["pools"]:
        if pool["name"] == small:
            pool["host_memory_gib_per_node"] = 260
    return parse_plan(doc).job


def test_no_plan_over_a_pools_host_is_returned() -> None:
    res = pool_search.search(_job("h100"), 3.0, top=3)
    assert not res.plans
    assert res.host_over is not None and "'h100'" in res.host_over and "0.50 GiB" in res.host_over


def test_the_plans_returned_fit_every_pools_host() -> None:
    job = _job("a100")  # the a100 stage's share is the smaller (21 of 80 layers): it fits
    res = pool_search.search(job, 3.0, top=3)
    assert res.plans and res.host_over is None
    assert all(host_memory.estimate(p.job, p.layout).fits for p in res.plans)
