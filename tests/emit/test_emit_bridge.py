"""planner launch --target megatron-bridge: a Megatron-Bridge ConfigContainer override.

Oracle: tests/data/megatron_bridge_config_schema.json, the fields (with annotations) of the
dataclasses each ConfigContainer section holds in Megatron-Bridge and the Megatron-LM commit it
pins, and the mixed-precision presets Bridge registers, all derived from those files with
Python's ast; every emitted field must be one, with a value its annotation takes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from megatron_plans import make_plan
from paths import TESTS

from planner.emit.launch import render
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan

SCHEMA = json.loads((TESTS / "data" / "megatron_bridge_config_schema.json").read_text())
PLANS = sorted((TESTS / "data" / "plans").glob("launch-*.toml"))


def _fits(annotation: str, value: Any) -> bool:
    """Whether a YAML value fits an annotation as written (Optional / Union / Literal / List)."""
    a = annotation.replace(" ", "")
    if value is None:
        return "Optional[" in a or "None" in a
    if isinstance(value, bool):
        return "bool" in a
    if isinstance(value, int):
        return bool(re.search(r"\bint\b|\bfloat\b", a))
    if isinstance(value, float):
        return "float" in a
    if isinstance(value, str):
        literals = re.findall(r"Literal\[([^\]]*)\]", a)
        if literals and not re.search(r"\bstr\b", a):
            return any(repr(value) in lit.replace('"', "'") for lit in literals)
        return bool(re.search(r"\bstr\b", a)) or any(repr(value) in x for x in literals)
    if isinstance(value, list):
        return "List[str]" in a or "list[str]" in a
    return False


def _accepted(doc: dict[str, Any]) -> None:
    """Every field of the override is one of Bridge's, with a value its annotation takes."""
    assert doc["mixed_precision"] in SCHEMA["mixed_precision_presets"]
    for section, fields in doc.items():
        if section == "mixed_precision":
            continue
        known = SCHEMA["sections"][section]
        for name, value in fields.items():
            assert name in known, f"{section}.{name}"
            assert _fits(known[name], value), f"{section}.{name} = {value!r} ({known[name]})"


@pytest.mark.parametrize("plan_path", PLANS, ids=lambda p: p.stem)
def test_bridge_accepts_the_override(plan_path: Path) -> None:
    _accepted(yaml.safe_load(render(load_plan(plan_path), "megatron-bridge")[1]))


def test_muon_is_launched_as_bridges_muon() -> None:
    # Megatron-Bridge training/optim.py picks the layer-wise distributed optimizer by "dist" in
    # optimizer.optimizer; its Muon recipes (Kimi K2, DeepSeek-V4) then leave
    # ddp.use_distributed_optimizer False
    plan = make_plan(
        "llama3.1-8b", 16, {"tp": 2}, optimizer="muon", muon_ns_steps=6, muon_tp_mode="blockwise"
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    _accepted(doc)
    opt = doc["optimizer"]
    assert (opt["optimizer"], opt["muon_num_ns_steps"], opt["muon_tp_mode"]) == (
        "dist_muon",
        6,
        "blockwise",
    )
    assert opt["use_distributed_optimizer"] is False is doc["ddp"]["use_distributed_optimizer"]
    plain = make_plan("llama3.1-8b", 16, {"tp": 2, "zero_stage": 0}, optimizer="muon")
    assert yaml.safe_load(render(plain, "megatron-bridge")[1])["optimizer"]["optimizer"] == "muon"
    adam = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "optimizer" not in adam["optimizer"]
    whole = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer="muon", muon_whole_params=True)
    with pytest.raises(InputError, match=r"training\.muon_whole_params"):
        render(whole, "megatron-bridge")


