"""planner launch --target megatron-bridge writes over what a recipe sets that the plan decides.

The override is merged over a recipe, so a field it leaves out keeps the recipe's value, and the
launched run then differs from the step planner timed. Each test names the recipe that sets the
field (Megatron-Bridge 067f987d, src/megatron/bridge/...) and the Megatron-Core 2a75ac12 /
Bridge source whose default or check decides the value written; each failed on the override that
left the field out (or wrote it only where the plan's value differed from Megatron's default).
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml
from megatron_plans import make_plan
from paths import TESTS
from test_emit_bridge import accepted

from planner.emit.launch import render
from planner.inputs.plan import Plan, load_plan

PLANS = TESTS / "data" / "plans"


def _doc(plan: Plan) -> dict[str, Any]:
    text = render(plan, "megatron-bridge")[1]
    accepted(yaml.safe_load(text))  # (it takes the tables apart)
    return dict(yaml.safe_load(text))


def _env(plan: Plan) -> dict[str, str]:
    """The header's ++env_vars Hydra overrides."""
    text = render(plan, "megatron-bridge")[1]
    lines = [ln[2:] for ln in text.splitlines() if ln.startswith("# ++env_vars.")]
    pairs = [shlex.split(ln)[0].removeprefix("++env_vars.").split("=", 1) for ln in lines]
    return dict(pairs)


def test_the_split_clears_a_recipes_first_and_last_stage() -> None:
    """perf_recipes/glm_moe_dsa/gb200/glm5.py sets num_layers_in_first_pipeline_stage 14 and
    last 16, perf_recipes/qwen_vl/b200/qwen3_vl.py 10 and 12; recipes set the account_for_*
    fields. Beside the plan's even split they move layers (transformer_config.py 2a75ac12 splits
    the rest evenly), and beside a pipeline_model_parallel_layout Megatron-Core raises
    ("pipeline_model_parallel_layout cannot be set" with any of them): all four at their
    defaults, for an even split (Llama 3.1 70B, vpp 5) and a layout (DeepSeek-V3)."""
    for name in ("launch-llama3.1-70b", "launch-deepseek-v3"):
        m = _doc(load_plan(PLANS / f"{name}.toml"))["model"]
        assert m["num_layers_in_first_pipeline_stage"] is None
        assert m["num_layers_in_last_pipeline_stage"] is None
        assert m["account_for_embedding_in_pipeline_split"] is False
        assert m["account_for_loss_in_pipeline_split"] is False


def test_a_recipes_activation_offloading_is_switched_off() -> None:
    """perf_recipes/deepseek and perf_recipes/nemotronh/gb200/nemotronh.py switch on
    fine_grained_activation_offloading with offload_modules (and min_offloaded_tensor_size
    350_000_000; perf_recipes/nemotronh/h100/nemotronh.py delay_offload_until_cuda_graph): a plan
    without it writes it off with no modules; one with it writes TransformerConfig's defaults
    for the size floor (1024 * 1024) and the delay (False), as Megatron-LM runs it."""
    m = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}))["model"]
    assert m["fine_grained_activation_offloading"] is False and m["offload_modules"] == []
    assert "min_offloaded_tensor_size" not in m
    par = {"ep": 8, "offload_modules": ["expert_fc1"]}
    off = _doc(make_plan("qwen3-30b-a3b", 64, par, global_batch_size=512))["model"]
    assert off["fine_grained_activation_offloading"] is True
    assert off["offload_modules"] == ["expert_fc1"]
    assert off["min_offloaded_tensor_size"] == 1024 * 1024
    assert off["delay_offload_until_cuda_graph"] is False


def test_the_output_projection_and_op_fuser_are_written_off() -> None:
    """perf_recipes/deepseek/common.py and perf_recipes/gpt_oss/common.py set fp8_output_proj
    and use_transformer_engine_op_fuser True; perf_recipes/nemotronh the op fuser. A plan
    without them (TransformerConfig's False, as megatron-args runs it) writes both False and
    the GLU interleave unset (None, its default)."""
    m = _doc(make_plan("gpt-oss-20b", 8, {"ep": 8}))["model"]
    assert m["fp8_output_proj"] is False
    assert m["use_transformer_engine_op_fuser"] is False
    assert m["moe_mlp_glu_interleave_size"] is None


