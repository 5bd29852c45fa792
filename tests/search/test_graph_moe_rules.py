"""What Megatron's CUDA graphs refuse of a MoE job's captured router and preprocess
(`planner.search.rules.graphs`: `captured`, `preprocess_conflict`, the moe-recompute case of
`rung_conflict`). Oracles: Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py
TransformerConfig.__post_init__, quoted line by line below."""

from __future__ import annotations

from dataclasses import replace

from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_types import CudaGraphImpl, CudaGraphModule
from planner.search.rules.graphs import captured, conflict, preprocess_conflict, rung_conflict
from planner.search.rungs import rungs

LAY = Layout(tp=1, pp=2, dp=8, ep=8)
"""c_cap of the QA (/tmp/qa4s36): qwen3-30b-a3b on 16 H100s, alltoall (the default)."""


def _graphed(
    impl: CudaGraphImpl | None,
    *mods: CudaGraphModule,
    capacity: float | None = 1.0,
    pad: bool = False,
) -> Job:
    base = job("qwen3-30b-a3b", "h100-sxm-80gb", 16, 4096, 64, cuda_graphs=True)
    return replace(
        base,
        cuda_graph_impl=impl,
        cuda_graph_modules=mods,
        moe_expert_capacity_factor=capacity,
        moe_pad_expert_input_to_capacity=pad,
    )


def test_local_graphs_capture_the_preprocess_with_the_router() -> None:
    # transformer_config.py:2805-2815: the local impl appends moe_preprocess to moe_router (and
    # the reverse); transformer_engine keeps what is named
    assert captured(_graphed("local", "moe_router")) == {"moe_router", "moe_preprocess"}
    assert captured(_graphed(None, "attn", "moe_router")) == {
        "attn",
        "moe_router",
        "moe_preprocess",
    }
    assert captured(_graphed("transformer_engine", "moe_router")) == {"moe_router"}


def test_a_captured_preprocess_with_alltoall_and_an_unpadded_capacity_is_refused() -> None:
    # transformer_config.py:2838-2852: under `capacity is None or not pad`, alltoall with a
    # capacity factor asserts moe_preprocess not captured ("DtoH copies and synchronizations")
    assert preprocess_conflict(_graphed("local", "moe_router"), LAY) is not None
    assert conflict(_graphed(None, "moe_router"), LAY) is not None  # launch writes local
    assert preprocess_conflict(_graphed("transformer_engine", "moe_router", "moe_preprocess"), LAY)
    # what it does not assert: TE's router alone, dropless, padded to capacity, allgather
    assert preprocess_conflict(_graphed("transformer_engine", "moe_router"), LAY) is None
    assert preprocess_conflict(_graphed("local", "moe_router", capacity=None), LAY) is None
    assert preprocess_conflict(_graphed("local", "moe_router", pad=True), LAY) is None
    gathered = replace(LAY, moe_token_dispatcher_type="allgather")
    assert preprocess_conflict(_graphed("local", "moe_router"), gathered) is None


def test_te_router_graphs_refuse_moe_recompute_and_the_search_offers_none() -> None:
    # transformer_config.py:2862-2869: transformer_engine with "moe" recomputed asserts
    # moe_router not in cuda_graph_modules ("moe recompute is not supported with moe_router
    # CUDA graph"); the local impl and TE without the router are not asserted
    te = _graphed("transformer_engine", "attn", "moe_router", capacity=None)
    te = replace(te, hidden_dropout=False)
    assert rung_conflict(te, "selective", ("moe",), 0) is not None
    assert rung_conflict(te, "selective", ("moe_act",), 0) is None
    local = replace(te, cuda_graph_impl="local")
    assert rung_conflict(local, "selective", ("moe",), 0) is None
    te_attn = replace(te, cuda_graph_modules=("attn",))
    assert rung_conflict(te_attn, "selective", ("moe",), 0) is None

    # the search's rungs (planner.search.rungs): none recomputes moe under TE's router graph,
    # where TE without the router is offered one
    def moe_rungs(j: Job) -> list[tuple[str, ...]]:
        single, _ = rungs(j, LAY, ("none", "selective"), False)
        return [r.modules for r in single if "moe" in r.modules]

    assert moe_rungs(te_attn) and not moe_rungs(te)
