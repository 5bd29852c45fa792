"""planner launch --target megatron-bridge: where each feature goes in Bridge's config (CUDA
graphs, NVFP4, the op fuser, the context exchange, HFSDP, the weight hash, determinism).

Oracle: tests/data/megatron_bridge_config_schema.json (see bridge_schema.py) for every emitted
field and value; Megatron-Bridge 067f987d's sources named in each test.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import yaml
from bridge_schema import accepted
from megatron_plans import make_plan

from planner.emit.launch import render
from planner.inputs.errors import InputError


def test_cuda_graphs_are_launched_as_bridges_graphs() -> None:
    # a cuda_graphs plan is timed without the host's per-kernel floor (planner/model/host.py):
    # per-layer graphs, which Megatron-Bridge captures with Transformer Engine's implementation
    # (its utils/cuda_graph.py validate_cuda_graph_configuration at 067f987d raises on "local"
    # outside full-iteration graphs, the Megatron-LM target's --cuda-graph-impl local, which
    # this override wrote); eager plans switch a recipe's graphs off
    graphs = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True)
    doc = yaml.safe_load(render(graphs, "megatron-bridge")[1])
    accepted(doc)
    assert doc["model"]["cuda_graph_impl"] == "transformer_engine"
    # the whole layer ("full", Megatron-Core's default), set over a recipe's own; the recipe's
    # deprecated cuda_graph_scope cleared (refused beside modules), Transformer Engine's RNG
    # tracker on (GPTModelProvider.provide asserts it under graphs)
    assert doc["model"]["cuda_graph_modules"] == "full" and doc["model"]["cuda_graph_scope"] is None
    assert doc["model"]["use_te_rng_tracker"] is True
    part = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True, cuda_graph_modules=["attn"])
    part_doc = yaml.safe_load(render(part, "megatron-bridge")[1])
    accepted(part_doc)
    assert part_doc["model"]["cuda_graph_modules"] == ["attn"]
    eager = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert eager["model"]["cuda_graph_impl"] == "none"  # a recipe's own graphs off, as timed
    offloading = make_plan(
        "llama3.1-8b", 16, {"tp": 2, "cpu_offloading_num_layers": 2}, cuda_graphs=True
    )
    with pytest.raises(InputError, match=r"training\.cuda_graphs"):
        render(offloading, "megatron-bridge")


def test_a_whole_step_graph_is_bridges_full_iteration_graph() -> None:
    """cuda_graph_impl full_iteration, which planner refused for Bridge before, is written as
    Bridge 067f987d's utils/cuda_graph.py set_full_iteration_cuda_graph writes it (impl
    "full_iteration", cuda_graph_modules empty, cuda_graph_scope None; train.py then wraps the
    step in FullCudaGraphWrapper), with rerun_state_machine.check_for_nan_in_loss false
    (training/config.py asserts it) and Transformer Engine's RNG tracker (gpt_provider.py asserts
    it under any graph). With fine-grained offloading, Megatron-Core's TransformerConfig asserts
    fine_grained_offloading_max_inflight_offloads a non-negative integer under the whole-step
    graph (transformer_config.py, 2a75ac12 and d98e8a64 alike): both Megatron targets set it."""
    plan = make_plan(
        "llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True, cuda_graph_impl="full_iteration"
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    m = doc["model"]
    assert (m["cuda_graph_impl"], m["cuda_graph_modules"], m["cuda_graph_scope"]) == (
        "full_iteration",
        [],
        None,
    )
    assert m["use_te_rng_tracker"] is True
    assert doc["rerun_state_machine"] == {"check_for_nan_in_loss": False}
    assert "fine_grained_offloading_max_inflight_offloads" not in m
    per_layer = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True)
    assert "rerun_state_machine" not in yaml.safe_load(render(per_layer, "megatron-bridge")[1])
    par = {"ep": 8, "offload_modules": ["core_attn", "expert_fc1"]}
    off = make_plan(
        "qwen3-30b-a3b",
        64,
        par,
        global_batch_size=512,
        cuda_graphs=True,
        cuda_graph_impl="full_iteration",
    )
    off_doc = yaml.safe_load(render(off, "megatron-bridge")[1])
    accepted(off_doc)
    assert off_doc["model"]["fine_grained_offloading_max_inflight_offloads"] == 1
    words = render(off, "megatron-args")[1].split()
    i = words.index("--fine-grained-offloading-max-inflight-offloads")
    assert words[i + 1] == "1"


def test_nvfp4_uses_bridges_nvfp4_preset_and_notes_what_differs() -> None:
    # Bridge's bf16_with_nvfp4_mixed (mixed_precision.py @067f987d) gathers NVFP4 parameters and
    # keeps no layer in bf16: a plan that differs says which fields to set on the recipe's
    # MixedPrecisionConfig (a Hydra override of a preset named by string fails)
    def doc(**training: object) -> tuple[dict[str, Any], str]:
        plan = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", **training)
        text = render(plan, "megatron-bridge")[1]
        return yaml.safe_load(text), text

    same, text = doc(precision="fp4")
    accepted(same)
    assert same["mixed_precision"] == "bf16_with_nvfp4_mixed" and "fp4_param_gather" not in text
    _, text = doc(precision="fp4", fp4_param_gather=False, bf16_layers_at_end=4)
    assert "set fp4_param_gather=False on the recipe's MixedPrecisionConfig" in text
    assert "num_layers_at_end_in_bf16=4" in text
    # FP8 attention: Bridge's MixedPrecisionConfig.fp8_dot_product_attention (off in the preset)
    assert "fp8_dot_product_attention" not in text
    _, text = doc(precision="fp4", fp8_attention=True)
    assert "set fp8_dot_product_attention=True on the recipe's MixedPrecisionConfig" in text
    # the MXFP8 LM head: TransformerConfig.fp8_output_proj, which Bridge's recipes set on the model
    mx, _ = doc(precision="fp8", fp8_recipe="mxfp8", fp8_output_proj=True)
    accepted(mx)
    assert mx["model"]["fp8_output_proj"] is True


def test_the_fused_grouped_mlp_sets_bridges_op_fuser() -> None:
    # Megatron-Bridge 067f987d scripts/performance/utils/overrides.py: cutedsl_fused_grouped_mlp
    # sets model.use_transformer_engine_op_fuser and model.moe_mlp_glu_interleave_size = 32 (the
    # interleave Transformer Engine's fused GLU kernel requires); both are GPTModelProvider fields
    plan = make_plan(
        "mixtral-8x7b", 64, {"tp": 1, "ep": 8, "etp": 1}, "b200-sxm-180gb", precision="fp8",
        fp8_recipe="mxfp8", moe_fused_grouped_mlp=True,
    )  # fmt: skip
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["model"]["use_transformer_engine_op_fuser"] is True
    assert doc["model"]["moe_mlp_glu_interleave_size"] == 32
    # unfused: Megatron's default written over the recipe's (test_emit_bridge_resets.py)
    plain = make_plan("mixtral-8x7b", 64, {"tp": 1, "ep": 8, "etp": 1}, "b200-sxm-180gb")
    plain_model = yaml.safe_load(render(plain, "megatron-bridge")[1])["model"]
    assert plain_model["use_transformer_engine_op_fuser"] is False
    assert plain_model["moe_mlp_glu_interleave_size"] is None


def test_the_context_exchange_is_bridges_model_field() -> None:
    """TransformerConfig.cp_comm_type, as Bridge's GPT-OSS recipes set it ("a2a")."""
    plan = make_plan("gpt-oss-20b", 8, {"cp": 2, "ep": 4, "cp_comm_type": "a2a"})
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["model"]["cp_comm_type"] == "a2a"
    ring = yaml.safe_load(render(make_plan("llama3.1-8b", 8, {"cp": 2}), "megatron-bridge")[1])
    assert ring["model"]["cp_comm_type"] == "p2p"  # the recipe's own written over