def test_the_context_exchange_is_always_written() -> None:
    """recipes/gpt_oss/h100/gpt_oss.py sets cp_comm_type "a2a", perf_recipes/glm_moe_dsa
    "allgather": a ring plan (cp 2) writes "p2p"; without CP, TransformerConfig's None."""
    assert _doc(make_plan("llama3.1-8b", 8, {"cp": 2}))["model"]["cp_comm_type"] == "p2p"
    assert _doc(make_plan("llama3.1-8b", 8, {"tp": 2}))["model"]["cp_comm_type"] is None


def test_the_attention_backend_is_the_plans() -> None:
    """Recipes set model.attention_backend "flash" / "fused" (perf recipes) and
    HybridModelProvider defaults to AttnBackend.flash (models/hybrid/hybrid_provider.py): the
    plan's kernel is written. Bridge sets the string as is (training/utils/omegaconf_utils.py
    `_apply_overrides`), which Megatron-Core's _set_attention_backend (language_module.py
    2a75ac12) does not match to its enum, so an unfused or FlashAttention-2 plan also gets
    Transformer Engine's NVTE_* switches the enum would set; "auto" leaves TE its choice."""
    plain = make_plan("llama3.1-8b", 16, {"tp": 2})
    m = _doc(plain)["model"]
    assert (m["attention_backend"], m["flash_attention_version"]) == ("auto", None)
    assert not {"NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN"} & set(_env(plain))
    unfused = make_plan("llama3.1-8b", 16, {"tp": 2}, flash_attention=False)
    assert _doc(unfused)["model"]["attention_backend"] == "unfused"
    nvte = {"NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN"}
    assert {k: v for k, v in _env(unfused).items() if k in nvte} == {
        "NVTE_FLASH_ATTN": "0",
        "NVTE_FUSED_ATTN": "0",
    }
    fa2 = make_plan("llama3.1-8b", 16, {"tp": 2}, attention_kernel="flash2")
    m = _doc(fa2)["model"]
    assert (m["attention_backend"], m["flash_attention_version"]) == ("flash", 2)
    assert {k: v for k, v in _env(fa2).items() if k in nvte} == {
        "NVTE_FLASH_ATTN": "1",
        "NVTE_FUSED_ATTN": "0",
    }


def test_moe_grouped_gemm_and_the_dispatchers_sms() -> None:
    """recipes/qwen_vl/h100/qwen3_vl.py sets moe_grouped_gemm False (GPTModelProvider's default,
    gpt_provider.py); the plan runs Megatron's grouped GEMM (megatron-args --moe-grouped-gemm).
    recipes/deepseek/h100/deepseek_v3.py sets moe_hybridep_num_sms 16, perf_recipes/_common.py 32:
    Megatron-Core routes these deprecated counts into moe_flex_dispatcher_num_sms when that is
    unset (transformer_config.py 2a75ac12), so both are cleared beside the plan's own."""
    par = {"ep": 8, "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "hybridep"}
    m = _doc(make_plan("qwen3-30b-a3b", 16, par))["model"]
    assert m["moe_grouped_gemm"] is True
    assert m["moe_flex_dispatcher_num_sms"] is None
    assert m["moe_hybridep_num_sms"] is None and m["moe_deepep_num_sms"] is None
    sms = _doc(make_plan("qwen3-30b-a3b", 16, {**par, "moe_flex_dispatcher_num_sms": 24}))
    assert sms["model"]["moe_flex_dispatcher_num_sms"] == 24


def test_ddp_instances_and_user_buffers_are_the_plans() -> None:
    """perf_recipes/deepseek/gb300/deepseek_v3.py sets num_distributed_optimizer_instances 4 and
    outer_dp_sharding_strategy "optim"; scripts/performance/utils/overrides.py nccl_ub, with
    Megatron-FSDP's fsdp_double_buffer (perf_recipes/llama/*/llama3.py) and
    fsdp_manual_registration, which Bridge's ConfigContainer validation asserts off without
    nccl_ub (training/config.py). The plan has one instance and none of the buffers
    (Megatron-Core's defaults, distributed_data_parallel_config.py 2a75ac12)."""
    ddp = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}))["ddp"]
    assert ddp["num_distributed_optimizer_instances"] == 1
    assert ddp["outer_dp_sharding_strategy"] == "no_shard"
    assert ddp["nccl_ub"] is False and "fsdp_double_buffer" not in ddp
    fsdp = _doc(load_plan(PLANS / "launch-mixtral-8x7b.toml"))["ddp"]  # zero_stage 3
    assert fsdp["fsdp_double_buffer"] is False and fsdp["fsdp_manual_registration"] is False


