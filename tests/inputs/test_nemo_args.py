"""NeMo 2.0 `nemo llm pretrain` lines read by `check --megatron-args` (issue 21).

Oracles: NeMo's own definitions, restated by hand in each test (NVIDIA/NeMo 8cfedd72: the recipe
defaults of nemo/collections/llm/recipes/<factory>.py, MegatronStrategy's and TransformerConfig's
field names, llm.api._validate_config), Megatron-LM d98e8a64's CI for the bare-key = True
convention (_run_training.sh), and hand arithmetic for the Gemma 2 2B parameter count."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import run

from planner.inputs import catalog, megatron_args, nemo_args
from planner.inputs.errors import InputError
from planner.inputs.nemo_recipes import RECIPES
from planner.inputs.plan import parse_plan
from planner.model import params

HEAD = "nemo llm pretrain -y --factory llama3_8b "


def read(text: str, gpus: int = 8, **kw: Any) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "run.sh", **kw)


def doc(text: str, gpus: int = 8, **kw: Any) -> dict[str, Any]:
    return read(text, gpus, **kw).doc


def test_the_recipe_sets_what_the_line_does_not() -> None:
    # llama3_8b.py: trainer(tensor_parallelism=1, pipeline_parallelism=1, context_parallelism=2,
    # sequence_parallelism=False); MockDataModule(seq_length=8192, global_batch_size=512,
    # micro_batch_size=1); distributed optimizer; bf16-mixed
    d = doc(HEAD + "trainer.max_steps=10")
    assert d["parallel"] == {
        "tp": 1,
        "pp": 1,
        "cp": 2,
        "ep": 1,
        "vpp": 1,
        "micro_batch_size": 1,
        "sequence_parallel": False,
        "zero_stage": 1,
    }
    # and NeMo's LlamaConfig (gpt/model/llama.py): attention_dropout = hidden_dropout = 0.0
    assert d["training"] == {
        "seq_length": 8192,
        "global_batch_size": 512,
        "precision": "bf16",
        "attention_dropout": False,
        "hidden_dropout": False,
    }
    # llama3_70b.py: tp 4, pp 4, vpp 5, cp 2, sp on
    p = doc("nemo llm pretrain --factory llama3_70b trainer.num_nodes=4", 32)["parallel"]
    assert (p["tp"], p["pp"], p["vpp"], p["cp"], p["sequence_parallel"]) == (4, 4, 5, 2, True)


@pytest.mark.parametrize(
    ("override", "table", "field", "value"),
    [
        ("trainer.strategy.tensor_model_parallel_size=4", "parallel", "tp", 4),
        ("trainer.strategy.pipeline_model_parallel_size=2", "parallel", "pp", 2),
        ("trainer.strategy.context_parallel_size=1", "parallel", "cp", 1),
        ("trainer.strategy.expert_model_parallel_size=2", "parallel", "ep", 2),
        ("trainer.strategy.expert_tensor_parallel_size=1", "parallel", "etp", 1),
        ("data.micro_batch_size=2", "parallel", "micro_batch_size", 2),
        (
            "trainer.strategy.ddp.overlap_grad_reduce=False",
            "parallel",
            "overlap_grad_reduce",
            False,
        ),
        (
            "trainer.strategy.ddp.overlap_param_gather=false",
            "parallel",
            "overlap_param_gather",
            False,
        ),
        (
            "trainer.strategy.ddp.bucket_size=768000000",
            "parallel",
            "ddp_bucket_size",
            768000000,
        ),
        ("trainer.strategy.ddp.num_buckets=4", "parallel", "ddp_num_buckets", 4),
        ("optim.config.use_distributed_optimizer=False", "parallel", "zero_stage", 0),
        ("model.config.recompute_granularity=full", "parallel", "recompute", "full"),
        ("model.config.recompute_method=block", "parallel", "recompute_method", "block"),
        ("model.config.recompute_num_layers=2", "parallel", "recompute_num_layers", 2),
        ("model.config.tp_comm_overlap=True", "parallel", "tp_comm_overlap", True),
        ("data.seq_length=4096", "training", "seq_length", 4096),
        ("data.global_batch_size=64", "training", "global_batch_size", 64),
        ("trainer.plugins.grad_reduce_in_fp32=False", "training", "main_grad_dtype", "bf16"),
        ("trainer.plugins.grad_reduce_in_fp32=True", "training", "main_grad_dtype", "fp32"),
        ("trainer.plugins.fp8=hybrid", "training", "precision", "fp8"),
        ("model.config.bias_activation_fusion=False", "training", "fused_swiglu", False),
        # TransformerConfig: cross_entropy_loss_fusion off is Megatron's unfused loss; on, its
        # cross_entropy_fusion_impl defaults to native (the compiled kernel)
        ("model.config.cross_entropy_loss_fusion=False", "training", "loss_fusion", False),
        ("model.config.cross_entropy_loss_fusion=True", "training", "compiled_loss_fusion", True),
        # TransformerConfig.cp_comm_type, the plan's [parallel] field of the same name
        ("model.config.cp_comm_type=a2a", "parallel", "cp_comm_type", "a2a"),
        # ModelParallelConfig's deferral of the output layer's weight gradients (Megatron-LM
        # d98e8a64 model_parallel_config.py), the plan's [parallel] fields of the same names
        (
            "model.config.defer_embedding_wgrad_compute=True",
            "parallel",
            "defer_embedding_wgrad_compute",
            True,
        ),
        ("model.config.wgrad_deferral_limit=22", "parallel", "wgrad_deferral_limit", 22),
        # TransformerConfig.moe_shared_expert_overlap (transformer_config.py), the same name
        (
            "model.config.moe_shared_expert_overlap=True",
            "parallel",
            "moe_shared_expert_overlap",
            True,
        ),
        # TransformerConfig.moe_flex_dispatcher_num_sms and its two deprecated per-backend keys,
        # which __post_init__ routes to it (transformer_config.py d98e8a64)
        (
            "model.config.moe_flex_dispatcher_num_sms=24",
            "parallel",
            "moe_flex_dispatcher_num_sms",
            24,
        ),
        ("model.config.moe_hybridep_num_sms=32", "parallel", "moe_flex_dispatcher_num_sms", 32),
        ("model.config.moe_deepep_num_sms=16", "parallel", "moe_flex_dispatcher_num_sms", 16),
        # TransformerConfig's HybridEP budget and paged stash, the same names ([training])
        (
            "model.config.moe_expert_rank_capacity_factor=1.5",
            "training",
            "moe_expert_rank_capacity_factor",
            1.5,
        ),
        ("model.config.moe_paged_stash=True", "training", "moe_paged_stash", True),
        (
            "model.config.moe_paged_stash_buffer_size_factor_cuda=1.2",
            "training",
            "moe_paged_stash_buffer_size_factor",
            1.2,
        ),
        ("model.config.num_layers=12", "model", "num_layers", 12),
        ("model.config.hidden_size=768", "model", "hidden_size", 768),
        ("model.config.ffn_hidden_size=3072", "model", "ffn_hidden_size", 3072),
        ("model.config.num_attention_heads=16", "model", "num_attention_heads", 16),
        ("model.config.num_query_groups=4", "model", "num_query_groups", 4),
        ("model.config.kv_channels=64", "model", "kv_channels", 64),
        ("model.config.num_moe_experts=8", "model", "num_moe_experts", 8),
        ("model.config.moe_router_topk=1", "model", "moe_router_topk", 1),
        ("model.config.add_bias_linear=True", "model", "add_bias_linear", True),
        ("model.config.vocab_size=32000", "model", "vocab_size", 32000),
        (
            "model.config.share_embeddings_and_output_weights=True",
            "model",
            "untie_embeddings_and_output_weights",
            False,
        ),
    ],
)
def test_each_key_by_hand(override: str, table: str, field: str, value: object) -> None:
    assert doc(HEAD + override)[table][field] == value


def test_a_bare_key_is_true_and_sequence_parallel_needs_tp() -> None:
    # _run_training.sh writes `key: true` as the bare key; NeMo's _validate_config turns sequence
    # parallelism off at tp = 1 and drops vpp without pipeline parallelism
    on = "trainer.strategy.tensor_model_parallel_size=2 trainer.strategy.sequence_parallel"
    assert doc(HEAD + on)["parallel"]["sequence_parallel"] is True
    assert (
        doc(HEAD + "trainer.strategy.sequence_parallel")["parallel"]["sequence_parallel"] is False
    )
    vpp = "trainer.strategy.virtual_pipeline_model_parallel_size=4"
    assert doc(HEAD + vpp)["parallel"]["vpp"] == 1
    assert (
        doc(HEAD + vpp + " trainer.strategy.pipeline_model_parallel_size=2")["parallel"]["vpp"] == 4
    )


def test_the_gpu_count_is_nodes_times_devices() -> None:
    # mixtral_8x7b.py: pretrain_recipe(num_nodes=8, num_gpus_per_node=8)
    mixtral = "nemo llm pretrain --factory mixtral_8x7b "
    assert doc(mixtral + "trainer.devices=8", 64)["cluster"]["num_gpus"] == 64
    with pytest.raises(InputError, match=r"trainer.num_nodes x trainer.devices = 64 GPUs, but"):
        read(mixtral + "trainer.devices=8", 32)
    with pytest.raises(InputError, match=r"= 16 GPUs, but --num-gpus is 8"):
        read(HEAD + "trainer.num_nodes=2")
    note = read(mixtral + "trainer.max_steps=1", 128).notes
    assert any("the recipe's own is 8 node(s) x 8" in n for n in note)


def test_the_vocabulary() -> None:
    # Llama3Config8B leaves vocab_size unset: MockDataModule's GPT-2 BPE tokenizer, 50,257,
    # padded by 128 x tp (GPTConfig default make_vocab_size_divisible_by)
    model = doc(HEAD + "data.seq_length=4096")["model"]
    assert model["vocab_size"] == 50_257 and "make_vocab_size_divisible_by" not in model
    assert doc(HEAD + "data.seq_length=4096", vocab_size=128_256)["model"]["vocab_size"] == 128_256
    with pytest.raises(InputError, match=r"data.tokenizer=.*--vocab-size"):
        read(HEAD + "data.tokenizer=llama3")
    # Gemma2Config: vocab_size = 256000, used unpadded
    gemma = doc("nemo llm pretrain --factory gemma2_2b trainer.max_steps=1")["model"]
    assert (gemma["vocab_size"], gemma["make_vocab_size_divisible_by"]) == (256_000, 1)


def test_gemma2_runs_unfused_attention_and_glu() -> None:
    # gemma2.py: core_attention=Gemma2DotProductAttention (unfused SDPA, for logit softcapping);
    # activation openai_gelu with bias_activation_fusion left False. Recipe: tp 2, gbs 32, mbs 2,
    # seq 4096; Gemma2Config's dropouts 0.0 (no masks)
    r = read("nemo llm pretrain --factory gemma2_2b trainer.max_steps=1")
    assert r.doc["training"] == {
        "seq_length": 4096,
        "global_batch_size": 32,
        "precision": "bf16",
        "flash_attention": False,
        "fused_swiglu": False,
        "attention_dropout": False,
        "hidden_dropout": False,
    }
    assert r.doc["parallel"]["tp"] == 2 and r.doc["parallel"]["micro_batch_size"] == 2
    assert any("soft-capping" in n for n in r.not_modelled)


def test_gemma2_2b_parameters() -> None:
    # keras-hub's gemma2_2b_en preset: 2,614,341,888 parameters, which hand arithmetic gives as
    # embedding 256,000 x 2,304 + 26 x (attention 2,304 x (2,048 + 2 x 1,024) + 2,048 x 2,304,
    # MLP 3 x 2,304 x 9,216, 4 norms x 2,304) + final norm 2,304. planner's layer has 2 norms, so
    # its count is 26 x 2 x 2,304 lower
    arch = catalog.get_model("gemma2-2b")
    assert (
        256_000 * 2304 + 26 * (2304 * 4096 + 2048 * 2304 + 3 * 2304 * 9216 + 4 * 2304) + (2304)
        == 2_614_341_888
    )
    assert params.params_total(arch) == 2_614_341_888 - 26 * 2 * 2304


@pytest.mark.parametrize("factory", sorted(RECIPES))
def test_each_recipe_is_its_zoo_model(factory: str) -> None:
    """Without shape overrides, the model read is the zoo model (the fields left to Megatron's
    defaults, kv_channels and the expert width, come out as the zoo file states them)."""
    recipe = RECIPES[factory]
    zoo = catalog.get_model(recipe.zoo)
    gpus = math.lcm(8, recipe.tp * recipe.pp * recipe.cp, recipe.ep * recipe.pp * recipe.tp)
    d = doc(f"nemo llm pretrain --factory {factory} trainer.max_steps=1", gpus)
    arch = parse_plan(d, Path("run.sh")).job.arch
    same = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "head_dim")
    assert [getattr(arch, f) for f in same] == [getattr(zoo, f) for f in same]
    assert (arch.query_groups, arch.expert_ffn, arch.num_moe_experts) == (
        zoo.query_groups,
        zoo.expert_ffn,
        zoo.num_moe_experts,
    )


def test_shape_overrides_move_the_derived_fields() -> None:
    # Llama3Config8B sets no kv_channels: 768 / 16 heads = 48 (Megatron's default)
    d = doc(HEAD + "model.config.hidden_size=768 model.config.num_attention_heads=16")
    arch = parse_plan(d, Path("run.sh")).job.arch
    assert arch.head_dim == 48 and arch.name == "llama3.1-8b+overrides"


def test_harmless_keys_are_ignored_and_listed() -> None:
    r = read(
        HEAD + "trainer.max_steps=50 log.log_dir=/x model.config.moe_permute_fusion "
        "model.config.apply_query_key_layer_scaling optim.config.lr=1e-4"
    )
    # moe_permute_fusion, apply_query_key_layer_scaling: Megatron-LM flags its reader ignores
    assert r.ignored == (
        "log.log_dir",
        "model.config.apply_query_key_layer_scaling",
        "model.config.moe_permute_fusion",
        "optim.config.lr",
        "trainer.max_steps",
    )
    assert r.kind == "NeMo overrides"


def test_a_not_modelled_megatron_setting_is_noted() -> None:
    key = "model.config.keep_fp8_transpose_cache"
    notes = read(HEAD + f"{key}=True").not_modelled
    assert any(n.startswith(f"{key} (--keep-fp8-transpose-cache)") for n in notes)
    # the attention variant (a gated delta net, DeepSeek sparse attention) changes the model,
    # which the Megatron-LM reader reads (megatron_gdn, megatron_dsa) and the NeMo one does not
    variant = "model.config.experimental_attention_variant=gated_delta_net"
    with pytest.raises(InputError, match=r"\(Megatron-LM --experimental-attention-variant\)"):
        read(HEAD + variant)
    # the output gate is the model's own field (ModelArch.attention_output_gate), read as such
    r = read(HEAD + "model.config.attention_output_gate=True")
    assert r.doc["model"]["attention_output_gate"] is True and not r.not_modelled


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (HEAD + "trainer.strategy.foo=3", r"trainer.strategy.foo=3: not a NeMo 2 override"),
        (
            HEAD + "trainer.strategy.tensor_model_paralel_size=2",
            r"did you mean trainer.strategy.tensor_model_parallel_size",
        ),
        (
            HEAD + "optim.config.use_precision_aware_optimizer=True",
            r"changes memory or layout \(Megatron-LM --use-precision-aware-optimizer\)",
        ),
        ("trainer.devices=8 data.seq_length=2048", r"name no model.*--nemo-model NAME"),
        ("nemo llm pretrain --factory llama3_8bb data.seq_length=1", r"did you mean llama3_8b"),
        ("nemo llm pretrain --factory 'llama3_8b(num_nodes=2)' data.seq_length=1", "arguments"),
        ("nemo llm finetune --factory llama3_8b data.seq_length=1", "nemo llm finetune"),
        (HEAD + "trainer.plugins.precision=32", r"precision='32'|precision=32"),
        (HEAD + "model.config.num_layers=twelve", r"num_layers"),
    ],
)
def test_bad_lines_say_which_key_and_value(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        d = doc(text)
        parse_plan(d, Path("run.sh"))


def test_the_factory_named_twice_must_agree() -> None:
    with pytest.raises(InputError, match="differs from --nemo-model gemma2_2b"):
        read(HEAD + "data.seq_length=1", nemo_model="gemma2_2b")
    assert read("data.seq_length=2048", nemo_model="gemma2_2b").doc["model"]["name"] == "gemma2-2b"
    with pytest.raises(InputError, match="only for NeMo"):
        read(
            "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8", nemo_model="x"
        )


def test_megatron_lines_are_not_nemo_lines() -> None:
    # pretrain_gpt.py looks dotted but is no NeMo root; a Megatron flag makes a Megatron line
    assert not nemo_args.is_nemo_line(["pretrain_gpt.py", "--num-layers", "2"])
    assert not nemo_args.is_nemo_line(["--num-layers", "2", "model.config.x=1"])
    assert nemo_args.is_nemo_line(
        ["nemo", "llm", "pretrain", "--factory", "x", "data.seq_length=1"]
    )


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.sh"
    path.write_text("trainer.num_nodes=1 trainer.devices=8 data.seq_length=2048 \\\n  log.x=1\n")
    base = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(base, capsys)
    assert code == 2 and "name no model" in err
    code, out, err = run([*base, "--nemo-model", "gemma2_2b", "--verbose"], capsys)
    assert code == 0 and "gemma2-2b on 8 x h100-sxm-80gb" in out
    assert "ignored NeMo overrides (they do not change memory or layout): log.x" in err
    code, _, err = run(["check", "plan.toml", "--nemo-model", "gemma2_2b"], capsys)
    assert code == 2 and "--nemo-model: only with --megatron-args" in err


@pytest.mark.parametrize(
    ("overrides", "graphs"),
    [
        ("model.config.cuda_graph_impl=none", {}),
        ("model.config.cuda_graph_impl=local", {"cuda_graphs": True, "cuda_graph_impl": "local"}),
        # deprecated: local
        ("model.config.enable_cuda_graph=True", {"cuda_graphs": True, "cuda_graph_impl": "local"}),
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
    fused = read(mixtral + on + "model.config.moe_mlp_glu_interleave_size=32", 64)
    assert fused.doc["training"]["moe_fused_grouped_mlp"] is True
    plain = read(mixtral + on, 64)
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


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        # a fuzzer's internal errors: a degree compared as text ('>' of str and int), a vocabulary
        # formatted with ',' before its check
        ("--factory llama31_70b trainer.strategy.tensor_model_parallel_size=x",
         "trainer.strategy.tensor_model_parallel_size='x': expected an integer"),
        ("--factory llama3_8b model.config.vocab_size=abc",
         "model.config.vocab_size='abc': expected a positive integer"),
        ("--factory llama3_8b trainer.plugins.grad_reduce_in_fp32=maybe",
         "trainer.plugins.grad_reduce_in_fp32='maybe': expected True or False"),
    ],
)  # fmt: skip
def test_values_of_the_wrong_kind_are_named(overrides: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        read(f"nemo llm pretrain -y {overrides}", 64)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        # NeMo-Run parse_factory swaps the whole model (nemo_run cli_parser.py): the 70B, which
        # planner sized as the recipe's 8B ("fits")
        ("model=llama3_70b", "model=llama3_70b: the whole model swapped"),
        ("trainer=llama3_70b", "trainer=llama3_70b: the whole trainer swapped"),
        # the operator overrides (cli_parser.py: += -= *= /= |= &=), dropped before
        ("data.seq_length*=2", "data.seq_length*=2: NeMo-Run's operator override"),
        # no root of llm.pretrain: NeMo-Run refuses "No parameter named 'strategy'"
        ("strategy.tensor_model_parallel_size=2", "no parameter 'strategy'"),
        # llm.api._validate_config asserts the batch and the sequence
        ("data.micro_batch_size=None", "data.micro_batch_size=None: NeMo needs a value"),
        # plugins/mixed_precision.py: "Getting conflicting values for fp8_params and
        # fp8_param_gather"
        (
            "trainer.plugins.fp8=hybrid trainer.plugins.fp8_params=True "
            "trainer.plugins.fp8_param_gather=False",
            "conflicts with trainer.plugins.fp8_param_gather",
        ),
    ],
)
def test_what_nemo_run_does_with_a_word_planner_dropped(extra: str, says: str) -> None:
    with pytest.raises(InputError, match=re.escape(says)):
        read(f"{HEAD}{extra}")


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
