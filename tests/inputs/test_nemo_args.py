"""NeMo 2.0 `nemo llm pretrain` lines read by `check --megatron-args` (issue 21): recipe defaults,
each key, the GPU count, the vocabulary, the zoo model of each recipe and shape overrides.

Oracles: NeMo's own definitions, restated by hand in each test (NVIDIA/NeMo 8cfedd72: the recipe
defaults of nemo/collections/llm/recipes/<factory>.py, MegatronStrategy's and TransformerConfig's
field names, llm.api._validate_config), Megatron-LM d98e8a64's CI for the
bare-key = True convention (_run_training.sh), and hand arithmetic for the Gemma 2 2B parameter
count.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from nemo_lines import HEAD, doc, read

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.nemo_recipes import RECIPES
from planner.inputs.plan import parse_plan
from planner.model import params


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
        (  # with the method and layer count TransformerConfig requires beside it
            "model.config.recompute_granularity=full model.config.recompute_method=uniform "
            "model.config.recompute_num_layers=1",
            "parallel",
            "recompute",
            "full",
        ),
        ("model.config.recompute_method=block", "parallel", "recompute_method", "block"),
        ("model.config.recompute_num_layers=2", "parallel", "recompute_num_layers", 2),
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
        doc(HEAD + vpp + " trainer.strategy.pipeline_model_parallel_size=4")["parallel"]["vpp"] == 4
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
    # seq 4096; Gemma2Config's dropouts 0.0 (no masks), gradient_accumulation_fusion False
    # (gemma2.py:114)
    r = read("nemo llm pretrain --factory gemma2_2b trainer.max_steps=1")
    assert r.doc["training"] == {
        "seq_length": 4096,
        "global_batch_size": 32,
        "precision": "bf16",
        "flash_attention": False,
        "fused_swiglu": False,
        "attention_dropout": False,
        "hidden_dropout": False,
        "gradient_accumulation_fusion": False,
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
        HEAD + "trainer.max_steps=50 log.log_dir=/x "
        "model.config.apply_query_key_layer_scaling optim.config.lr=1e-4"
    )
    # apply_query_key_layer_scaling: a Megatron-LM flag its reader ignores (NeMo's TE attention
    # does not read it: megatron_args_memory.softmax_fields)
    assert r.ignored == (
        "log.log_dir",
        "model.config.apply_query_key_layer_scaling",
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
