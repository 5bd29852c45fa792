"""One MoE layer's forward and backward on 8 H100, measured by Megatron-LM's MoE layer performance
test, against planner's time for the same block.

Data: benchmarks/data/megatron_moe_perf/moe_layer_h100.yaml (Megatron-LM @ d98e8a64,
tests/functional_tests/test_cases/common/moe_perf/, a calibration case by the digest rule; the
file says how the test times the layer). Each case is one block of Megatron's hybrid pattern "E"
(`planner.inputs.hybrid.MOE_MLP`: the router, the token dispatcher, the routed and shared
experts) at tp 1, ep 8, one micro-batch of 4,096 tokens, forced-balance routing, timed by
`planner.model.layer_time.layer_time` on the GPU alone: the test starts its clock after a long
matmul has let the host run ahead, and the host's issue (`planner.model.host`) is below every
case's GPU time. The layer's expert-parallel traffic (`Layer.ep`, a dispatch and a combine each
way) is split evenly between the forward and the backward. Every iteration of the test is a
step: with FP8 the forward also quantises the weights (`Layer.weight_cast`, once per step in a
training run). planner's block also has the pre-MLP norm (the test's layer has none):
2 x 4,096 x h bf16 elements, under 0.05 ms here.

    python benchmarks/moe_layer.py

prints the table and the median and worst |error| of the forward, the backward and their sum,
and the same by dispatcher and by proxy model; then, per case, the rate planner runs the layer's
linear GEMMs at (`planner.model.linear_time`: the experts' grouped GEMM and the shared expert)
and the rate the measurement implies for them if everything else in the layer took what planner
says (FLOPs / (measured - planner's non-GEMM seconds), forward, and backward at twice the
FLOPs): where the model's time goes wrong, GEMMs or the rest.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner.inputs.hybrid import MOE_MLP, layer_kind
from planner.inputs.plan import parse_plan
from planner.model.layer_time import gpu_of, layer_time
from planner.model.linear_time import linear_times
from planner.model.routing_load import step_load

DATA = Path(__file__).parent / "data" / "megatron_moe_perf" / "moe_layer_h100.yaml"

MODEL_KEYS = {
    "hidden_size": "hidden_size",
    "moe_ffn_hidden_size": "moe_ffn_hidden_size",
    "num_experts": "num_moe_experts",
    "router_topk": "moe_router_topk",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "moe_router_num_groups": "moe_router_num_groups",
    "moe_router_group_topk": "moe_router_group_topk",
}
"""The test's proxy-model fields and the plan's `[model]` keys they set."""


def plan_doc(data: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """The plan of one case: a one-layer hybrid stack of a single MoE block ("E")."""
    proxy = data["models"][case["model"]]
    model: dict[str, Any] = {
        MODEL_KEYS[k]: v for k, v in proxy.items() if k in MODEL_KEYS and v is not None
    }
    model.update(
        name=f"moe-perf-{case['model']}",
        num_layers=1,
        hybrid_layer_pattern="E",
        num_attention_heads=8,
        ffn_hidden_size=proxy["moe_ffn_hidden_size"],
        vocab_size=32000,
        max_position_embeddings=proxy["seq_length"],
        # the test's TransformerConfig leaves gated_linear_unit (False) and activation_func
        # (F.gelu) at their defaults: a plain MLP, fc1 hidden -> ffn (data file, `method`)
        gated_linear_unit=False,
        activation="gelu",
        normalization="RMSNorm",
        add_bias_linear=False,
        position_embedding_type="rope",
    )
    flex = case["dispatcher"] != "alltoall"
    parallel: dict[str, Any] = {
        "tp": 1,
        "pp": 1,
        "ep": data["platform"]["num_gpus"],
        "micro_batch_size": proxy["micro_batch_size"],
        "moe_token_dispatcher_type": "flex" if flex else "alltoall",
    }
    if flex:
        parallel["moe_flex_dispatcher_backend"] = case["dispatcher"]
    training: dict[str, Any] = {
        "seq_length": proxy["seq_length"],
        "global_batch_size": data["platform"]["num_gpus"] * proxy["micro_batch_size"],
        "precision": case["precision"],
        "moe_router_force_load_balancing": True,
    }
    if case["precision"] == "fp8":
        training["fp8_recipe"] = "blockwise"
    cluster = {"gpu": data["platform"]["gpu"], "num_gpus": data["platform"]["num_gpus"]}
    return {"model": model, "cluster": cluster, "training": training, "parallel": parallel}


def predicted_ms(data: dict[str, Any], case: dict[str, Any]) -> tuple[float, float]:
    """planner's (forward, backward) milliseconds of the case's MoE block."""
    plan = parse_plan(plan_doc(data, case), DATA)
    job, lay = plan.job, plan.require_layout()
    one = layer_time(job, lay, gpu_of(job), MOE_MLP)
    return 1e3 * (one.fwd + one.weight_cast + one.ep / 2), 1e3 * (one.bwd + one.ep / 2)


def gemm_rates(data: dict[str, Any], case: dict[str, Any]) -> tuple[float, float, float]:
    """(planner's, forward-implied, backward-implied) TFLOP/s of the case's linear GEMMs (module
    docstring); the implied ones are 0 where planner's other seconds already exceed the
    measurement."""
    plan = parse_plan(plan_doc(data, case), DATA)
    job, lay = plan.job, plan.require_layout()
    gpu = gpu_of(job)
    t = float(lay.micro_batch_size * job.seq_length)
    lin = linear_times(job, lay, gpu, layer_kind(MOE_MLP), t, step_load(job, lay))
    flops = sum(2 * m * k * n * c for m, k, n, c in lin.shapes)
    gemm = sum(lin.times)
    fwd, bwd = predicted_ms(data, case)
    rest_f, rest_b = fwd / 1e3 - gemm, bwd / 1e3 - 2 * gemm  # backward: dgrad and wgrad

    def implied(measured_ms: float, rest: float, work: float) -> float:
        left = measured_ms / 1e3 - rest
        return work / left / 1e12 if left > 0 else 0.0

    return (
        flops / gemm / 1e12,
        implied(case["forward_ms"], rest_f, flops),
        implied(case["backward_ms"], rest_b, 2 * flops),
    )


def _summary(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"median |error| {statistics.median(a):5.1%}, worst {max(errs, key=abs):+6.1%}"


def main() -> None:
    data = yaml.safe_load(DATA.read_text())
    print(
        f"{'case':32s} {'fwd ms':>7s} {'pred':>7s} {'error':>7s}   "
        f"{'bwd ms':>7s} {'pred':>7s} {'error':>7s}   {'sum err':>7s}"
    )
    groups = (
        ["all"] + [c["dispatcher"] for c in data["cases"]] + [c["model"] for c in data["cases"]]
    )
    errs: dict[str, list[tuple[float, float, float]]] = {g: [] for g in groups}
    for case in data["cases"]:
        fwd, bwd = case["forward_ms"], case["backward_ms"]
        pf, pb = predicted_ms(data, case)
        e = (pf / fwd - 1, pb / bwd - 1, (pf + pb) / (fwd + bwd) - 1)
        for group in ("all", case["dispatcher"], case["model"]):
            errs[group].append(e)
        print(
            f"{case['name']:32s} {fwd:7.2f} {pf:7.2f} {e[0]:+7.1%}   "
            f"{bwd:7.2f} {pb:7.2f} {e[1]:+7.1%}   {e[2]:+7.1%}"
        )
    print("\nerror = predicted / measured time - 1 (+ predicted slower)")
    for group, es in errs.items():
        print(
            f"  {group:9s} forward {_summary([e[0] for e in es])}; "
            f"backward {_summary([e[1] for e in es])}; sum {_summary([e[2] for e in es])} "
            f"(n={len(es)})"
        )
    print(
        f"\n{'case':32s} {'GEMM TFLOP/s: planner':>22s} {'fwd-implied':>12s} {'bwd-implied':>12s}"
    )
    for case in data["cases"]:
        own, f, b = gemm_rates(data, case)
        print(f"{case['name']:32s} {own:22.0f} {f:12.0f} {b:12.0f}")
    print("implied: the linear GEMMs' FLOPs over the measured time less planner's other seconds")


if __name__ == "__main__":
    main()
