"""The host's floor under a layer's time (planner/model/host.py) and the step's host overhead.

Oracle: hand arithmetic on the definitions (a layer's forward issue is the sum of its blocks'
in HOST_LAYER_ISSUE_S, times the host's slowdown; the backward BACKWARD_ISSUE_RATIO times that;
full recompute issues the forward again), and the published runs, whose layers are far above
the floor."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import TINY_LINE, job, read_job

from planner.emit import bridge, megatron
from planner.inputs import megatron_args
from planner.inputs.hybrid import DENSE, MAMBA, MOE
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.model import calibratable, cost, host, host_floor
from planner.model.layer_time import Layer

LAY = Layout(tp=1, pp=1, dp=8)


def test_a_short_layer_takes_what_its_issue_takes() -> None:
    floor = 1e-3
    short = host_floor.issued(Layer(fwd=0.2 * floor, bwd=0.5 * floor, tp=1.0), floor)
    assert (short.fwd, short.bwd, short.tp) == (floor, host.BACKWARD_ISSUE_RATIO * floor, 1.0)
    long = Layer(fwd=5 * floor, bwd=10 * floor)
    assert host_floor.issued(long, floor) is long  # the queue stays full: the host is hidden
    # full recompute issues the forward once more inside the backward
    brief = Layer(fwd=0.1 * floor, bwd=0.2 * floor, recompute=0.1 * floor)
    again = host_floor.issued(brief, floor, True)
    assert again.recompute == floor


def test_the_idle_gpu_hides_the_ring_traffic() -> None:
    # slack (1 - 0.4) + (2 - 0.8) = 1.8 ms: 1.8 of the CP ring's 2.0 ms exposed traffic hides;
    # TP and EP stay as they were
    floor = 1e-3
    layer = Layer(fwd=0.4e-3, bwd=0.8e-3, cp=2.0e-3, ep=0.5e-3, tp=0.6e-3)
    out = host_floor.issued(layer, floor, ring=True)
    assert out.cp == pytest.approx(0.2e-3)
    assert (out.ep, out.tp) == (0.5e-3, 0.6e-3)
    # an all-to-all or all-gather exchange sits between dependent kernels: nothing hides
    assert host_floor.issued(layer, floor).cp == 2.0e-3
    # a GPU-bound layer keeps its traffic exposed
    busy = Layer(fwd=2e-3, bwd=4e-3, cp=1.0e-3)
    assert host_floor.issued(busy, floor, ring=True).cp == 1.0e-3


def test_a_layers_issue_is_the_sum_of_its_blocks() -> None:
    """Dense layer: attention 1/2 + MLP 1/2 = 1. MoE layer: 1/2 + MOE_ISSUE, and MOE_TP_ISSUE
    more at tp 2; cp 4 adds 4 ring steps to the attention; FP8 multiplies a dense layer by
    FP8_ISSUE (its four GEMMs' quantisation)."""
    dense = job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8)
    assert host.issue_units(dense, LAY, DENSE) == pytest.approx(1.0)
    cp4 = Layout(tp=1, pp=1, dp=2, cp=4)
    assert host.issue_units(dense, cp4, DENSE) == pytest.approx(1 + 4 * host.CP_STEP_ISSUE)
    fp8 = replace(dense, precision="fp8")
    assert host.issue_units(fp8, LAY, DENSE) == pytest.approx(host.FP8_ISSUE)
    moe = job("mixtral-8x7b", "h100-sxm-80gb", 8, 2048, 8)
    assert host.issue_units(moe, LAY, MOE) == pytest.approx(0.5 + host.MOE_ISSUE)
    tp2 = Layout(tp=2, pp=1, dp=4, sequence_parallel=True)
    expected = 0.5 + host.MOE_ISSUE + host.MOE_TP_ISSUE
    assert host.issue_units(moe, tp2, MOE) == pytest.approx(expected)
    assert host.issue_units(dense, LAY, MAMBA) == pytest.approx(host.MAMBA_ISSUE)
    mla = job("deepseek-v3", "h800-sxm-80gb", 8, 2048, 8)
    assert host.issue_units(mla, LAY, MOE) == pytest.approx(0.5 + host.MLA_ISSUE + host.MOE_ISSUE)


