"""model_zoo/: every file loads, the required models are there, each names its source, and the
parameter counts are sane.

Oracles: the list of models the planner is asked about by name and the papers' tables they come
from (REQUIRED), the directory listing, and properties every model has (active <= total, equal
for dense models; published counts are checked in tests/model/test_params.py)."""

from __future__ import annotations

import pytest

from planner.inputs.catalog import load_models, zoo_dir
from planner.model import params

ZOO = load_models()

REQUIRED = [
    # models the planner is asked about by name
    "gpt3-175b",
    "llama2-7b",
    "llama2-13b",
    "llama2-70b",
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "deepseek-v3",
    "deepseek-v3.2",  # DeepSeek sparse attention (DeepSeek-V3.2-Exp's config.json)
    "glm-5",  # DeepSeek sparse attention (GlmMoeDsaConfig's GLM-5 defaults)
    "kimi-k2",  # Megatron-Bridge's Kimi K2 performance recipes
    "nemotronh-56b",  # Megatron-Bridge's Nemotron-H 56B performance recipes
    "qwen2.5-7b",
    "qwen2.5-72b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "glm4.5-355b-a32b",  # Megatron-Bridge's GLM-4.5 providers
    "glm4.5-air-106b-a12b",
    "nemotron4-340b",
    "bloom-176b",
    "opt-175b",
    "gpt-neox-20b",
    "mt-nlg-530b",
    # SC21 Table 1 (Narayanan et al. 2021)
    "gpt-sc21-1.7b",
    "gpt-sc21-3.6b",
    "gpt-sc21-7.5b",
    "gpt-sc21-18.4b",
    "gpt-sc21-39.1b",
    "gpt-sc21-76.1b",
    "gpt-sc21-145.6b",
    "gpt-sc21-310.1b",
    "gpt-sc21-529.6b",
    "gpt-sc21-1008b",
    # Korthikanti et al. 2022 Table 3 (vocab 51200, so not gpt3-175b / mt-nlg-530b)
    "gpt-korthikanti-22b",
    "gpt-korthikanti-175b",
    "gpt-korthikanti-530b",
    "gpt-korthikanti-1t",
    # Megatron-Core H100 weak-scaling table
    "gpt-mcore-1.7b",
    "gpt-mcore-7.1b",
    "gpt-mcore-16b",
    "gpt-mcore-32b",
    "gpt-mcore-70b",
    "gpt-mcore-119b",
    "gpt-mcore-177b",
    "gpt-mcore-314b",
    "gpt-mcore-462b",
    # Hagemann et al. 2023
    "hagemann-llama-13b",
    "hagemann-llama-30b",
]


def test_every_file_loads() -> None:
    files = sorted(p.stem for p in zoo_dir().glob("*.toml"))
    assert files == sorted(ZOO)


@pytest.mark.parametrize("name", REQUIRED)
def test_required_model_exists(name: str) -> None:
    assert name in ZOO


@pytest.mark.parametrize("name", sorted(ZOO))
def test_model_is_documented_and_sane(name: str) -> None:
    arch = ZOO[name]
    assert arch.source.strip(), f"{name}: empty source"
    assert arch.display_name.strip(), f"{name}: empty display_name"
    total = params.params_total(arch)
    active = params.params_active(arch)
    assert 0 < active <= total
    if arch.is_moe:
        assert active < total
    else:
        assert active == total
    if arch.gated_linear_unit:
        assert arch.activation in ("swiglu", "geglu", "quick_geglu")


def test_deepseek_v3_layout() -> None:
    arch = ZOO["deepseek-v3"]
    assert arch.moe_layers == [False] * 3 + [True] * 58
    assert arch.padded_vocab(8) == arch.vocab_size == 129280


def test_deepseek_v32_is_v3_with_sparse_attention() -> None:
    # DeepSeek-V3.2-Exp's config.json: DeepSeek-V3's fields plus index_n_heads 64,
    # index_head_dim 128, index_topk 2048; DSA needs no linear biases (absorbed MLA asserts it)
    v32, v3 = ZOO["deepseek-v3.2"], ZOO["deepseek-v3"]
    dsa = {"dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"}
    naming = {"name", "display_name", "source"}
    assert v32.model_dump(exclude=dsa | naming) == v3.model_dump(exclude=dsa | naming)
    assert (v32.dsa_indexer_n_heads, v32.dsa_indexer_head_dim, v32.dsa_indexer_topk) == (
        64,
        128,
        2048,
    )
    assert v32.has_dsa and not v3.has_dsa and not v32.add_bias_linear


def test_glm5_parameters_by_hand() -> None:
    # GLM-5's shapes (model_zoo/glm-5.toml; GlmMoeDsaConfig's defaults), counted by hand:
    # MLA: q 6144 x 2048 + 2048 x 64 x (192 + 64) + 2048 (its latent norm) = 46,139,392;
    # kv 6144 x (512 + 64) + 512 x 64 x (192 + 256) + 512 = 18,219,520; out 64 x 256 x 6144 =
    # 100,663,296; the indexer 2048 x 32 x 128 + 6144 x 128 + 2 x 128 + 6144 x 32 = 9,371,904:
    # 174,394,112 a layer, with its two norms 12,288. Dense MLP 3 x 6144 x 12288 = 226,492,416;
    # an expert 3 x 6144 x 2048 = 37,748,736, 256 routed and one shared, the router 256 x 6144:
    # 3 dense layers x 400,898,816 + 75 MoE layers x 9,877,404,416 + untied embeddings
    # 2 x 154,880 x 6,144 + the final norm 6,144 = 743,911,199,232 (Z.ai's "744B")
    arch = ZOO["glm-5"]
    assert params.params_total(arch) == 743_911_199_232
    assert arch.has_dsa and arch.moe_layers == [False] * 3 + [True] * 75


def test_gemma2_slides_on_every_other_layer() -> None:
    """Gemma 2 attends over a 4,096-token window on every other layer, the first included (HF
    sliding_window 4096; NeMo Gemma2Config window_size (4096, 0)): the zoo's 2B spells it as
    planner's HF importer reads a Gemma 2 config (tests/data/hf/gemma-2-9b.json: the same
    family default), Megatron's left window 4095 with window_attn_skip_freq 2. It was missing,
    and the 2B attended in full."""
    from paths import HF

    from planner.inputs.hf_import import load_hf_config

    two_b = load_models(zoo_dir())["gemma2-2b"]
    nine_b = load_hf_config(HF / "gemma-2-9b.json")
    assert (two_b.window_size, two_b.window_attn_skip_freq) == (4095, 2)
    assert (nine_b.window_size, nine_b.window_attn_skip_freq) == (4095, 2)
