"""NeMo 2.0 `nemo llm pretrain` lines: CUDA graph keys, the op fuser, the loss keys, dropout
rates, what NeMo itself does with a line and NeMo-Run's value spellings.

Oracles: NeMo's own definitions, restated by hand in each test (NVIDIA/NeMo 8cfedd72: the recipe
defaults of nemo/collections/llm/recipes/<factory>.py, MegatronStrategy's and TransformerConfig's
field names, llm.api._validate_config), NeMo-Run's parse_bool and parse_list.
"""

from __future__ import annotations

from typing import Any

import pytest
from nemo_lines import HEAD, doc, read

from planner.inputs.errors import InputError


@pytest.mark.parametrize(
    ("overrides", "graphs"),
    [
        ("model.config.cuda_graph_impl=none", {}),
        ("model.config.cuda_graph_impl=local", {"cuda_graphs": True, "cuda_graph_impl": "local"}),
        # deprecated: local (NeMo asserts the TE RNG tracker beside it, gpt/model/base.py:332-337)
        (
            "model.config.enable_cuda_graph=True trainer.strategy.use_te_rng_tracker=True",
            {"cuda_graphs": True, "cuda_graph_impl": "local"},
        ),
        (
            "model.config.cuda_graph_impl=transformer_engine "
            "model.config.cuda_graph_scope=[attn,moe_router,moe_preprocess]",
            {
                "cuda_graphs": True,
                "cuda_graph_impl": "transformer_engine",
                "cuda_graph_modules": ["attn", "moe_router", "moe_preprocess"],
            },
        ),
        (
            "model.config.cuda_graph_impl=local model.config.cuda_graph_modules=full",
            {"cuda_graphs": True, "cuda_graph_impl": "local"},
        ),
        (  # the MLPerf configs' whole-step graph, by Megatron-Core's old scope name
            "model.config.cuda_graph_impl=local model.config.cuda_graph_scope=full_iteration",
            {"cuda_graphs": True, "cuda_graph_impl": "full_iteration"},
        ),
    ],
)
def test_cuda_graph_keys_are_read(overrides: str, graphs: dict[str, Any]) -> None:
    # TransformerConfig d98e8a64: cuda_graph_impl none | local | transformer_engine |
    # full_iteration, the deprecated enable_cuda_graph (local), cuda_graph_modules (or the
    # deprecated cuda_graph_scope) naming the regions, "full" the whole layer
    training = doc(HEAD + overrides)["training"]
    assert {k: v for k, v in training.items() if "graph" in k} == graphs


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ("model.config.cuda_graph_impl=always", "model.config.cuda_graph_impl"),
        (
            "model.config.cuda_graph_impl=local model.config.cuda_graph_modules=attention",
            "model.config.cuda_graph_modules",
        ),
    ],
)
def test_bad_cuda_graph_keys_are_bad_input(overrides: str, key: str) -> None:
    with pytest.raises(InputError, match=key):
        doc(HEAD + overrides)


def test_the_op_fuser_fuses_the_experts_where_it_can() -> None:
    # TransformerConfig.use_transformer_engine_op_fuser with a GLU interleave of 32 on a MoE
    # recipe: the fused grouped MLP (Megatron-Core d98e8a64 experts.py; Transformer Engine
    # d0067d0d validate_grouped_mlp_dims needs the interleave); on a dense model, or without the
    # interleave, nothing is fused and the reading says so
    mixtral = "nemo llm pretrain --factory mixtral_8x7b trainer.devices=8 "
    on = "model.config.use_transformer_engine_op_fuser=True "
    grouped = "model.config.moe_grouped_gemm=True "  # MixtralConfig leaves it off
    fused = read(mixtral + on + grouped + "model.config.moe_mlp_glu_interleave_size=32", 64)
    assert fused.doc["training"]["moe_fused_grouped_mlp"] is True
    plain = read(mixtral + on + grouped, 64)
    assert "moe_fused_grouped_mlp" not in plain.doc["training"]
    assert any("GLU interleave of 32" in n for n in plain.notes)
    dense = read(HEAD + on)
    assert "moe_fused_grouped_mlp" not in dense.doc["training"]
    assert any("no grouped-GEMM experts" in n for n in dense.notes)


def test_the_loss_keys_read_and_refuse_by_value() -> None:
    # Transformer Engine's kernel: a fused loss without the compiled kernel's extra fp32 copy
    te = doc(
        HEAD + "model.config.cross_entropy_loss_fusion=True "
        "model.config.cross_entropy_fusion_impl=te"
    )["training"]
    assert "compiled_loss_fusion" not in te and "loss_fusion" not in te
    with pytest.raises(InputError, match=r"cross_entropy_fusion_impl.*expected native or te"):
        doc(HEAD + "model.config.cross_entropy_fusion_impl=linear")


