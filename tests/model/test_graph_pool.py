"""What a MoE layer's router graph holds in the graphs' pool (`router_graph.router_graph_bytes`),
what the step's pool holds under graphs of some modules (`graph_pool.step_pool_bytes`), and the
router graph's outputs the main activation peak holds (`router_graph.router_graph_outputs`).
Oracle: the source lines at Megatron-LM d98e8a64 / TransformerEngine d0067d0d named in each
test, and hand arithmetic written out."""

from __future__ import annotations

import tomllib

import pytest

from planner.inputs.plan import Plan, parse_plan
from planner.model import memory, memory_report
from planner.model.layout_shard import make_shard
from planner.model.router_graph import router_graph_bytes

# A small MoE with shared experts, given inline: h 1024, 8 heads of 128 (MHA), 16 experts of
# 512, top-2, shared experts of 1024, SwiGLU (fused: no silu output kept), no dropout; one GPU's
# tokens T = 4096 (mbs 1 x seq 4096, tp 1), bf16 (2 bytes a value, the router's logits too: no
# --moe-router-dtype)
H, E, K, FS, T = 1024, 16, 2, 1024, 4096
PLAN = """
[model]
num_layers = 4
hidden_size = 1024
ffn_hidden_size = 2048
num_attention_heads = 8
num_query_groups = 8
kv_channels = 128
vocab_size = 32000
max_position_embeddings = 4096
gated_linear_unit = true
activation = "swiglu"
normalization = "RMSNorm"
add_bias_linear = false
position_embedding_type = "rope"
untie_embeddings_and_output_weights = true
num_moe_experts = 16
moe_router_topk = 2
moe_ffn_hidden_size = 512
moe_shared_expert_intermediate_size = 1024
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 4096
global_batch_size = 64
precision = "bf16"
main_grad_dtype = "bf16"
attention_dropout = false
hidden_dropout = false
cuda_graphs = true
cuda_graph_impl = "transformer_engine"
cuda_graph_modules = MODULES
[parallel]
tp = 1
pp = 1
ep = 8
micro_batch_size = 1
zero_stage = 0
recompute = "none"
moe_token_dispatcher_type = "DISPATCHER"
"""

# what every router graph holds here (bytes per micro-batch):
ROUTER = 2 * 4 * T * E  # the router's fp32 logits and scores (`router_bytes`)
NORM_OUT = 2 * T * H  # the pre-MLP norm's output: the router's saved input, a graph output
# the shared experts run inside Transformer Engine's router graph where not overlapped
# (transformer_layer.py:1256-1260, moe_layer.py:661): fc1's output 2 x 2T x Fs (gated, the
# fused SwiGLU's input) and fc2's input 2T x Fs; their input is the norm output, counted
SHARED = 2 * T * 2 * FS + 2 * T * FS
SHARED_OUT = 2 * T * H  # their output, a graph output (moe_utils.py:1595-1597)
# the router's probs (T x E in the logits' dtype, 2 bytes: moe_utils.py:936, :954) and its
# routing map (T x E bools): outputs of the route (moe_utils.py:1567), and cudagraph_attrs of the
# alltoall dispatcher's preprocess (token_dispatcher.py:476-486, :642-643)
PROBS_MAP = T * E * (2 + 1)


def _plan(modules: list[str], dispatcher: str = "alltoall", extra: str = "") -> Plan:
    text = PLAN.replace("MODULES", str(modules).replace("'", '"'))
    text = text.replace("DISPATCHER", dispatcher) + extra
    return parse_plan(tomllib.loads(text))


def _router_graph(plan: Plan) -> float:
    layout = plan.require_layout()
    return router_graph_bytes(plan.job, layout, make_shard(plan.job, layout))


def test_the_route_graph_holds_the_norm_output_and_the_shared_experts() -> None:
    # cuda_graph_modules attn, moe_router: one graph of the attention, the pre-MLP norm, the
    # router and the shared experts (transformer_layer.py:1263-1318), whose outputs are the norm
    # output, the probs, the routing map and the shared experts' output (moe_utils.py:1565-1567,
    # :1595-1597) with the residual, the attention's output, which the norm input stands for
    got = _router_graph(_plan(["attn", "moe_router"]))
    assert got == ROUTER + NORM_OUT + SHARED + SHARED_OUT + PROBS_MAP


