"""planner launch --target megatron-bridge: a Megatron-Bridge ConfigContainer override.

Oracle: tests/data/megatron_bridge_config_schema.json, the fields (with annotations) of the
dataclasses each ConfigContainer section holds in Megatron-Bridge and the Megatron-LM commit it
pins, and the mixed-precision presets Bridge registers, all derived from those files with
Python's ast; every emitted field must be one, with a value its annotation takes.
"""

from __future__ import annotations

import json
import re
import shlex
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


ENUM_NAMES = {"AttnBackend": {"flash", "fused", "unfused", "local", "auto"}}
"""Megatron-Core 2a75ac12 megatron/core/transformer/enums.py AttnBackend's members: the names a
recipe writes into the field (Bridge 067f987d recipes set "auto", "flash", "fused" strings)."""

TORCH_DTYPES = {"torch.float32", "torch.bfloat16", "torch.float16"}
"""Strings Bridge 067f987d reads back as a torch.dtype onto a field holding one
(training/utils/omegaconf_utils.py `_apply_overrides`: utils/activation_map.py str_to_dtype)."""


def _fits(annotation: str, value: Any) -> bool:
    """Whether a YAML value fits an annotation as written (Optional / Union / Literal / List)."""
    a = annotation.replace(" ", "")
    if value is None:
        return "Optional[" in a or "None" in a
    if isinstance(value, bool):
        return "bool" in a
    if isinstance(value, int):
        literals = ",".join(re.findall(r"Literal\[([^\]]*)\]", a)).split(",")
        return bool(re.search(r"\bint\b|\bfloat\b", a)) or str(value) in literals
    if isinstance(value, float):
        return "float" in a
    if isinstance(value, str) and a in ENUM_NAMES:
        return value in ENUM_NAMES[a]
    if isinstance(value, str) and a == "torch.dtype":
        return value in TORCH_DTYPES
    if isinstance(value, str):
        literals = re.findall(r"Literal\[([^\]]*)\]", a)
        if literals and not re.search(r"\bstr\b", a):
            return any(repr(value) in lit.replace('"', "'") for lit in literals)
        return bool(re.search(r"\bstr\b", a)) or any(repr(value) in x for x in literals)
    if isinstance(value, list) and value and all(type(x) is int for x in value):
        # an int list: a List[int] field, or a Tuple[int,int] one of two (OmegaConf's list)
        return "List[int]" in a or ("Tuple[int,int]" in a and len(value) == 2)
    if isinstance(value, list):
        return "List[str]" in a or "list[str]" in a
    return False


def _env_vars_fit(env: Any) -> bool:
    """ConfigContainer.env_vars (Bridge 067f987d training/config.py:965), `dict[str, str | int |
    float | bool]`, each applied with os.environ.setdefault(name, str(value)) (config.py
    apply_environment_variables, which raises on an empty name or a non-scalar value)."""
    return isinstance(env, dict) and all(
        isinstance(k, str) and k and isinstance(v, (str, int, float, bool)) for k, v in env.items()
    )


def accepted(doc: dict[str, Any]) -> None:
    """Every field of the override is one of Bridge's, with a value its annotation takes."""
    assert doc["mixed_precision"] in SCHEMA["mixed_precision_presets"]
    for section, fields in doc.items():
        if section == "mixed_precision":
            continue
        if section == "env_vars":  # a dict field, not a dataclass of the schema
            assert _env_vars_fit(fields), fields
            continue
        known = SCHEMA["sections"][section]
        target = fields.pop("_target_", None)
        if target is not None:  # the class the table builds (a recipe may leave it unset)
            assert section == "comm_overlap" and any(
                f"{target.replace('.', '/')}".rsplit("/", 1)[0] + ".py CommOverlapConfig" in s
                for s in SCHEMA["sources"]
            ), target
        for name, value in fields.items():
            assert name in known, f"{section}.{name}"
            assert _fits(known[name], value), f"{section}.{name} = {value!r} ({known[name]})"


_accepted = accepted  # (the name tests/emit/test_emit_dsa.py imports)


@pytest.mark.parametrize("plan_path", PLANS, ids=lambda p: p.stem)
def test_bridge_accepts_the_override(plan_path: Path) -> None:
    accepted(yaml.safe_load(render(load_plan(plan_path), "megatron-bridge")[1]))


