"""planner.emit.megatron: the Megatron-LM arguments of the model (attention, MLP, positions,
MoE and MLA) and of its kernels' precision (NVFP4, FP8 output projection, the fused grouped MLP,
FP8 attention, RoPE fusion), read back.

Oracles: Megatron-LM d98e8a64's parser (planner/inputs/megatron_flags.txt) for every flag, and
validate_args / TransformerConfig.__post_init__ for the combinations.
"""

from __future__ import annotations

import pytest
import yaml
from megatron_plans import (
    assert_same,
    flags,
    make_plan,
    round_trip,
)
from paths import PLANS

from planner.emit import megatron, megatron_model
from planner.emit.common import environment
from planner.emit.launch import render
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan

# --- model shape


def test_gqa_swiglu_and_positions_for_llama() -> None:
    f = flags(make_plan("llama3.1-70b", 64, {"tp": 8, "pp": 2}, seq_length=8192))
    assert "--group-query-attention" in f and f["--num-query-groups"] == ["8"]
    assert "--swiglu" in f and f["--normalization"] == ["RMSNorm"]
    assert "--disable-bias-linear" in f and "--untie-embeddings-and-output-weights" in f
    assert f["--position-embedding-type"] == ["rope"]
    # max(model's 131072, seq 8192); Megatron requires it and checks >= seq_length
    assert f["--max-position-embeddings"] == ["131072"]


def test_rope_model_without_a_table_uses_seq_length() -> None:
    f = flags(make_plan("hagemann-llama-13b", 8, {"tp": 8}, seq_length=2048))
    assert f["--max-position-embeddings"] == ["2048"]
    assert "--group-query-attention" not in f  # MHA


def test_learned_positions_keep_the_model_table() -> None:
    plan = make_plan("gpt3-175b", 64, {"tp": 8, "pp": 8}, seq_length=2048)
    f = flags(plan)
    assert f["--position-embedding-type"] == ["learned_absolute"]
    assert f["--max-position-embeddings"] == ["2048"]
    assert "--swiglu" not in f and "--disable-bias-linear" not in f


def test_moe_and_mla_flags_for_deepseek() -> None:
    f = flags(load_plan(PLANS / "launch-deepseek-v3.toml"))
    assert "--multi-latent-attention" in f and "--group-query-attention" not in f
    assert f["--q-lora-rank"] == ["1536"] and f["--kv-lora-rank"] == ["512"]
    assert f["--qk-head-dim"] == ["128"] and f["--qk-pos-emb-head-dim"] == ["64"]
    assert f["--v-head-dim"] == ["128"]
    assert f["--num-experts"] == ["256"] and f["--moe-router-topk"] == ["8"]
    assert f["--moe-ffn-hidden-size"] == ["2048"]
    assert f["--moe-shared-expert-intermediate-size"] == ["2048"]
    assert f["--moe-layer-freq"] == ["[0]*3+[1]*58"]
    assert f["--expert-model-parallel-size"] == ["64"]
    assert f["--expert-tensor-parallel-size"] == ["1"]
    assert f["--moe-token-dispatcher-type"] == ["alltoall"] and "--moe-grouped-gemm" in f
    assert f["--mtp-num-layers"] == ["1"]


def test_moe_layer_freq_is_the_python_list_megatron_evaluates() -> None:
    pattern = (0, 0, 1, 1, 1, 0, 1)
    text = megatron_model.moe_layer_freq(pattern)
    assert text == "[0]*2+[1]*3+[0]+[1]"
    # Megatron's moe_freq_type: only ,digits[]()+* allowed, then eval
    assert set(text) <= set(",0123456789[]()+*")
    assert eval(text) == list(pattern)  # Megatron's own oracle
    assert megatron_model.moe_layer_freq(2) == "2"


def test_models_megatron_cannot_express_are_refused_by_name() -> None:
    with pytest.raises(InputError, match="ALiBi"):
        megatron.arguments(make_plan("bloom-176b", 64, {"tp": 8, "pp": 2}, seq_length=2048))
    with pytest.raises(InputError, match="relu"):
        megatron.arguments(make_plan("opt-175b", 64, {"tp": 8, "pp": 2}, seq_length=2048))


@pytest.mark.parametrize("gather", [True, False])
def test_nvfp4_flags_and_bf16_layers_read_back(gather: bool) -> None:
    # Megatron-LM d98e8a64: --fp4-format e2m1, --fp4-recipe nvfp4, --fp4-param-gather;
    # --first-last-layers-bf16 with the two counts (TransformerConfig)
    training = {"precision": "fp4", "fp4_param_gather": gather, "bf16_layers_at_end": 4}
    plan = make_plan("llama3.1-8b", 8, {"tp": 1, "zero_stage": 1}, "b200-sxm-180gb", **training)
    f = flags(plan)
    assert f["--fp4-format"] == ["e2m1"] and f["--fp4-recipe"] == ["nvfp4"]
    assert ("--fp4-param-gather" in f) is gather and "--fp8-format" not in f
    assert "--first-last-layers-bf16" in f and f["--num-layers-at-end-in-bf16"] == ["4"]
    assert f["--num-layers-at-start-in-bf16"] == ["0"]
    assert_same(plan, round_trip(plan))