def test_the_override_carries_the_layout() -> None:
    # oracle: the plan file tests/data/plans/launch-llama3.1-70b.toml (tp 8, pp 4, vpp 5, mbs 1)
    plan = load_plan(TESTS / "data" / "plans" / "launch-llama3.1-70b.toml")
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    lay = plan.require_layout()
    m = doc["model"]
    assert (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"]) == (lay.tp, lay.pp)
    assert m["virtual_pipeline_model_parallel_size"] == lay.vpp
    assert doc["train"]["micro_batch_size"] == lay.micro_batch_size
    assert doc["ddp"]["use_distributed_optimizer"] is (lay.zero_stage >= 1)
    assert doc["comm_overlap"]["tp_comm_overlap"] is lay.tp_comm_overlap


def test_cuda_graphs_are_launched_as_bridges_graphs() -> None:
    # a cuda_graphs plan is timed without the host's per-kernel floor (planner/model/host.py):
    # TransformerConfig.cuda_graph_impl "local", Megatron-Core's per-layer graphs, as the
    # Megatron-LM target's --cuda-graph-impl local; eager plans leave it unset
    graphs = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True)
    doc = yaml.safe_load(render(graphs, "megatron-bridge")[1])
    _accepted(doc)
    assert doc["model"]["cuda_graph_impl"] == "local"
    assert "cuda_graph_modules" not in doc["model"]  # the whole layer: Megatron-Core's default
    part = make_plan("llama3.1-8b", 16, {"tp": 2}, cuda_graphs=True, cuda_graph_modules=["attn"])
    part_doc = yaml.safe_load(render(part, "megatron-bridge")[1])
    _accepted(part_doc)
    assert part_doc["model"]["cuda_graph_modules"] == ["attn"]
    eager = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "cuda_graph_impl" not in eager["model"]
    offloading = make_plan(
        "llama3.1-8b", 16, {"tp": 2, "cpu_offloading_num_layers": 2}, cuda_graphs=True
    )
    with pytest.raises(InputError, match=r"training\.cuda_graphs"):
        render(offloading, "megatron-bridge")


def test_settings_without_a_megatron_switch_are_noted() -> None:
    # training.fused_norm = false (an unfused norm, timed so) has no Megatron-Core switch: the
    # override says so, as the Megatron-LM target does (planner.emit.megatron.unflagged)
    text = render(make_plan("llama3.1-8b", 16, {"tp": 2}, fused_norm=False), "megatron-bridge")[1]
    assert "# note: training.fused_norm = false has no Megatron flag" in text
    plain = render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]
    assert "fused_norm" not in plain


def test_nvfp4_uses_bridges_nvfp4_preset_and_notes_what_differs() -> None:
    # Bridge's bf16_with_nvfp4_mixed (mixed_precision.py @067f987d) gathers NVFP4 parameters and
    # keeps no layer in bf16: a plan that differs says how to set the preset's fields
    def doc(**training: object) -> tuple[dict[str, Any], str]:
        plan = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", **training)
        text = render(plan, "megatron-bridge")[1]
        return yaml.safe_load(text), text

    same, text = doc(precision="fp4")
    _accepted(same)
    assert same["mixed_precision"] == "bf16_with_nvfp4_mixed" and "fp4_param_gather" not in text
    _, text = doc(precision="fp4", fp4_param_gather=False, bf16_layers_at_end=4)
    assert "mixed_precision.fp4_param_gather=false" in text
    assert "num_layers_at_end_in_bf16=4" in text
    # FP8 attention: Bridge's MixedPrecisionConfig.fp8_dot_product_attention (off in the preset)
    assert "fp8_dot_product_attention" not in text
    _, text = doc(precision="fp4", fp8_attention=True)
    assert "mixed_precision.fp8_dot_product_attention=true" in text
    # the MXFP8 LM head: TransformerConfig.fp8_output_proj, which Bridge's recipes set on the model
    mx, _ = doc(precision="fp8", fp8_recipe="mxfp8", fp8_output_proj=True)
    _accepted(mx)
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
    _accepted(doc)
    assert doc["model"]["use_transformer_engine_op_fuser"] is True
    assert doc["model"]["moe_mlp_glu_interleave_size"] == 32
    plain = make_plan("mixtral-8x7b", 64, {"tp": 1, "ep": 8, "etp": 1}, "b200-sxm-180gb")
    assert (
        "use_transformer_engine_op_fuser"
        not in yaml.safe_load(render(plain, "megatron-bridge")[1])["model"]
    )


