"""The static buffers per-layer CUDA graphs keep (`planner.model.graph_buffers`). Oracles:
Megatron-LM d98e8a64 megatron/core/transformer/cuda_graphs.py (the local runners' buffers weak
references after capture, :1632-1635, in one pool, :1929, a chunk's input copied, :837-849;
_reuse_graph_input_output_buffers for TE >= 2.7, :2683-2686) and TransformerEngine d0067d0d
transformer_engine/pytorch/graph.py (one static gradient-output set per signature, :803-818;
earlier gradient inputs weak references, :880-906; a graph's static output kept until its
backward capture beside the next layer's static input, :729, :1045-1050; one pool for every
graph, :485, :678), with the bytes by hand: one layer input is [s, b, h] bf16, 2 x T x h."""

from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest

from planner.inputs.arch import ModelArch
from planner.inputs.plan import Plan, parse_plan
from planner.model import memory
from planner.model.graph_buffers import (
    chunk_copies,
    graph_bytes,
    graph_shared_bytes,
    pool_holds_working,
)
from planner.model.layer_kept import per_layer
from planner.model.layout_shard import make_shard
from planner.model.shard import Shard
from planner.model.stage_activations import activation_parts, peak_bytes

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


def test_the_local_runners_keep_no_buffer_per_layer() -> None:
    # cuda_graphs.py:1632-1635 d98e8a64: the static gradients become weak references after the
    # backward capture, the forward buffers too; all in the one global pool (:1929): 0 x 2Th
    sh = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="local")
    assert graph_bytes(_arch(), sh) == 0.0
    assert graph_bytes(_arch(), replace(sh, cuda_graph_impl=None)) == 0.0
    assert graph_shared_bytes(_arch(), sh) == 0.0


def test_the_local_graphs_copy_a_chunk_input_and_hold_its_output() -> None:
    # per chunk and micro-batch: the received input's copy (schedules.py:2366, cuda_graphs.py
    # :837-849) and the output held in the pool (:1151-1180); none into the first rank's first
    # chunk, none out of the loss rank's last one (its final norm saves it anyway)
    sh = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="local")
    li = LAYER_INPUT
    assert chunk_copies(_arch(), sh, [0.0, 0.0], first=True, last=False) == [li, 2 * li]
    assert chunk_copies(_arch(), sh, [5.0, 0.0], first=False, last=True) == [5 + 2 * li, li]
    assert chunk_copies(_arch(), sh, [7.0], first=True, last=True) == [7.0]  # pp 1
    te = replace(sh, cuda_graph_impl="transformer_engine")
    assert chunk_copies(_arch(), te, [0.0, 0.0], first=False, last=False) == [0.0, 0.0]


def test_the_graph_pool_holds_the_working_sets_of_the_layers_it_captures() -> None:
    # one private pool for every graph (cuda_graphs.py:1929; TE graph.py:485, :678)
    whole = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="local")
    assert pool_holds_working(whole)
    te = replace(whole, cuda_graph_impl="transformer_engine")
    assert pool_holds_working(replace(te, cuda_graph_modules=frozenset({"attn", "moe_router"})))
    assert not pool_holds_working(replace(te, cuda_graph_modules=frozenset({"moe_router"})))
    assert not pool_holds_working(replace(whole, cuda_graph_impl="full_iteration"))
    assert not pool_holds_working(replace(whole, cuda_graphs=False))


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


def test_te_router_graphs_of_the_b300_recipe_cost_three_layer_inputs_more_than_local() -> None:
    """Qwen3-30B-A3B, 8 B300, ep 8, pp 1, mbs 8 x 4096 (Bridge qwen3_moe.py:193 @067f987d, its
    TE graphs of moe_router and moe_preprocess, :216-217): pp 1, so one micro-batch in flight
    (cuda_graphs.py:2597-2601 captures one). Local graphs: nothing per layer, nothing per chunk
    at pp 1; TE's: 3 x 2Th once, and their router graphs' outputs per layer; router graphs leave
    the working sets eager, so the activations differ by those times the allocator's
    fragmentation factor memory.FRAGMENTATION (no expandable segments here)."""
    te = _plan("transformer_engine", ["moe_router", "moe_preprocess"])
    local = _plan("local", ["moe_router", "moe_preprocess"])
    a = memory.estimate(te.job, te.require_layout()).worst.activations
    b = memory.estimate(local.job, local.require_layout()).worst.activations
    # and TE's router graphs hold per layer (48) the outputs the eager layer frees: the probs
    # (bf16) and routing map (bools), T x 128 experts each (moe_utils.py:936, :954, :1567), and
    # the alltoall preprocess's permuted tokens and probs, 8 rows a token of h bf16 values and a
    # 2-byte prob (token_dispatcher.py:668-680); local graphs return none of them
    outputs = 48 * (T * 128 * (2 + 1) + 8 * T * (2 * H + 2))
    assert a - b == pytest.approx((3 * LAYER_INPUT + outputs) * memory.FRAGMENTATION, rel=1e-9)


