"""HF config.json -> ModelArch: every fixture maps to the expected Megatron fields and parameter
counts.

Oracles: the fixtures of tests/data/hf/ (their provenance in hf_fixtures.py); the expected Megatron
fields follow Megatron-LM's example scripts (and the team's notes on mapping HF fields to them);
parameter counts are the published totals (Hugging Face `model.num_parameters()` where an exact
figure is quoted, the model card otherwise); the zoo entries describing the same checkpoints; hand
arithmetic in comments.
"""

from __future__ import annotations

import pytest
from hf_fixtures import EXPECTED, fixture
from paths import HF

from planner.inputs import catalog
from planner.inputs.hf_import import SUPPORTED, load_hf_config
from planner.model import params


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.stem for p in HF.glob("*.json")) == sorted(EXPECTED)


def test_every_supported_architecture_has_a_fixture() -> None:
    archs = {fixture(name)["architectures"][0] for name in EXPECTED}
    assert archs == set(SUPPORTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_maps_to_megatron_fields(name: str) -> None:
    arch = load_hf_config(HF / f"{name}.json")
    got = {field: getattr(arch, field) for field in EXPECTED[name]}
    assert got == EXPECTED[name]
    assert arch.source.startswith(f"HF config {HF / name}.json")


def test_moe_layer_pattern() -> None:
    qwen = load_hf_config(HF / "qwen3-30b-a3b.json")
    assert qwen.num_moe_layers == 48
    dsv3 = load_hf_config(HF / "deepseek-v3.json")
    assert dsv3.moe_layers[:3] == [False] * 3
    assert dsv3.num_moe_layers == 58


# --- the llama3.1-8b fixture is the zoo's llama3.1-8b


def test_llama31_8b_fixture_equals_zoo_model() -> None:
    ignore = {"name", "source", "display_name"}
    imported = load_hf_config(HF / "llama3.1-8b.json").model_dump(exclude=ignore)
    assert imported == catalog.get_model("llama3.1-8b").model_dump(exclude=ignore)


def test_llama31_8b_fixture_params_equal_zoo_model() -> None:
    # both are the released checkpoint's 8,030,261,248 parameters (HF num_parameters())
    imported = load_hf_config(HF / "llama3.1-8b.json")
    assert params.params_total(imported) == 8_030_261_248
    assert params.params_total(catalog.get_model("llama3.1-8b")) == 8_030_261_248


# fixture -> zoo entry describing the same checkpoint (tests/test_zoo.py requires each one)
SAME_AS_ZOO = {
    "llama2-7b": "llama2-7b",
    "mixtral-8x7b": "mixtral-8x7b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b",
    "qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
    "deepseek-v3": "deepseek-v3",
    "deepseek-v3.2-exp": "deepseek-v3.2",
    "glm-5": "glm-5",
    "deepseek-v2": "deepseek-v2",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "gpt-oss-120b": "gpt-oss-120b",
    "gpt-neox-20b": "gpt-neox-20b",
    "opt-175b": "opt-175b",
    "nemotron-4-340b": "nemotron4-340b",
    "glm4.5-355b-a32b": "glm4.5-355b-a32b",
}


@pytest.mark.parametrize("name", sorted(SAME_AS_ZOO))
def test_fixture_params_equal_zoo_entry(name: str) -> None:
    imported = load_hf_config(HF / f"{name}.json")
    zoo = catalog.get_model(SAME_AS_ZOO[name])
    assert params.params_total(imported) == params.params_total(zoo)
    assert params.params_active(imported) == params.params_active(zoo)


# Exact: Hugging Face `num_parameters()` of the released checkpoints (tied weights counted once).
EXACT_PARAMS = {
    "gpt2": 124_439_808,
    "llama2-7b": 6_738_415_616,
    "llama3.1-8b": 8_030_261_248,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
}

# Approximate (model cards / papers, rounded): (total, active, relative tolerance).
# BLOOM's embedding LayerNorm (2h) and OPT's 2 extra position rows have no ModelArch field.
ROUGH_PARAMS = {
    "qwen2.5-7b": (7.61e9, None, 0.002),
    "qwen3-32b": (32.8e9, None, 0.002),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, 0.02),
    "deepseek-v3": (671e9, 37e9, 0.02),  # main model, MTP excluded, as DeepSeek reports
    "deepseek-v2": (236e9, None, 0.002),  # arXiv:2405.04434 abstract; active: test_params.py
    "deepseek-v2-lite": (15.7e9, None, 0.002),  # HF card deepseek-ai/DeepSeek-V2-Lite
    "gpt-oss-120b": (116.83e9, None, 0.001),  # model card; active: test_gpt_oss_active_params
    "gpt-neox-20b": (20.55e9, None, 0.002),
    "bloom-560m": (559.2e6, None, 0.002),
    "opt-175b": (175e9, None, 0.005),
    "nemotron-4-340b": (340e9, None, 0.005),
    "phi-4": (14.7e9, None, 0.005),  # HF card microsoft/phi-4: 14.7B
    "smollm3-3b": (3.08e9, None, 0.005),  # HF card HuggingFaceTB/SmolLM3-3B: 3.08B
    "seed-oss-36b": (36e9, None, 0.01),  # ByteDance-Seed/Seed-OSS-36B-Base: 36B
    # OLMoE paper (arXiv:2409.02060) Table 1: 6.9B total, 1.3B active (embeddings counted)
    "olmoe-1b-7b": (6.9e9, 1.3e9, 0.02),
    # HF card google/gemma-2-9b: 9.24B; the 2 x 42 x 3,584 extra norm weights are not counted
    "gemma-2-9b": (9.24e9, None, 0.001),
    # Qwen's README: "14.3B parameters in total and 2.7B activated parameters during runtime"
    # (embeddings counted); the Open LLM leaderboard's request file: "params": 14.316
    "qwen1.5-moe-a2.7b": (14.316e9, 2.7e9, 0.02),
    # databricks/dbrx MODEL_CARD_dbrx_instruct.md @0edd966: "132B total parameters of which 36B
    # parameters are active on any input" (rounded: 1%, 2%)
    "dbrx-instruct": (132e9, 36e9, 0.02),
}