def test_the_optimizers_dtypes_and_step_overlap_are_the_plans() -> None:
    """recipes/deepseek/h100/deepseek_v3.py and perf_recipes/qwen/*/qwen3_moe.py set bf16 Adam
    moments, recipes/nemotronh/h100/nemotron_3_super.py fp16 main parameters; Megatron-Core
    asserts all four dtypes fp32 without the precision-aware optimizer (optimizer_config.py
    2a75ac12), which the override switches off for such a plan, so the recipe's dtypes made
    Bridge refuse it. Written as torch dtype names, which Bridge reads back onto the fields
    (omegaconf_utils.py `_apply_overrides`, str_to_dtype). perf_recipes/_common.py sets
    overlap_param_gather_with_optimizer_step (optimizer and comm_overlap), which Megatron-LM
    leaves off; perf_recipes/llama/gb200/llama31.py align_param_gather False, which Bridge's
    setup derives where unset (comm_overlap.py `_get_optimizer_overlap_cfgs`)."""
    doc = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}))
    opt = doc["optimizer"]
    dtypes = ("main_params_dtype", "main_grads_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
    assert [opt[k] for k in dtypes] == ["torch.float32"] * 4
    assert opt["use_precision_aware_optimizer"] is False
    assert opt["overlap_param_gather_with_optimizer_step"] is False
    assert doc["comm_overlap"]["overlap_param_gather_with_optimizer_step"] is False
    assert doc["comm_overlap"]["align_param_gather"] is None
    bf16 = _doc(make_plan("llama3.1-8b", 16, {"tp": 2}, optimizer_state_dtype="bf16"))
    opt = bf16["optimizer"]
    assert opt["use_precision_aware_optimizer"] is True
    assert [opt[k] for k in dtypes] == ["torch.float32"] * 2 + ["torch.bfloat16"] * 2


def test_the_cache_is_not_emptied_per_step() -> None:
    """recipes/nemotronh/h100/nemotron_3_nano.py and recipes/qwen_vl/gb200/qwen35_vl.py set
    train.empty_unused_memory_level 2 (the cache emptied twice a step, time the plan has not);
    Megatron's default 0 is written."""
    assert _doc(make_plan("llama3.1-8b", 16, {"tp": 2}))["train"]["empty_unused_memory_level"] == 0


def test_run_scripts_late_step_overlap_is_noted() -> None:
    """scripts/performance/utils/overrides.py set_post_overrides (run_script.py, after the Hydra
    overrides, for recipes without a flat perf recipe) turns
    overlap_param_gather_with_optimizer_step on where dp, pp and vpp > 1 outside MXFP8 / NVFP4:
    such a plan (Llama 3.1 70B, pp 4 x vpp 5) says so; one without virtual stages does not."""
    text = render(load_plan(PLANS / "launch-llama3.1-70b.toml"), "megatron-bridge")[1]
    assert "set_post_overrides in run_script.py" in text
    plain = render(make_plan("llama3.1-8b", 16, {"tp": 2}), "megatron-bridge")[1]
    assert "set_post_overrides" not in plain