def test_fp8_adds_its_quantisation_to_the_gemms_only() -> None:
    """Per quantised GEMM a quarter of a dense layer's FP8 extra, q = (FP8_ISSUE - 1) / 4. Hand
    count: Mixtral's MoE layer quantises QKV, the projection and the experts' fc1 and fc2 (4 q),
    not its router or dispatcher; DeepSeek-V3's MLA runs five projections (q down / up, kv down /
    up, output), its shared experts two more, its experts two (9 q). The context-parallel ring
    steps add none."""
    q = (host.FP8_ISSUE - 1) / 4
    moe = job("mixtral-8x7b", "h100-sxm-80gb", 8, 2048, 8)
    fp8 = replace(moe, precision="fp8")
    assert host.issue_units(fp8, LAY, MOE) == pytest.approx(0.5 + host.MOE_ISSUE + 4 * q)
    assert host.issue_units(fp8, LAY, MOE) < host.FP8_ISSUE * host.issue_units(moe, LAY, MOE)
    mla = job("deepseek-v3", "h800-sxm-80gb", 8, 2048, 8)
    mla8 = replace(mla, precision="fp8")
    bf16 = 0.5 + host.MLA_ISSUE + host.MOE_ISSUE
    assert host.issue_units(mla8, LAY, MOE) == pytest.approx(bf16 + 9 * q)
    blocks = dict(host.issue_blocks(mla8, LAY, MOE))
    assert blocks["moe_preprocess"] == pytest.approx(host.MOE_PREPROCESS_SHARE * host.MOE_ISSUE)
    dense = replace(job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8), precision="fp8")
    cp4 = Layout(tp=1, pp=1, dp=2, cp=4)
    assert host.issue_units(dense, cp4, DENSE) == pytest.approx(1 + 4 * q + 4 * host.CP_STEP_ISSUE)


def test_a_slower_host_issues_slower_and_graphs_do_not_care() -> None:
    """Grace's floor is HOST_CPU_SLOWDOWN["grace"] times the reference Xeon's; the step's fixed
    host time too. A replayed CUDA graph is the GPU's own: the same on both."""
    on_xeon = job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8)
    on_grace = job("gpt3-175b", "gb200-nvl72", 8, 2048, 8)
    slow = host.HOST_CPU_SLOWDOWN["grace"]
    assert host.floor_s(on_xeon, LAY, DENSE) == pytest.approx(host.HOST_LAYER_ISSUE_S)
    assert host.floor_s(on_grace, LAY, DENSE) == pytest.approx(slow * host.HOST_LAYER_ISSUE_S)
    assert cost.step_overhead_s(on_grace) == pytest.approx(slow * cost.STEP_OVERHEAD_S)
    graphed = [replace(j, cuda_graphs=True) for j in (on_xeon, on_grace)]
    assert host.floor_s(graphed[0], LAY, DENSE) == host.floor_s(graphed[1], LAY, DENSE)


def test_logged_gradient_statistics_cost_the_step_their_host_time() -> None:
    # GPT-3 175B on one stage: 96 layers of 12 tensors (LayerNorm weight and bias, QKV and
    # projection weights and biases; the same in the MLP), the word and learned position
    # embeddings, the final LayerNorm: 96 x 12 + 2 + 2 = 1,156 tensors, GRAD_STATS_S each
    base = job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8)
    logged = replace(base, log_grad_stats=True)
    lay = Layout(tp=8, pp=1, dp=1, sequence_parallel=True)
    per_step = cost.step_overhead_s(logged, lay) - cost.step_overhead_s(base, lay)
    assert per_step == pytest.approx(1156 * cost.GRAD_STATS_S)
    extra = cost.estimate(logged, lay).step_time_s - cost.estimate(base, lay).step_time_s
    assert extra == pytest.approx(per_step)
    # without a layout (the search's bound) the least any layout pays: none of it
    assert cost.step_overhead_s(logged) == cost.step_overhead_s(base)