def test_muon_is_launched_as_bridges_muon() -> None:
    # Megatron-Bridge 067f987d training/optim.py:109 picks the layer-wise distributed optimizer by
    # "dist" in optimizer.optimizer; its Kimi K2 recipe then leaves ddp.use_distributed_optimizer
    # False (recipes/kimi/h100/kimi_k2.py:74), and its DDP wrap (models/model_provider.py:698-706)
    # passes no use_layer_wise_distributed_optimizer (default False, Megatron-LM 2a75ac12
    # training/models/dist_utils.py:270): the legacy whole-parameter path, which a plan prices
    # with muon_whole_params = true (Megatron-LM d98e8a64 core/optimizer/__init__.py:827-835)
    plan = make_plan(
        "llama3.1-8b",
        16,
        {"tp": 2},
        optimizer="muon",
        muon_ns_steps=6,
        muon_tp_mode="blockwise",
        muon_whole_params=True,
    )
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
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


def test_bridge_refuses_muon_priced_on_the_layer_wise_layout() -> None:
    # the padded layer-wise layout (planner.model.muon_layout) needs DDP wrapped with
    # use_layer_wise_distributed_optimizer (Megatron-LM 2a75ac12 dist_utils.py:326-336), which
    # Bridge never passes (model_provider.py:698-706): refused, naming the field and both fixes
    layered = make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer="muon")  # dp 8, zero_stage 1
    with pytest.raises(InputError, match=r"training\.muon_whole_params.*--target megatron-args"):
        render(layered, "megatron-bridge")
    # one data-parallel rank: no sharding, the two paths alike (layer_wise_optimizer.py at
    # 2a75ac12 `shard_params` :631-636 returns at dp_cp size 1), so launched as priced
    solo = make_plan("llama3.1-8b", 8, {"tp": 8}, optimizer="muon")
    assert yaml.safe_load(render(solo, "megatron-bridge")[1])["optimizer"]["optimizer"] == (
        "dist_muon"
    )


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


def test_settings_without_a_megatron_switch_are_noted() -> None:
    # training.fused_norm = false (an unfused norm, timed so) has no Megatron-Core switch: the
    # override says so, as the Megatron-LM target does (planner.emit.megatron.unflagged)
    text = render(make_plan("llama3.1-8b", 16, {"tp": 2}, fused_norm=False), "megatron-bridge")[1]
    assert "# note: training.fused_norm = false has no Megatron flag" in text
    plain = render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]
    assert "fused_norm" not in plain


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


def test_alibi_is_refused_for_bridge_naming_the_field() -> None:
    """BLOOM's ALiBi is no position embedding Megatron-Core builds (language_model_embedding.py
    d98e8a64: learned_absolute, rope or none), so no Bridge recipe trains it: the launch exits 2
    naming model.position_embedding_type, as megatron-args does; a rope model is written."""
    bloom = make_plan("bloom-176b", 64, {"tp": 8}, seq_length=2048)
    for target in ("megatron-bridge", "megatron-args"):
        with pytest.raises(InputError, match=r"model\.position_embedding_type: .*ALiBi"):
            render(bloom, target)
    accepted(yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]))


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
        accepted(yaml.safe_load(render(hybrid, "megatron-bridge")[1]))
    accepted(
        yaml.safe_load(
            render(make_plan("qwen3-30b-a3b", 16, par, gpu="b200-sxm-180gb"), "megatron-bridge")[1]
        )
    )


# --- what Megatron-Bridge's own setup does with the override (NVIDIA-NeMo/Megatron-Bridge
# 067f987d, read from its source: comm_overlap.py `setup`, ConfigContainer.validate, the
# mixed-precision presets of mixed_precision.py)