def test_dropout_rates_from_the_line_or_the_recipe_config() -> None:
    # LlamaConfig, MixtralConfig and Gemma2Config all set both rates to 0.0 (gpt/model/llama.py,
    # mixtral.py, gemma2.py at NeMo 8cfedd72: no masks; planner read Mixtral's and Gemma 2's as
    # GPTConfig's 0.1); a line may set them
    assert doc(HEAD + "trainer.max_steps=10")["training"]["hidden_dropout"] is False
    with_dropout = doc(HEAD + "model.config.hidden_dropout=0.1")["training"]
    assert "hidden_dropout" not in with_dropout and with_dropout["attention_dropout"] is False
    for factory in ("mixtral_8x7b", "gemma2_2b"):
        line = f"nemo llm pretrain --factory {factory} trainer.num_nodes=1"
        off = doc(line, 8)["training"]
        assert off["hidden_dropout"] is False and off["attention_dropout"] is False
    with pytest.raises(InputError, match=r"model.config.hidden_dropout=1.5: expected a dropout"):
        read(HEAD + "model.config.hidden_dropout=1.5")


def test_what_nemo_itself_does_with_the_line() -> None:
    """Three readings NeMo 8cfedd72's own code decides:
    - a bare `nemo llm pretrain -y --factory llama3_8b` (no override) is a NeMo line: it was
      read as Megatron-LM flags ("--num-layers: required");
    - llama31_405b's trainer() counts the embedding and the loss as pipeline layers (126 + 2 =
      8 ranks x 2 virtual stages x 8): refused as 126 % 16 before;
    - the strategy writes the precision plugin's grad_reduce_in_fp32 (True unless the plugin
      says) over its DDP config (megatron_strategy.py update_config_with_dtype_overrides): the
      DDP key alone leaves fp32 gradients, noted (it was read as bf16, 5.4 GiB under)."""
    bare = doc("nemo llm pretrain -y --factory llama3_8b")
    assert bare["parallel"]["cp"] == 2  # the recipe's
    p = doc("nemo llm pretrain -y --factory llama31_405b trainer.num_nodes=64", 512)["parallel"]
    assert p["account_for_embedding_in_pipeline_split"] is True
    assert p["account_for_loss_in_pipeline_split"] is True
    off = " ".join(
        f"trainer.strategy.account_for_{side}_in_pipeline_split=False"
        for side in ("embedding", "loss")
    )
    line = f"nemo llm pretrain -y --factory llama31_405b trainer.num_nodes=64 {off}"
    assert "account_for_loss_in_pipeline_split" not in doc(line, 512)["parallel"]  # the line's
    ddp = read(HEAD + "trainer.strategy.ddp.grad_reduce_in_fp32=False")
    assert "main_grad_dtype" not in ddp.doc["training"]
    assert any("writes the precision plugin's value over it" in n for n in ddp.notes)


def test_nemo_runs_values_read_as_it_reads_them() -> None:
    """NeMo-Run's booleans (parse_bool: yes / no / on / off too) and lists (parse_list);
    TransformerConfig's defaults for a shape field given None (ffn 4 x hidden, query groups =
    heads: Llama 3 8B becomes 16,384 wide and multi-head); model.config.fp8 is written over by
    the precision plugin (megatron_strategy.py update_config_with_dtype_overrides), so it
    trains in bf16."""
    assert doc(HEAD + "optim.config.use_distributed_optimizer=no")["parallel"]["zero_stage"] == 0
    assert doc(HEAD + "optim.config.use_distributed_optimizer=on")["parallel"]["zero_stage"] == 1
    listed = doc(HEAD + 'model.config.recompute_granularity=selective '
                 'model.config.recompute_modules=["core_attn","mlp"]')["parallel"]  # fmt: skip
    assert listed["recompute_modules"] == ["core_attn", "mlp"]
    model = doc(HEAD + "model.config.ffn_hidden_size=None model.config.num_query_groups=None")[
        "model"
    ]
    assert model["ffn_hidden_size"] == 4 * 4096 and model["num_query_groups"] == 32
    fp8 = read(HEAD + "model.config.fp8=hybrid")
    assert fp8.doc["training"]["precision"] == "bf16"
    assert any("model.config.fp8: NeMo writes the precision plugin" in n for n in fp8.notes)


@pytest.mark.parametrize(
    ("overrides", "padding"),
    [
        ("model.config.moe_router_padding_for_quantization=true", True),
        ("model.config.moe_router_padding_for_fp8=true", True),
        # the alias turns padding on whatever the other key says (transformer_config.py
        # :2641-2647 d98e8a64); both false, or neither given: off
        (
            "model.config.moe_router_padding_for_fp8=true "
            "model.config.moe_router_padding_for_quantization=false",
            True,
        ),
        ("model.config.moe_router_padding_for_quantization=false", None),
        ("", None),
    ],
)
def test_router_padding_keys_are_read(overrides: str, padding: bool | None) -> None:
    reading = read(HEAD + overrides)
    assert reading.doc["training"].get("moe_router_padding") is padding
    assert not any("moe_router_padding" in w for w in (*reading.ignored, *reading.unknown))