def test_small_layers_are_host_bound_and_large_ones_are_not() -> None:
    """Llama 3.1 8B at 8k tokens per micro-batch: ~7 ms per layer forward on an H100, far above
    the floor, so the floor changes nothing; at tp 8 and 1k tokens a layer's forward is ~0.1 ms,
    so each of its 32 layers x 8 micro-batches costs the issue time instead."""
    big = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(tp=1, pp=1, dp=8)
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(big, lay).step_time_s
    assert cost.estimate(big, lay).step_time_s == pytest.approx(free, rel=1e-9)
    small = job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 8)
    lay = Layout(tp=8, pp=1, dp=1, sequence_parallel=True)
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(small, lay).step_time_s
    floored = cost.estimate(small, lay).step_time_s
    # 32 layers x 8 micro-batches x (1 + 2) x HOST_LAYER_ISSUE_S of issue at least
    assert floored >= 32 * 8 * 3 * host.HOST_LAYER_ISSUE_S > free


def test_cuda_graphs_replace_the_host_floor_by_the_graph_nodes() -> None:
    """A graphed dense layer is floored by its HOST_LAYER_ISSUE_S / KERNEL_ISSUE_S kernel nodes
    at GRAPH_KERNEL_S each (NVIDIA's CUDA graphs blog: 3.4 against 2.9 us per short kernel,
    ~0.5 us a node)."""
    graphed = job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 8, cuda_graphs=True)
    nodes = host.HOST_LAYER_ISSUE_S / host.KERNEL_ISSUE_S
    floor = host.floor_s(graphed, LAY, DENSE)
    assert floor == pytest.approx(nodes * host.GRAPH_KERNEL_S)
    short = host_floor.issued(Layer(fwd=1e-4, bwd=2e-4), floor)
    assert (short.fwd, short.bwd) == (1e-4, 2e-4)  # above the graph's floor: unchanged
    tiny = host_floor.issued(Layer(fwd=1e-6, bwd=1e-6), floor)
    assert (tiny.fwd, tiny.bwd) == pytest.approx((floor, 2 * floor))


def test_graphs_lift_the_small_layouts_host_bound_step() -> None:
    """The host-bound case above with CUDA graphs: back to its layers' own time (within the
    graph nodes a layer), faster than the eager floored step."""
    small = job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 8)
    lay = Layout(tp=8, pp=1, dp=1, sequence_parallel=True)
    eager = cost.estimate(small, lay).step_time_s
    graphed_job = replace(small, cuda_graphs=True)
    graphed = cost.estimate(graphed_job, lay).step_time_s
    with calibratable.calibrated({"layer_issue_s": 0.0}):
        free = cost.estimate(small, lay).step_time_s
    assert graphed < eager
    assert graphed == pytest.approx(free, abs=32 * 8 * 3 * host.floor_s(graphed_job, lay, DENSE))


def test_megatron_lines_that_log_gradient_statistics_are_read_so() -> None:
    """--log-params-norm or --log-num-zeros-in-grad set `log_grad_stats`; neither leaves it off."""
    read = [read_job(extra) for extra in ("", " --log-params-norm", " --log-num-zeros-in-grad")]
    assert [j.log_grad_stats for j in read] == [False, True, True]


def test_launch_logs_the_gradient_statistics_the_plan_pays_for() -> None:
    """A plan with `log_grad_stats` (its step pays cost.GRAD_STATS_S per tensor) launches both
    flags; one without launches neither."""
    on = parse_plan(megatron_args.read(TINY_LINE + " --log-params-norm", "h100-sxm-80gb", 8).doc)
    flags = megatron.arguments(on).flat()
    assert {"--log-params-norm", "--log-num-zeros-in-grad"} <= set(flags)
    off = parse_plan(megatron_args.read(TINY_LINE, "h100-sxm-80gb", 8).doc)
    assert "--log-params-norm" not in megatron.arguments(off).flat()
    # Megatron-Bridge: OptimizerConfig.log_num_zeros_in_grad (its schema,
    # tests/data/megatron_bridge_config_schema.json), the logger's parameter norm as a note
    assert bridge.sections(on)["optimizer"]["log_num_zeros_in_grad"] is True
    assert "log_num_zeros_in_grad" not in bridge.sections(off)["optimizer"]