def test_overlaps_go_where_bridges_setup_reads_them() -> None:
    """Bridge's comm-overlap setup writes its table's EP overlap and wgrad delay over the model's
    (off unless the table sets them: the model's own were dropped, and the step the plan times
    with the overlap ran without it), and with the distributed optimizer its DP overlap over
    DDP's. The fields go onto the recipe's own CommOverlapConfig one by one (dotted Hydra keys,
    a table without `_target_`): Bridge 067f987d applies overrides to a struct OmegaConf config
    that has no `_target_` key (utils/omegaconf_utils.py parse_hydra_overrides), so the whole
    dict with one used to fail on every recipe that sets comm_overlap; the dict form, for a
    recipe that leaves it unset, is a note."""
    par = {"tp": 1, "pp": 4, "vpp": 2, "ep": 8, "ep_comm_overlap": True}
    plan = make_plan("qwen3-30b-a3b", 64, par, global_batch_size=512)
    text = render(plan, "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    accepted(yaml.safe_load(text))
    over = doc["comm_overlap"]
    assert "_target_" not in over
    assert over["overlap_moe_expert_parallel_comm"] is True and over["delay_wgrad_compute"]
    assert "overlap_moe_expert_parallel_comm" not in doc["model"]
    assert over["overlap_grad_reduce"] is plan.require_layout().overlap_grad_reduce
    words = [shlex.split(ln[2:]) for ln in text.splitlines() if ln.startswith("# ")]
    hydra = [w[0] for w in words if len(w) == 1 and w[0].startswith("comm_overlap")]
    assert "comm_overlap.overlap_moe_expert_parallel_comm=true" in hydra
    assert all(h.startswith("comm_overlap.") for h in hydra) and len(hydra) == len(over)
    note = next(ln for ln in text.splitlines() if "leaves comm_overlap unset" in ln)
    target = '"megatron.bridge.training.comm_overlap.CommOverlapConfig"'
    assert f"comm_overlap={{_target_:{target}," in note


def test_hydra_overrides_paste_into_a_shell_as_one_word_each() -> None:
    """The header's Hydra overrides are shell-quoted: a list's spaces split it into words
    run_script.py's Hydra refuses (`model.recompute_modules=["core_attn", "mlp"]`), so each
    line reads back through shlex as one word, the override itself."""
    par = {"tp": 2, "pp": 1, "recompute": "selective", "recompute_modules": ["core_attn", "mlp"]}
    text = render(make_plan("llama3.1-8b", 16, par), "megatron-bridge")[1]
    line = next(ln for ln in text.splitlines() if "recompute_modules=" in ln)
    assert shlex.split(line[2:]) == ['model.recompute_modules=["core_attn", "mlp"]']


def test_a_layout_keeps_its_virtual_stages_and_the_dataset_its_length() -> None:
    """With a layout the override wrote vpp null: Bridge's EP-overlap setup asserts vpp set
    with pp > 1 before Megatron-Core derives it (comm_overlap.py), and null cleared a
    recipe's own; Megatron-Core takes an explicit vpp that matches the layout. The dataset's
    sequence length must equal the model's (ConfigContainer.validate asserts it): both set."""
    plan = load_plan(TESTS / "data" / "plans" / "launch-deepseek-v3.toml")  # pp 16 x vpp 2
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    assert doc["model"]["pipeline_model_parallel_layout"] is not None
    assert doc["model"]["virtual_pipeline_model_parallel_size"] == 2
    assert doc["dataset"]["seq_length"] == doc["model"]["seq_length"] == 4096


def test_fsdp_checkpoints_and_bucket_counts() -> None:
    """Megatron-FSDP saves and loads only fsdp_dtensor (ConfigContainer.validate); Bridge gives
    DDP 128 MB buckets wherever dp > 1 with the distributed optimizer, which Megatron-Core
    refuses beside a bucket count: such a plan exits 2 naming the field, a bucket size goes into
    the comm_overlap table, where setup reads it."""
    fsdp = make_plan("llama3.1-8b", 16, {"zero_stage": 3})
    assert yaml.safe_load(render(fsdp, "megatron-bridge")[1])["checkpoint"] == {
        "ckpt_format": "fsdp_dtensor"
    }
    with pytest.raises(InputError, match=r"parallel\.ddp_num_buckets: Megatron-Bridge"):
        render(make_plan("llama3.1-8b", 16, {"tp": 2, "ddp_num_buckets": 4}), "megatron-bridge")
    sized = make_plan("llama3.1-8b", 16, {"tp": 2, "ddp_bucket_size": 50_000_000})
    over = yaml.safe_load(render(sized, "megatron-bridge")[1])["comm_overlap"]
    assert over["bucket_size"] == 50_000_000


def test_fsdp_builds_on_the_meta_device_and_names_its_gradient_dtype() -> None:
    """As the megatron-args target writes --init-model-with-meta-device and
    --megatron-fsdp-main-grads-dtype fp32 for Megatron-FSDP: Bridge's GPTModelProvider leaves
    init_model_with_meta_device False (gpt_provider.py @067f987d), so the override sets it; and
    Megatron-FSDP takes its gradients' dtype from ddp.megatron_fsdp_main_grads_dtype (None: the
    parameters' dtype; Megatron-Core mcore_fsdp_adapter.py @d98e8a64), never
    grad_reduce_in_fp32, so an fp32 plan says so in a note (a torch dtype on a field unset by
    default is not a YAML value Bridge converts)."""
    text = render(make_plan("llama3.1-8b", 16, {"zero_stage": 3}), "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    accepted(doc)
    assert doc["model"]["init_model_with_meta_device"] is True
    assert "megatron_fsdp_main_grads_dtype" in text and "torch.float32" in text
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "init_model_with_meta_device" not in plain["model"]


def test_the_presets_differences_are_said_with_their_peaks() -> None:
    """The delayed-scaling preset gathers FP8 parameters already (fp8_param_gather True): the
    note that told to set it is gone; a plan without it is told the preset's peak. Every preset
    reduces gradients in fp32 over the DDP config: a bf16-gradient plan is told the run's peak,
    higher than its own."""
    fp8 = make_plan("llama3.1-8b", 16, {"tp": 2}, precision="fp8", fp8_recipe="delayed")
    text = render(fp8, "megatron-bridge")[1]
    assert "fp8_param_gather" not in text
    off = make_plan("llama3.1-8b", 16, {"tp": 2}, precision="fp8", fp8_recipe="delayed",
                    fp8_param_gather=False)  # fmt: skip
    assert "sets fp8_param_gather=True" in render(off, "megatron-bridge")[1]
    bf16 = make_plan("llama3.1-8b", 16, {"tp": 2}, main_grad_dtype="bf16")
    note = next(
        ln for ln in render(bf16, "megatron-bridge")[1].splitlines() if "reduces gradients" in ln
    )
    run, planned = (float(x) for x in re.findall(r"(\d+\.\d) GiB", note))
    assert run > planned


def test_overrides_clear_what_a_recipe_sets_and_the_plan_does_not() -> None:
    """Settings a Bridge recipe sets that the plan has none of are written cleared, since
    Megatron-Core refuses them beside what the plan sets (the QA's Bridge 067f987d / Megatron-Core
    2a75ac12 checks): selective recompute clears recompute_method and recompute_num_layers
    (TransformerConfig raises beside selective); ddp.num_buckets clears bucket_size (DDP's config
    asserts both); ZeRO 0 writes overlap_param_gather false (with it on, DDP takes the layer-wise
    optimizer's path and fails; nothing is gathered there); fine-grained offloading adds
    NVTE_CPU_OFFLOAD_V1=1 (config.py raises without it on Transformer Engine >= 2.10)."""
    par = {"tp": 2, "recompute": "selective", "zero_stage": 0, "ddp_num_buckets": 4}
    doc = yaml.safe_load(render(make_plan("llama3.1-8b", 16, par), "megatron-bridge")[1])
    accepted(doc)
    model, ddp = doc["model"], doc["ddp"]
    assert model["recompute_method"] is None and model["recompute_num_layers"] is None
    assert ddp["num_buckets"] == 4 and ddp["bucket_size"] is None
    assert (
        ddp["overlap_param_gather"] is False
        and doc["comm_overlap"]["overlap_param_gather"] is False
    )
    off = {"ep": 8, "offload_modules": ["expert_fc1"]}
    text = render(make_plan("qwen3-30b-a3b", 64, off, global_batch_size=512), "megatron-bridge")[1]
    words = [shlex.split(ln[2:]) for ln in text.splitlines() if ln.startswith("# ")]
    assert ["++env_vars.NVTE_CPU_OFFLOAD_V1=1"] in words


def test_test_mode_is_the_models_field() -> None:
    """training.test_mode -> model.test_mode (TransformerConfig.test_mode, Megatron-LM 2a75ac12
    transformer_config.py:274, the real-time attention checks the plan's step time counts);
    unset, no field (its default False)."""
    plan = make_plan("llama3.1-8b", 16, {"tp": 2}, test_mode=True)
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    accepted(doc)
    assert doc["model"]["test_mode"] is True
    plain = yaml.safe_load(render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1])
    assert "test_mode" not in plain["model"]