def test_gemma3_and_olmo2_by_hand() -> None:
    """Gemma 3 1B: tied table 262,144 x 1,152 = 301,989,888; a layer's q 1,152 x 1,024 and o
    1,024 x 1,152 (1,179,648 each), k and v 1,152 x 256 (294,912 each), MLP 3 x 1,152 x 6,912
    = 23,887,872, two norms 2,304 and q/k norms 2 x 256: 26,839,808, x 26 = 697,835,008, the
    final norm 1,152: 999,826,048 (its two extra norms a layer, 59,904, make the checkpoint's
    999,885,952). OLMo 2 13B: untied tables 2 x 100,352 x 5,120 = 1,027,604,480; a layer's
    attention 4 x 5,120^2 = 104,857,600, MLP 3 x 5,120 x 13,824 = 212,336,640, norms 10,240 +
    2 x 128: 317,204,736, x 40 = 12,688,189,440, the final norm 5,120: 13,715,799,040 (its q/k
    norms span whole projections: 399,360 more), the card's 13.7B."""
    gemma = load_hf_config(HF / "gemma-3-1b.json")
    assert params.params_total(gemma) == 999_826_048
    olmo = load_hf_config(HF / "olmo-2-13b.json")
    assert params.params_total(olmo) == 13_715_799_040


@pytest.mark.parametrize("name", sorted(EXACT_PARAMS))
def test_published_exact_parameter_count(name: str) -> None:
    assert params.params_total(load_hf_config(HF / f"{name}.json")) == EXACT_PARAMS[name]


@pytest.mark.parametrize("name", sorted(ROUGH_PARAMS))
def test_published_rough_parameter_count(name: str) -> None:
    arch = load_hf_config(HF / f"{name}.json")
    total, active, rel = ROUGH_PARAMS[name]
    assert params.params_total(arch) == pytest.approx(total, rel=rel)
    if active is not None:
        assert params.params_active(arch) == pytest.approx(active, rel=rel)