def test_the_loss_cannot_reuse_the_pool_of_graphed_attention() -> None:
    """pp 1, TE graphs of attn and the router against the router's alone (the same static
    buffers: neither captures a whole layer): eager the loss's logits reuse the layer's
    backward working set W, peak stored + max(loss, W); in the graphs' pool they cannot, stored +
    loss + W, which is what the rank holds with the loss zeroed (stored + W) plus the loss."""
    attn = _plan("transformer_engine", ["attn", "moe_router"])
    router = _plan("transformer_engine", ["moe_router"])
    peaks = []
    for plan in (attn, router):
        job, lay = plan.job, plan.require_layout()
        sh = make_shard(job, lay)
        per = per_layer(job.arch, sh)
        chunks = lay.chunk_layers(job.arch.num_layers)[0]
        parts = activation_parts(job, lay, 0, chunks, sh, per)
        no_loss = peak_bytes(job, lay, 0, sh, per, parts._replace(loss=0.0))
        peaks.append((peak_bytes(job, lay, 0, sh, per, parts), no_loss, parts.loss))
    (graphed, graphed_no_loss, loss), (eager, eager_no_loss, _) = peaks
    assert loss > 0
    assert graphed == pytest.approx(graphed_no_loss + loss, rel=1e-12)
    assert graphed_no_loss == pytest.approx(eager_no_loss, rel=1e-12)
    assert eager < graphed


def _arch() -> ModelArch:
    return _plan(None, []).job.arch


STEP_COPY_PLAN = """
[model]
name = "llama2-13b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 8192
global_batch_size = 128
precision = "bf16"
main_grad_dtype = "bf16"
cuda_graphs = true
cuda_graph_impl = "local"
[parallel]
tp = 4
sequence_parallel = true
pp = 1
micro_batch_size = 1
zero_stage = 0
recompute = "none"
"""


def test_the_step_copy_cannot_reuse_the_graphs_pool() -> None:
    # bf16 main grads make the optimizer step copy them to fp32 (optimizer.py:1093-1096
    # d98e8a64), an eager allocation; the per-layer graphs' private mempool (cuda_graphs.py
    # :1929) stays reserved while they live, and PyTorch's caching allocator never serves an
    # eager request from a live graph's pool: the stage holds its activations and the copy
    # together, not the larger of the two as eager layers let it (a review's repro: 65.3 GiB
    # judged to fit, about 78 needed)
    graphed = parse_plan(tomllib.loads(STEP_COPY_PLAN))
    eager = parse_plan(
        tomllib.loads(
            STEP_COPY_PLAN.replace("cuda_graphs = true", "cuda_graphs = false").replace(
                'cuda_graph_impl = "local"\n', ""
            )
        )
    )
    g = memory.estimate(graphed.job, graphed.require_layout()).stages[0]
    e = memory.estimate(eager.job, eager.require_layout()).stages[0]
    assert e.total == pytest.approx(
        e.weights + e.grads + e.optimizer + e.other + max(e.activations, e.grad_copy)
    )
    # the graphed step holds the fp32 copies and the pool's activations, all but the eager
    # loss's share (0.46 of the 15.2 GiB here: the last rank's logits, by a review's split), so the
    # stage peaks at the step, above states + other + activations
    assert g.grad_copy > e.grad_copy + 0.9 * g.activations
    assert g.at_step and g.total > g.weights + g.grads + g.optimizer + g.other + g.activations


def test_graphs_of_attention_hold_its_share_beside_the_step_copy() -> None:
    """The plan above with Megatron's graphs of the attention alone (cuda_graph_modules attn):
    the pool holds what the attention keeps, so the step holds the fp32 copies and that share of
    the pool's activations that whole-layer graphs hold. Hand arithmetic, Llama 2 13B (h 5120, 40
    heads of 128, MHA: (a + 2g) d = 3h, a d = h; SwiGLU F 13824, fused), T = 8192 tokens, tp 4
    with SP, bf16, flash attention: per layer and micro-batch
      attention  norm input 2Th, QKV's input 2Th, residual mask Th; Q, K, V 2T x 3h; its output
                 2Th (the projection's input too); fp32 softmax statistics 4T x 40 heads
                 = (13Th + 160T) / 4
      MLP        norm input 2Th, fc1's input 2Th, mask Th; fc1's output 2T x 2F; fc2's input 2TF
                 = (5Th + 6TF) / 4
    so the attention's share is (13h + 160) / (13h + 160 + 5h + 6F) = 66720 / 175264 of every
    layer's (every layer is alike). Local graphs of the attention keep the activations of
    whole-layer ones (no static buffer per layer, none per chunk at pp 1)."""
    attn = STEP_COPY_PLAN.replace(
        'cuda_graph_impl = "local"', 'cuda_graph_impl = "local"\ncuda_graph_modules = ["attn"]'
    )
    eager = STEP_COPY_PLAN.replace("cuda_graphs = true", "cuda_graphs = false").replace(
        'cuda_graph_impl = "local"\n', ""
    )
    stages = []
    for text in (STEP_COPY_PLAN, attn, eager):
        plan = parse_plan(tomllib.loads(text))
        stages.append(memory.estimate(plan.job, plan.require_layout()).stages[0])
    whole, part, e = stages
    assert part.activations == pytest.approx(whole.activations, rel=1e-12)
    pool = whole.grad_copy - e.grad_copy  # whole layers: the pool's activations, less the loss
    assert pool > 0
    # graphs of the attention alone: the pool holds the attention's bytes of the 40 layers for
    # the one micro-batch in flight (pp 1), no working set counted for it (`graph_pool`)
    T, h = 8192, 5120
    captured = 40 * (13 * T * h + 160 * T) / 4
    frag = memory.fragmentation(parse_plan(tomllib.loads(attn)).job)
    assert part.grad_copy - e.grad_copy == pytest.approx(frag * captured, rel=1e-9)
    assert part.grad_copy - e.grad_copy < pool