def test_hfsdp_is_bridges_ddp_field() -> None:
    """--outer-dp-sharding-strategy optim as DistributedDataParallelConfig's field, beside the
    instances it needs; a plain HSDP plan writes its default no_shard (over a recipe's optim)."""
    par = {"zero_stage": 3}
    plan = make_plan(
        "llama3.1-8b", 16, par, optimizer_instances=2, outer_dp_sharding_strategy="optim"
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["ddp"]["num_distributed_optimizer_instances"] == 2
    assert doc["ddp"]["outer_dp_sharding_strategy"] == "optim"
    plain = make_plan("llama3.1-8b", 16, par, optimizer_instances=2)
    assert (
        yaml.safe_load(render(plain, "megatron-bridge")[1])["ddp"]["outer_dp_sharding_strategy"]
        == "no_shard"
    )


def test_the_weight_hash_check_is_bridges_train_field() -> None:
    """training.weight_hash_interval -> train.check_weight_hash_across_dp_replicas_interval
    (Bridge's TrainingConfig field, in the schema); unset, no field."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, weight_hash_interval=100)
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["train"]["check_weight_hash_across_dp_replicas_interval"] == 100
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "check_weight_hash_across_dp_replicas_interval" not in plain["train"]


def test_deterministic_mode_is_bridges_determinism_overrides() -> None:
    """Megatron-Bridge 067f987d recipes/utils/determinism_utils.py apply_determinism_overrides:
    model.deterministic_mode true, model.cross_entropy_loss_fusion false, tp_comm_overlap off
    (planner's rules hold it off, as Megatron's determinism.py does), and env_vars
    CUBLAS_WORKSPACE_CONFIG=:4096:8, NCCL_ALGO=Ring (training/config.py asserts it is one of
    Tree/Ring/CollnetDirect/CollnetChain/^NVLS), NVTE_ALLOW_NONDETERMINISTIC_ALGO=0. planner
    refused the mode for Bridge before, though Bridge runs it."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, deterministic=True, loss_fusion=False)
    text = render(plan, "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    accepted(doc)
    assert doc["model"]["deterministic_mode"] is True
    assert doc["model"]["cross_entropy_loss_fusion"] is False
    assert doc["comm_overlap"]["tp_comm_overlap"] is False
    words = [w for ln in text.splitlines() if ln.startswith("# ") for w in shlex.split(ln[2:])]
    env = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if w.startswith("++env_vars.")}
    determinism = {
        "++env_vars.CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "++env_vars.NCCL_ALGO": "Ring",
        "++env_vars.NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0",
    }
    assert determinism.items() <= env.items()  # (beside CUDA_DEVICE_MAX_CONNECTIONS)
    assert {k.removeprefix("++env_vars."): v for k, v in determinism.items()}.items() <= doc[
        "env_vars"
    ].items()  # the --config-file table too
    plain = render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]
    assert "deterministic_mode" not in yaml.safe_load(plain)["model"]
    assert not any(k.removeprefix("++env_vars.") in plain for k in determinism)