def test_fp8_output_proj_flag_reads_back() -> None:
    # Megatron-LM d98e8a64: --fp8-output-proj (TransformerConfig.fp8_output_proj, with fp8 and
    # the mxfp8 recipe); the plan read back from the launch line has it, and the same memory
    training = {"precision": "fp8", "fp8_recipe": "mxfp8", "fp8_output_proj": True}
    plan = make_plan("llama3.1-8b", 8, {"tp": 1, "zero_stage": 1}, "b200-sxm-180gb", **training)
    assert "--fp8-output-proj" in flags(plan)
    back = round_trip(plan)
    assert back.job.fp8_output_proj
    assert_same(plan, back)
    plain = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp8")
    assert "--fp8-output-proj" not in flags(plain) and not round_trip(plain).job.fp8_output_proj


def test_fused_grouped_mlp_flags_env_and_read_back() -> None:
    # Megatron-LM d98e8a64: --use-transformer-engine-op-fuser (TransformerConfig field) builds the
    # experts as Transformer Engine's fused grouped MLP; its GLU kernel needs
    # --moe-mlp-glu-interleave-size 32 (TE d0067d0d validate_grouped_mlp_dims) and its kernels are
    # registered only with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 (`is_supported`)
    training = {"precision": "fp8", "fp8_recipe": "mxfp8", "moe_fused_grouped_mlp": True}
    par = {"tp": 1, "ep": 8, "etp": 1}
    plan = make_plan("mixtral-8x7b", 64, par, "b200-sxm-180gb", **training)
    f = flags(plan)
    assert "--use-transformer-engine-op-fuser" in f and "--moe-grouped-gemm" in f
    assert f["--moe-mlp-glu-interleave-size"] == ["32"]
    env = {e.name: e.value for e in environment(plan)}
    assert env["NVTE_CUTEDSL_FUSED_GROUPED_MLP"] == "1"
    back = round_trip(plan)
    assert back.job.moe_fused_grouped_mlp and back.job.grouped_mlp_fused
    assert_same(plan, back)
    plain = make_plan("mixtral-8x7b", 64, par, "b200-sxm-180gb", precision="fp8")
    assert "--use-transformer-engine-op-fuser" not in flags(plain)
    assert "NVTE_CUTEDSL_FUSED_GROUPED_MLP" not in {e.name for e in environment(plain)}
    # a GLU without the 32-wide interleave is not fused: read as unfused, and the reading says so
    text = megatron.render(plan, "job").replace("--moe-mlp-glu-interleave-size 32", "")
    reading = megatron_args.read(text, "b200-sxm-180gb", 64)
    assert not reading.doc["training"].get("moe_fused_grouped_mlp")
    assert any("GLU interleave of 32" in n for n in reading.notes)


def test_fp8_attention_has_no_megatron_lm_flag_and_is_noted() -> None:
    # Megatron-LM d98e8a64 leaves TransformerConfig.fp8_dot_product_attention out of its command
    # line (arguments.py `_add_network_size_args` exclude list): no flag to emit, a note instead
    plan = make_plan(
        "llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp4", fp8_attention=True
    )
    args = megatron.arguments(plan)
    assert not any("dot-product" in f or "dpa" in f for f in flags(plan))
    assert any("fp8_attention" in n and "no Megatron-LM flag" in n for n in args.notes)
    plain = make_plan("llama3.1-8b", 8, {"tp": 1}, "b200-sxm-180gb", precision="fp4")
    assert not any("fp8_attention" in n for n in megatron.arguments(plain).notes)


def test_rope_fusion_flags() -> None:
    # Megatron-LM d98e8a64 arguments.py: --no-rope-fusion is store_false into apply_rope_fusion,
    # so a line without it fuses; TransformerConfig's own default is False, so the
    # Megatron-Bridge override states it either way
    plain = make_plan("llama3.1-8b", 16, {"tp": 2})
    assert plain.job.fused_rope and "--no-rope-fusion" not in flags(plain)
    eager = make_plan("llama3.1-8b", 16, {"tp": 2}, fused_rope=False)
    assert "--no-rope-fusion" in flags(eager)
    assert not round_trip(eager).job.fused_rope and round_trip(plain).job.fused_rope
    for plan, want in ((plain, True), (eager, False)):
        doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
        assert doc["model"]["apply_rope_fusion"] is want
