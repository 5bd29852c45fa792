"""The static buffers per-layer CUDA graphs keep (`planner.model.graph_buffers`). Oracles:
Megatron-LM d98e8a64 megatron/core/transformer/cuda_graphs.py (the local runners' per-layer
static gradients, :1477-1633; _reuse_graph_input_output_buffers for TE >= 2.7, :2683-2686) and
TransformerEngine d0067d0d transformer_engine/pytorch/graph.py (one static gradient-output set
per signature, :803-818; earlier gradient inputs weak references, :880-906; a graph's static
output kept until its backward capture beside the next layer's static input, :729, :1045-1050),
with the bytes by hand: one layer input is [s, b, h] bf16, 2 x T x h."""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.inputs.arch import ModelArch
from planner.inputs.plan import Plan, parse_plan
from planner.model import memory
from planner.model.graph_buffers import graph_bytes, graph_shared_bytes
from planner.model.layout_shard import make_shard
from planner.model.shard import Shard

T, H = 8 * 4096, 2048  # Qwen3-30B-A3B, mbs 8 x seq 4096 (Megatron-Bridge's Q48 recipe)
LAYER_INPUT = 2 * T * H  # bf16


def _plan(impl: str | None, modules: list[str], sp: bool = False, tp: int = 1) -> Plan:
    training = {
        "seq_length": 4096,
        "global_batch_size": 512,
        "cuda_graphs": True,
        "cuda_graph_modules": modules,
        **({"cuda_graph_impl": impl} if impl else {}),
    }
    parallel = {
        "tp": tp,
        "pp": 1,
        "ep": 8,
        "micro_batch_size": 8,
        "zero_stage": 1,
        "recompute": "none",
        "sequence_parallel": sp,
    }
    doc = {
        "model": {"name": "qwen3-30b-a3b"},
        "cluster": {"gpu": "b300-sxm-270gb", "num_gpus": 8},
        "training": training,
        "parallel": parallel,
    }  # fmt: skip
    return parse_plan(doc)


def test_the_local_runners_keep_two_layer_inputs_per_layer() -> None:
    # cuda_graphs.py:1492-1510 (static_grad_outputs), :1609-1627 (static_grad_inputs): 2 x 2Th
    sh = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="local")
    assert graph_bytes(_arch(), sh) == 2 * LAYER_INPUT
    assert graph_bytes(_arch(), replace(sh, cuda_graph_impl=None)) == 2 * LAYER_INPUT
    assert graph_shared_bytes(_arch(), sh) == 0.0


def test_te_graphs_keep_no_gradient_set_per_layer() -> None:
    # whole layer: its static output beside the next layer's static input, 1 x 2Th per layer;
    # a router graph returns its saved norm output and its input (the residual): 0 per layer;
    # once per rank: the shared gradient-output set (1) and two gradient-input sets (2), 3 x 2Th
    whole = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="transformer_engine")
    router = replace(whole, cuda_graph_modules=frozenset({"moe_router", "moe_preprocess"}))
    both = replace(whole, cuda_graph_modules=frozenset({"attn", "moe"}))
    assert graph_bytes(_arch(), whole) == LAYER_INPUT
    assert graph_bytes(_arch(), both) == LAYER_INPUT
    assert graph_bytes(_arch(), router) == 0.0
    assert graph_shared_bytes(_arch(), router) == 3 * LAYER_INPUT
    sp = replace(whole, tp=2, sequence_parallel=True)  # [s / tp, b, h] under SP
    assert graph_shared_bytes(_arch(), sp) == 3 * LAYER_INPUT / 2
    assert graph_bytes(_arch(), sp) == LAYER_INPUT / 2


def test_the_shard_reads_the_captured_modules() -> None:
    plan = _plan("transformer_engine", ["moe_router", "moe_preprocess"])
    sh = make_shard(plan.job, plan.require_layout())
    assert sh.cuda_graph_modules == {"moe_router", "moe_preprocess"}


def test_te_router_graphs_of_the_b300_recipe_cost_three_layer_inputs_not_two_per_layer() -> None:
    """Qwen3-30B-A3B, 8 B300, ep 8, pp 1, mbs 8 x 4096 (Bridge qwen3_moe.py:193 @067f987d, its
    TE graphs of moe_router and moe_preprocess, :216-217): pp 1, so one micro-batch in flight
    (cuda_graphs.py:2597-2601 captures one). Local graphs: 48 layers x 2 x 2Th = 12 GiB; TE's:
    3 x 2Th = 0.375 GiB; the activations differ by the difference, 11.625 GiB, times the
    allocator's fragmentation factor memory.FRAGMENTATION (no expandable segments here)."""
    te = _plan("transformer_engine", ["moe_router", "moe_preprocess"])
    local = _plan("local", ["moe_router", "moe_preprocess"])
    a = memory.estimate(te.job, te.require_layout()).worst.activations
    b = memory.estimate(local.job, local.require_layout()).worst.activations
    assert 48 * 2 * LAYER_INPUT / 2**30 == 12.0
    saved = (48 * 2 * LAYER_INPUT - 3 * LAYER_INPUT) * memory.FRAGMENTATION
    assert b - a == pytest.approx(saved, rel=1e-9)


def _arch() -> ModelArch:
    return _plan(None, []).job.arch