def test_the_alltoall_preprocess_graph_holds_the_permuted_tokens() -> None:
    # with moe_preprocess, alltoall's dispatch_preprocess returns the permuted local tokens and
    # probs (token_dispatcher.py:668-680): k rows a token (no capacity, no padding), h bf16 values
    # and one 2-byte prob each, held as graph outputs up to the layer's backward graph
    got = _router_graph(_plan(["attn", "moe_router", "moe_preprocess"]))
    permuted = K * T * (2 * H + 2)
    assert got == ROUTER + NORM_OUT + SHARED + SHARED_OUT + PROBS_MAP + permuted


def test_overlapped_shared_experts_run_outside_the_graph() -> None:
    # --moe-shared-expert-overlap: the shared experts are not among the graph's submodules
    # (transformer_layer.py:1256-1258) nor run by shared_experts_compute (moe_layer.py:515): no
    # shared bytes, no shared output; at tp 1 their gathered input is the norm output itself
    # (shared_experts.py:250-253), counted once
    plan = _plan(["attn", "moe_router"], extra="moe_shared_expert_overlap = true\n")
    assert _router_graph(plan) == ROUTER + NORM_OUT + PROBS_MAP


# The attention block, MHA h 1024 of 8 heads, flash, no dropout (`activations` docstring): norm
# input 2Th, QKV's input 2Th, Q, K, V 2T x 3h, its output 2Th, fp32 softmax statistics 4T x 8
ATTN_KEPT = 12 * T * H + 32 * T
LAYERS = 4  # every layer an attention and a MoE block; pp 1: the one rank holds them all


def _stages(*modules: list[str], extra: str = "") -> list[memory_report.StageMemory]:
    plans = [_plan(m, extra=extra) for m in modules]
    return [memory.estimate(p.job, p.require_layout()).stages[0] for p in plans]


def _eager(extra: str = "") -> memory_report.StageMemory:
    text = PLAN.replace("cuda_graphs = true", "cuda_graphs = false")
    text = text.replace('cuda_graph_impl = "transformer_engine"\n', "")
    text = text.replace("cuda_graph_modules = MODULES\n", "").replace("DISPATCHER", "alltoall")
    plan = parse_plan(tomllib.loads(text + extra))
    return memory.estimate(plan.job, plan.require_layout()).stages[0]


def _frag() -> float:
    return memory.fragmentation(_plan(["attn"]).job)


def test_the_step_holds_the_captured_bytes_of_the_micro_batches_in_flight() -> None:
    # graphs of some modules: the pool holds what they capture per micro-batch, summed over the
    # rank's layers, times the micro-batches in flight (pp 1, 1F1B: one), plus the captured
    # regions' largest working set (attention and router: none counted); the step holds it beside
    # the eager copies, which the eager plan holds alone (TE graph.py:719-729, :880-886)
    route, attn = _stages(["attn", "moe_router"], ["attn"])
    e = _eager()
    router = ROUTER + NORM_OUT + SHARED + SHARED_OUT + PROBS_MAP
    assert route.grad_copy - e.grad_copy == pytest.approx(
        _frag() * LAYERS * (ATTN_KEPT + router), rel=1e-9
    )
    assert attn.grad_copy - e.grad_copy == pytest.approx(_frag() * LAYERS * ATTN_KEPT, rel=1e-9)


def test_a_router_graph_alone_keeps_its_pool_at_the_step() -> None:
    # moe_router alone: no mixer captured, but the router graphs' pool stays reserved all the
    # same (graph.py:485, :678: one mempool for every callable), holding each layer's router
    # graph bytes for the one micro-batch in flight
    (route,) = _stages(["moe_router"])
    router = ROUTER + NORM_OUT + SHARED + SHARED_OUT + PROBS_MAP
    assert route.grad_copy - _eager().grad_copy == pytest.approx(
        _frag() * LAYERS * router, rel=1e-9
    )


def test_the_main_peak_holds_the_router_graphs_outputs() -> None:
    # against graphs of the attention alone (the same shared buffers, the same pool beside the
    # loss), a router graph adds per layer and micro-batch in flight the outputs the eager layer
    # frees: the shared experts' output and the probs and routing map (moe_utils.py:1565-1567,
    # :1595-1597); with the alltoall preprocess the permuted tokens and probs too
    # (token_dispatcher.py:668-680: k rows a token of h bf16 values and a 2-byte prob)
    route, pre, attn = _stages(
        ["attn", "moe_router"], ["attn", "moe_router", "moe_preprocess"], ["attn"]
    )
    outputs = SHARED_OUT + PROBS_MAP
    assert route.activations - attn.activations == pytest.approx(
        _frag() * LAYERS * outputs, rel=1e-9
    )
    permuted = K * T * (2 * H + 2)
    assert pre.activations - attn.activations == pytest.approx(
        _frag() * LAYERS * (outputs + permuted), rel=1e-9
    )
