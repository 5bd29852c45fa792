"""HF config.json -> ModelArch: the spellings and quirks of each family's config (names, rope
fields, head_dim, sparse steps, tied embeddings, activations, what is noted as not modelled).

Oracles: the fixtures of tests/data/hf/ (their provenance in hf_fixtures.py), edited one field at a
time; the transformers config classes' defaults and field meanings named in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_fixtures import fixture, write
from paths import HF

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hf_import import arch_from_hf, load_hf_config
from planner.model import params

# --- quirks


def test_name_from_name_or_path_file_stem_or_directory(tmp_path: Path) -> None:
    assert load_hf_config(HF / "qwen2.5-7b.json").name == "qwen2.5-7b"  # "Qwen/Qwen2.5-7B"
    assert load_hf_config(HF / "llama2-7b.json").name == "llama-2-7b-hf"
    assert load_hf_config(HF / "gpt-neox-20b.json").name == "gpt-neox-20b"
    cfg = fixture("mistral-7b")
    (tmp_path / "Mistral-7B_v0.1").mkdir()
    path = write(tmp_path / "Mistral-7B_v0.1", cfg)
    arch = load_hf_config(path)
    assert arch.name == "mistral-7b-v0.1"
    assert arch.source == f"HF config {path}"
    cfg["_name_or_path"] = "/checkpoints/My Llama/"
    assert arch_from_hf(cfg, path).name == "my-llama"


def test_model_type_when_architectures_is_absent() -> None:
    cfg = fixture("qwen3-30b-a3b")
    del cfg["architectures"]
    assert arch_from_hf(cfg, "x.json") == arch_from_hf(fixture("qwen3-30b-a3b"), "x.json")


def test_rope_parameters_spelling_is_accepted() -> None:
    legacy = fixture("llama3.1-8b")
    new = dict(legacy)
    scaling = new.pop("rope_scaling")
    new["rope_parameters"] = {**scaling, "rope_theta": new.pop("rope_theta")}
    assert arch_from_hf(new, "x.json") == arch_from_hf(legacy, "x.json")
    neox = fixture("gpt-neox-20b")
    del neox["rotary_pct"], neox["rotary_emb_base"]
    neox["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000,
                               "partial_rotary_factor": 0.25}  # fmt: skip
    assert arch_from_hf(neox, "x.json") == arch_from_hf(fixture("gpt-neox-20b"), "x.json")


def test_explicit_head_dim_beside_hidden_over_heads() -> None:
    # Mistral-NeMo-style: 32 heads x 128 != 5120
    cfg = {**fixture("mistral-7b"), "hidden_size": 5120, "head_dim": 128}
    assert arch_from_hf(cfg, "x.json").kv_channels == 128


def test_qwen3_moe_sparse_step_and_mlp_only_layers() -> None:
    cfg = {**fixture("qwen3-30b-a3b"), "num_hidden_layers": 6, "decoder_sparse_step": 2,
           "mlp_only_layers": [5]}  # fmt: skip
    arch = arch_from_hf(cfg, "x.json")
    # layer i is MoE when (i + 1) % 2 == 0 and i is not listed
    assert arch.moe_layer_freq == (0, 1, 0, 1, 0, 0)


def test_deepseek_without_q_lora_or_shared_experts() -> None:
    cfg = {**fixture("deepseek-v3"), "q_lora_rank": None, "n_shared_experts": None}
    arch = arch_from_hf(cfg, "x.json")
    assert arch.q_lora_rank is None
    assert arch.moe_shared_expert_intermediate_size is None


def test_gpt_oss_active_params_as_the_model_card_counts_them() -> None:
    # The gpt-oss model card's 5.13B (120b) and 3.61B (20b) active parameters count the
    # unembedding but not the embedding table; params_active counts both, so the card's figure
    # is params_active less V x h. The 20b zoo entry is the 120b config with 24 layers and 32
    # experts (its published config.json): 20.91B total.
    arch = load_hf_config(HF / "gpt-oss-120b.json")
    embedding = arch.vocab_size * arch.hidden_size
    assert params.params_active(arch) - embedding == pytest.approx(5.13e9, rel=0.002)
    small = catalog.get_model("gpt-oss-20b")
    assert params.params_total(small) == pytest.approx(20.91e9, rel=0.001)
    assert params.params_active(small) - embedding == pytest.approx(3.61e9, rel=0.002)


def test_gpt_oss_notes_what_it_cannot_model() -> None:
    arch = load_hf_config(HF / "gpt-oss-120b.json")
    assert "sliding_window" not in arch.source  # modelled now (test_sliding_window_layers)
    assert "router bias" in arch.source
    # the per-head sinks (HF GptOssAttention.sinks) are modelled: Megatron's learnable softmax
    assert "attention sinks" not in arch.source
    assert arch.softmax_type == "learnable"
    # attention_bias false still leaves the experts' biases: erring high, biases stay on
    cfg = {**fixture("gpt-oss-120b"), "attention_bias": False}
    assert arch_from_hf(cfg, "x.json").add_bias_linear


def test_glm45_air_fields_give_the_air_zoo_entry() -> None:
    # GLM-4.5-Air as Megatron-Bridge's GLM45AirModelProvider106B gives it, in HF spelling: 46
    # layers, the first dense, 128 experts of 1,408, no q/k norm
    air = {
        **fixture("glm4.5-355b-a32b"),
        "num_hidden_layers": 46, "hidden_size": 4096, "intermediate_size": 10944,
        "n_routed_experts": 128, "moe_intermediate_size": 1408, "first_k_dense_replace": 1,
        "use_qk_norm": False, "routed_scaling_factor": 1.0,
    }  # fmt: skip
    ignore = {"name", "source", "display_name"}
    got = arch_from_hf(air, "GLM-4.5-Air.json").model_dump(exclude=ignore)
    assert got == catalog.get_model("glm4.5-air-106b-a12b").model_dump(exclude=ignore)


def test_glm45_notes_partial_rope_and_needs_its_dense_prefix(tmp_path: Path) -> None:
    arch = load_hf_config(HF / "glm4.5-355b-a32b.json")
    assert "partial_rotary_factor" in arch.source
    whole = arch_from_hf({**fixture("glm4.5-355b-a32b"), "partial_rotary_factor": 1.0}, "x.json")
    assert "partial_rotary_factor" not in whole.source
    cfg = fixture("glm4.5-355b-a32b")
    del cfg["first_k_dense_replace"]  # changes the parameter count: required, not defaulted
    with pytest.raises(InputError, match="first_k_dense_replace: required field missing"):
        load_hf_config(write(tmp_path, cfg))


def test_deepseek_without_routing_groups() -> None:
    cfg = fixture("deepseek-v3")
    del cfg["n_group"], cfg["topk_group"]
    arch = arch_from_hf(cfg, "x.json")
    assert (arch.moe_router_num_groups, arch.moe_router_group_topk) == (None, None)


def test_llama_biases_and_tied_embeddings() -> None:
    cfg = {**fixture("llama3.1-8b"), "attention_bias": True, "tie_word_embeddings": True}
    arch = arch_from_hf(cfg, "x.json")
    assert arch.add_bias_linear
    assert not arch.untie_embeddings_and_output_weights


def test_qwen2_small_model_ties_embeddings() -> None:
    cfg = {**fixture("qwen2.5-7b"), "tie_word_embeddings": True}
    assert not arch_from_hf(cfg, "x.json").untie_embeddings_and_output_weights


def test_gpt_neox_untied_by_default_and_gpt2_n_inner() -> None:
    neox = fixture("gpt-neox-20b")
    del neox["tie_word_embeddings"]
    assert arch_from_hf(neox, "x.json").untie_embeddings_and_output_weights
    assert arch_from_hf({**fixture("gpt2"), "n_inner": 1000}, "x.json").ffn_hidden_size == 1000


def test_bloom_176b_spellings() -> None:
    # bigscience/bloom's config.json says n_embed and num_attention_heads
    cfg = {"architectures": ["BloomForCausalLM"], "n_embed": 14336, "n_layer": 70,
           "num_attention_heads": 112, "vocab_size": 250880}  # fmt: skip
    arch = arch_from_hf(cfg, "x.json")
    assert (arch.hidden_size, arch.num_attention_heads, arch.ffn_hidden_size) == (14336, 112, 57344)


def test_opt_word_embed_proj_dim_is_noted() -> None:
    # facebook/opt-350m: 512-wide embeddings projected to hidden 1024
    cfg = {**fixture("opt-175b"), "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24,
           "num_attention_heads": 16, "word_embed_proj_dim": 512}  # fmt: skip
    arch = arch_from_hf(cfg, "x.json")
    assert "word_embed_proj_dim 512 != hidden_size 1024" in arch.source


def test_gelu_on_a_gated_mlp_is_geglu() -> None:
    arch = arch_from_hf({**fixture("llama3.1-8b"), "hidden_act": "gelu_pytorch_tanh"}, "x.json")
    assert (arch.activation, arch.gated_linear_unit) == ("geglu", True)