def test_the_context_exchange_is_bridges_model_field() -> None:
    """TransformerConfig.cp_comm_type, as Bridge's GPT-OSS recipes set it ("a2a")."""
    plan = make_plan("gpt-oss-20b", 8, {"cp": 2, "ep": 4, "cp_comm_type": "a2a"})
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    _accepted(doc)
    assert doc["model"]["cp_comm_type"] == "a2a"
    ring = yaml.safe_load(render(make_plan("llama3.1-8b", 8, {"cp": 2}), "megatron-bridge")[1])
    assert "cp_comm_type" not in ring["model"]


def test_hfsdp_is_bridges_ddp_field() -> None:
    """--outer-dp-sharding-strategy optim as DistributedDataParallelConfig's field, beside the
    instances it needs; a plain HSDP plan (no_shard) sets neither outer field."""
    par = {"zero_stage": 3}
    plan = make_plan(
        "llama3.1-8b", 16, par, optimizer_instances=2, outer_dp_sharding_strategy="optim"
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    _accepted(doc)
    assert doc["ddp"]["num_distributed_optimizer_instances"] == 2
    assert doc["ddp"]["outer_dp_sharding_strategy"] == "optim"
    plain = make_plan("llama3.1-8b", 16, par, optimizer_instances=2)
    assert (
        "outer_dp_sharding_strategy"
        not in yaml.safe_load(render(plain, "megatron-bridge")[1])["ddp"]
    )


def test_the_weight_hash_check_is_bridges_train_field() -> None:
    """training.weight_hash_interval -> train.check_weight_hash_across_dp_replicas_interval
    (Bridge's TrainingConfig field, in the schema); unset, no field."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, weight_hash_interval=100)
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    _accepted(doc)
    assert doc["train"]["check_weight_hash_across_dp_replicas_interval"] == 100
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "check_weight_hash_across_dp_replicas_interval" not in plain["train"]


def test_deterministic_mode_is_refused_for_bridge_naming_the_field() -> None:
    """Megatron-LM applies the mode in its argument validation (determinism.py), which a Bridge
    override does not run: the launch exits 2 naming training.deterministic."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, deterministic=True, loss_fusion=False)
    with pytest.raises(InputError, match=r"training\.deterministic"):
        render(plan, "megatron-bridge")


def test_alibi_is_refused_for_bridge_naming_the_field() -> None:
    """BLOOM's ALiBi is no position embedding Megatron-Core builds (language_model_embedding.py
    d98e8a64: learned_absolute, rope or none), so no Bridge recipe trains it: the launch exits 2
    naming model.position_embedding_type, as megatron-args does; a rope model is written."""
    bloom = make_plan("bloom-176b", 64, {"tp": 8}, seq_length=2048)
    for target in ("megatron-bridge", "megatron-args"):
        with pytest.raises(InputError, match=r"model\.position_embedding_type: .*ALiBi"):
            render(bloom, target)
    _accepted(yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]))


def test_deepep_on_grace_blackwell_is_refused_for_bridge() -> None:
    """Megatron-Bridge's config validation (flex_dispatcher_backend.py 067f987d) raises for
    DeepEP unless the GPU is Ampere / Hopper or named B200 / B300: GB200 and GB300 plans with it
    exit 2 naming the field; HybridEP there, and DeepEP on B200, are written."""
    par = {"ep": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep"}
    for gpu in ("gb200-nvl72", "gb300-nvl72"):
        with pytest.raises(InputError, match=r"parallel\.moe_flex_dispatcher_backend"):
            render(make_plan("qwen3-30b-a3b", 16, par, gpu=gpu), "megatron-bridge")
        hybrid = make_plan(
            "qwen3-30b-a3b", 16, {**par, "moe_flex_dispatcher_backend": "hybridep"}, gpu=gpu
        )
        _accepted(yaml.safe_load(render(hybrid, "megatron-bridge")[1]))
    _accepted(
        yaml.safe_load(
            render(make_plan("qwen3-30b-a3b", 16, par, gpu="b200-sxm-180gb"), "megatron-bridge")[1]
        )
    )
