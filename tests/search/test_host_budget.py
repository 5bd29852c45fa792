"""The one-kind search's host budget (`variants.Budget`) answers as the exact
`host_memory.activation_budget` does, asking it only where the cheap lower bound (each pinned
block at its ceiling, `host_pinned.rounding_ceiling`) cannot: a brute force over layouts, host
sizes and thresholds, the exact budget the oracle."""

from __future__ import annotations

from dataclasses import replace

from jobs import job

from planner.inputs.layout import Layout
from planner.model import host_memory
from planner.search.variants import Budget

LAYOUTS = [
    Layout(tp=1, pp=1, dp=8, zero_stage=1),
    Layout(tp=2, pp=2, dp=2, zero_stage=1, vpp=2),
    Layout(tp=4, pp=1, dp=2, zero_stage=0),
    Layout(tp=8, pp=1, dp=1, zero_stage=1),
]


def _with_host(gib_per_node: float, offload: float):
    base = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64)
    cluster = base.cluster.model_copy(update={"host_memory_gib_per_node": gib_per_node})
    return replace(base, cluster=cluster, optimizer_offload_fraction=offload)


def test_the_budget_answers_as_the_exact_one() -> None:
    asked_exact = 0
    for lay in LAYOUTS:
        for node in (280.0, 300.0, 330.0, 400.0, 2048.0):
            for offload in (0.0, 0.5, 1.0):
                j = _with_host(node, offload)
                exact = host_memory.activation_budget(j, lay)
                assert host_memory.activation_budget(j, lay, "ceiling") <= exact
                for x in (0.0, 2**30, 8 * 2**30, exact, exact + 1.0, exact - 1.0):
                    b = Budget(j, lay)
                    assert b.below(x) == (exact < x), (lay.describe(), node, offload, x)
                    asked_exact += b.exact is not None
    assert asked_exact > 0  # the thresholds near the budget need the walk
