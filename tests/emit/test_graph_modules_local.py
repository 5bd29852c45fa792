"""training.cuda_graph_modules as Megatron-Core completes it: the local CUDA-graph implementation
appends moe_router where moe_preprocess is named (Megatron-LM d98e8a64
transformer_config.py:2806-2816); Transformer Engine's asserts the pair (:2821-2824,
tests/emit/test_megatron_round_trip.py)."""

from __future__ import annotations

import pytest
from megatron_plans import flags, make_plan


@pytest.mark.parametrize("impl", [None, "local"])
def test_local_graphs_add_the_router_to_moe_preprocess(impl: str | None) -> None:
    """The local implementation (None's too: `planner launch` writes local) appends moe_router
    where moe_preprocess is named, and asserts nothing of the pair (transformer_config.py:
    2806-2816 d98e8a64; the assert at :2821-2824 reads the list after the append): the plan is
    taken, the job keeps the router as Megatron does, and the line names both regions."""
    extra = {} if impl is None else {"cuda_graph_impl": impl}
    plan = make_plan(
        "mixtral-8x7b",
        16,
        {"tp": 2, "ep": 8},
        cuda_graphs=True,
        cuda_graph_modules=["attn", "moe_preprocess"],
        **extra,
    )
    assert plan.job.cuda_graph_modules == ("attn", "moe_preprocess", "moe_router")
    assert flags(plan)["--cuda-graph-modules"] == ["attn", "moe_preprocess", "moe_router"]