def test_graphed_regions_step_through_nodes_and_the_rest_is_issued() -> None:
    """--cuda-graph-modules: the captured blocks cost GRAPH_KERNEL_S per kernel (their reference
    issue over KERNEL_ISSUE_S), the others their eager issue on the job's host. A MoE layer on
    Grace with attn, moe_router and moe_preprocess captured: attention 1/2 and the router's and
    the preprocessing's shares of MOE_ISSUE graphed; the dispatch, experts and combine eager."""
    eager = job("mixtral-8x7b", "gb200-nvl72", 8, 2048, 8)
    whole = replace(eager, cuda_graphs=True)
    part = replace(whole, cuda_graph_modules=("attn", "moe_router", "moe_preprocess"))
    node = host.HOST_LAYER_ISSUE_S / host.KERNEL_ISSUE_S * host.GRAPH_KERNEL_S
    slow = host.HOST_CPU_SLOWDOWN["grace"] * host.HOST_LAYER_ISSUE_S
    shares = host.MOE_ROUTER_SHARE + host.MOE_PREPROCESS_SHARE
    graphed, rest = 0.5 + shares * host.MOE_ISSUE, (1 - shares) * host.MOE_ISSUE
    assert host.floor_s(part, LAY, MOE) == pytest.approx(graphed * node + rest * slow)
    assert host.floor_s(whole, LAY, MOE) == pytest.approx((0.5 + host.MOE_ISSUE) * node)
    assert host.floor_s(eager, LAY, MOE) == pytest.approx((0.5 + host.MOE_ISSUE) * slow)
    # "moe" captures the MoE block whole, router and preprocessing with it
    moe = replace(whole, cuda_graph_modules=("moe",))
    assert host.floor_s(moe, LAY, MOE) == pytest.approx(host.MOE_ISSUE * node + 0.5 * slow)
    # a dense layer with only its attention captured issues its MLP
    dense = replace(job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8), cuda_graphs=True)
    attn = replace(dense, cuda_graph_modules=("attn",))
    expected = 0.5 * node + 0.5 * host.HOST_LAYER_ISSUE_S
    assert host.floor_s(attn, LAY, DENSE) == pytest.approx(expected)


def test_local_graphs_capture_the_preprocessing_with_the_router() -> None:
    """Megatron-LM d98e8a64 transformer_config.py:2805-2815: the local implementation (and
    None, which `planner launch` writes as local) appends moe_preprocess where moe_router is
    named, so its floor is that of both named; Transformer Engine's captures only the router,
    leaving the preprocessing's share (MOE_PREPROCESS_SHARE of MOE_ISSUE) issued eagerly."""
    whole = replace(job("mixtral-8x7b", "gb200-nvl72", 8, 2048, 8), cuda_graphs=True)
    both = replace(whole, cuda_graph_modules=("attn", "moe_router", "moe_preprocess"))
    for impl in (None, "local"):
        router = replace(both, cuda_graph_impl=impl, cuda_graph_modules=("attn", "moe_router"))
        assert host.floor_s(router, LAY, MOE) == pytest.approx(host.floor_s(both, LAY, MOE))
    te = replace(
        both, cuda_graph_impl="transformer_engine", cuda_graph_modules=("attn", "moe_router")
    )
    node = host.HOST_LAYER_ISSUE_S / host.KERNEL_ISSUE_S * host.GRAPH_KERNEL_S
    slow = host.HOST_CPU_SLOWDOWN["grace"] * host.HOST_LAYER_ISSUE_S
    moved = host.MOE_PREPROCESS_SHARE * host.MOE_ISSUE * (slow - node)
    assert host.floor_s(te, LAY, MOE) == pytest.approx(host.floor_s(both, LAY, MOE) + moved)
