"""planner.model.params against the parameter counts the model authors published (totals,
exact and active counts, DeepSeek's and GLM-4.5's figures, DeepSeek-V3's MTP layer).
"""

from __future__ import annotations

import pytest

from planner.inputs.catalog import load_models
from planner.model import params

ZOO = load_models()


# --- published totals --------------------------------------------------------------------------

# (zoo name, published total, published active or None, tolerance); the source is on the line above
PUBLISHED: list[tuple[str, float, float | None, float]] = [
    # Llama 3.1 paper arXiv:2407.21783 / HF model card: 405B (HF safetensors 405.85B)
    ("llama3.1-405b", 405.8e9, None, 0.015),
    # HF model card meta-llama/Llama-3.1-8B: 8.03B
    ("llama3.1-8b", 8.03e9, None, 0.015),
    # HF model card meta-llama/Llama-3.1-70B: 70.6B
    ("llama3.1-70b", 70.6e9, None, 0.015),
    # HF model card meta-llama/Llama-2-7b-hf: 6.74B
    ("llama2-7b", 6.74e9, None, 0.015),
    # HF model card meta-llama/Llama-2-70b-hf: 68.98B
    ("llama2-70b", 68.98e9, None, 0.015),
    # Mixtral paper arXiv:2401.04088 / HF card: 46.7B total, 12.9B active
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.015),
    # Mistral AI Mixtral 8x22B release: 141B total, 39B active
    ("mixtral-8x22b", 141e9, 39e9, 0.015),
    # DeepSeek-V3 report arXiv:2412.19437: 671B total, 37B active. Our active count (37.55B) puts
    # the input embedding and output layer in "active"; it sits 1.49% above the rounded 37B.
    ("deepseek-v3", 671e9, 37e9, 0.015),
    # HF model card moonshotai/Kimi-K2-Instruct ("Model Summary"): 1T total, 32B activated, both
    # rounded to one significant figure; ours 1.026T and 32.86B (the embedding and output layer
    # in "active", as for DeepSeek-V3), 2.6% and 2.7% above them, hence 3%
    ("kimi-k2", 1e12, 32e9, 0.03),
    # Nemotron-H report arXiv:2504.03624 / HF card nvidia/Nemotron-H-56B-Base-8K: 56B (dense)
    ("nemotronh-56b", 56e9, None, 0.015),
    # Qwen3 report arXiv:2505.09388 / HF card Qwen/Qwen3-235B-A22B: 235B total, 22B active
    ("qwen3-235b-a22b", 235e9, 22e9, 0.015),
    # HF card Qwen/Qwen3-30B-A3B: 30.5B total, 3.3B active. 3.3B is 3,353,032,704 cut to two
    # digits (1.6% above 3.3B; the exact count is checked in test_exact_counts), hence 2%.
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02),
    # GPT-3 paper arXiv:2005.14165 Table 2.1: 175.0B
    ("gpt3-175b", 175e9, None, 0.015),
    # Nemotron-4 340B report arXiv:2406.11704: 340B
    ("nemotron4-340b", 340e9, None, 0.015),
    # BLOOM paper arXiv:2211.05100 / HF card bigscience/bloom: 176B
    ("bloom-176b", 176e9, None, 0.015),
    # OPT paper arXiv:2205.01068 Table 1: 175B
    ("opt-175b", 175e9, None, 0.015),
    # GPT-NeoX-20B paper arXiv:2204.06745: 20.6B
    ("gpt-neox-20b", 20.6e9, None, 0.015),
    # Hagemann et al. 2023, arXiv:2311.05610, sweep data (derivation: benchmarks/data/
    # hagemann_layouts.md): N = 13.9985B implied by the MFU columns for llama-13b, 128k vocab
    ("hagemann-llama-13b", 13.9985e9, None, 0.015),
    # the same source: the 30B's implied N is 33.768B (our nominal ffn 17920 gives 0.12% more)
    ("hagemann-llama-30b", 33.768e9, None, 0.015),
]


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [("nemotron3-super-120b-a12b", 120e9, 12e9), ("nemotron3-ultra-550b-a55b", 550e9, 55e9)],
)
def test_latent_moe_models_match_their_names(name: str, total: float, active: float) -> None:
    # The names' totals to 1%, and the names' active counts between ours without the embedding
    # and output layer (the 2 x V x h every token also touches) and ours with them. Counting the
    # routed experts at the full hidden size (without moe_latent_size) gives 459B / 27B for Super
    # and 2,094B / 121B for Ultra: the latent width is what makes the names.
    arch = ZOO[name]
    assert params.params_total(arch) == pytest.approx(total, rel=0.01)
    with_edges = params.params_active(arch)
    without = with_edges - params.embedding_params(arch) - params.output_params(arch)
    assert without <= active <= with_edges


# DeepSeek's published (total, activated) parameters. Totals: V3 671.03B (ours, MTP excluded),
# V2 235.74B against 236B, V2-Lite 15.706B against 15.7B. "Activated", one convention for all
# three: everything a token runs through except the input embedding (a table look-up, no
# matmul), the output layer included. Ours less embedding_params: V3 36.63B against 37B (-1.0%),
# V2 20.85B against 21B (-0.7%), V2-Lite 2.451B against 2.4B (+2.1%); each figure is rounded to
# two or three digits ("2.4B" is 2.35-2.45B), hence 2.5%.
DEEPSEEK_PUBLISHED = [
    ("deepseek-v3", 671e9, 37e9),  # arXiv:2412.19437 abstract
    ("deepseek-v2", 236e9, 21e9),  # arXiv:2405.04434 abstract
    ("deepseek-v2-lite", 15.7e9, 2.4e9),  # HF card deepseek-ai/DeepSeek-V2-Lite
]


# GLM-4.5 by hand (Megatron-Bridge's GLM45ModelProvider355B / GLM45AirModelProvider106B): per
# layer, attention h x 96 x 128 (q) + 2 x h x 8 x 128 (k, v) + 96 x 128 x h (o) + the q/k/v biases
# (12,288 + 2,048) + q/k norms (2 x 128, the 355B only) + its norm (h); a dense MLP 3 x h x ffn + h;
# an MoE MLP E x 3 x h x 1,536 (1,408) + one shared expert of that width + the router (E x h) +
# h; plus embedding and output layer 2 x 151,552 x h and the final norm h. 355B: 3 dense + 89 MoE
# layers (h 5,120, ffn 12,288, E 160) = 352,797,814,784; Air: 1 dense + 45 MoE (h 4,096, ffn
# 10,944, E 128) = 106,852,245,504. Active: the same with 8 of the E experts. The MTP layer is
# left out, as DeepSeek-V3's 671B leaves it out.
GLM45 = [
    ("glm4.5-355b-a32b", 352_797_814_784, 33_632_251_904, 355e9, 32e9),
    ("glm4.5-air-106b-a12b", 106_852_245_504, 13_424_123_904, 106e9, 12e9),
]


@pytest.mark.parametrize(("name", "total", "active", "card_total", "card_active"), GLM45)
def test_glm45_parameters(
    name: str, total: int, active: int, card_total: float, card_active: float
) -> None:
    arch = ZOO[name]
    assert params.params_total(arch) == total
    assert params.params_active(arch) == active
    # Z.ai's model card (zai-org/GLM-4.5, as Megatron-Bridge's docs/models/llm/glm45.md quotes
    # it): 355B / 32B and 106B / 12B, rounded to the billion. The totals sit within 1% of them
    # (the 355B's 352.8B without its 4.0B MTP layer, 356.8B with it: either within 0.7%); the
    # active counts without the embedding and output layer (2 x V x h) within half a billion
    assert total == pytest.approx(card_total, rel=0.01)
    assert abs(active - 2 * params.embedding_params(arch) - card_active) < 0.5e9


@pytest.mark.parametrize(("name", "total", "activated"), DEEPSEEK_PUBLISHED)
def test_deepseek_published_parameters(name: str, total: float, activated: float) -> None:
    arch = ZOO[name]
    assert params.params_total(arch) == pytest.approx(total, rel=0.005)
    ours = params.params_active(arch) - params.embedding_params(arch)
    assert ours == pytest.approx(activated, rel=0.025)


@pytest.mark.parametrize(("name", "total", "active", "tol"), PUBLISHED)
def test_published_totals(name: str, total: float, active: float | None, tol: float) -> None:
    arch = ZOO[name]
    assert params.params_total(arch) == pytest.approx(total, rel=tol)
    expected_active = total if active is None else active
    assert params.params_active(arch) == pytest.approx(expected_active, rel=tol)


# Exact counts of the released checkpoints (HF safetensors metadata shown on the model cards, and
# the model cards' own figures where they print one). Each line says what the architecture does
# not describe, if anything.
EXACT = [
    ("llama3.1-8b", 8_030_261_248),  # HF meta-llama/Llama-3.1-8B
    ("llama3.1-70b", 70_553_706_496),  # HF meta-llama/Llama-3.1-70B
    ("llama3.1-405b", 405_853_388_800),  # HF meta-llama/Llama-3.1-405B
    ("mixtral-8x7b", 46_702_792_704),  # HF mistralai/Mixtral-8x7B-v0.1
    ("qwen3-30b-a3b", 30_532_122_624),  # HF Qwen/Qwen3-30B-A3B
    ("qwen3-235b-a22b", 235_093_634_560),  # HF Qwen/Qwen3-235B-A22B
    ("gpt-neox-20b", 20_554_567_680),  # HF card EleutherAI/gpt-neox-20b
    # HF card bigscience/bloom: 176,247,271,424, including the embedding LayerNorm (2 x 14336),
    # which Megatron-Core has no field for
    ("bloom-176b", 176_247_271_424 - 2 * 14336),
    # DeepSeek-V3 main model 671,026,419,200 (HF checkpoint without layer 61, the MTP layer),
    # including the router's expert-bias vectors (58 MoE layers x 256), a buffer in Megatron
    ("deepseek-v3", 671_026_419_200 - 58 * 256),
]


@pytest.mark.parametrize(("name", "count"), EXACT)
def test_exact_counts(name: str, count: int) -> None:
    assert params.params_total(ZOO[name]) == count


def test_exact_active_counts() -> None:
    # top-2 of 8 Mixtral experts: 12,879,925,248 (the HF card's "12.9B"); Qwen3 235B-A22B and
    # 30B-A3B with top-8 of 128: 22,190,763,520 and 3,353,032,704 ("22B", "3.3B")
    assert params.params_active(ZOO["mixtral-8x7b"]) == 12_879_925_248
    assert params.params_active(ZOO["qwen3-235b-a22b"]) == 22_190_763_520
    assert params.params_active(ZOO["qwen3-30b-a3b"]) == 3_353_032_704


def test_deepseek_v3_mtp() -> None:
    # DeepSeek-V3 model card: 685B on the hub = 671B main model + 14B MTP module, where the MTP
    # module's 14B includes its own copies of the embedding and output layer (2 x 129280 x 7168).
    arch = ZOO["deepseek-v3"]
    mtp = params.mtp_params(arch)
    shared = params.embedding_params(arch) + params.output_params(arch)
    assert mtp + shared == pytest.approx(14e9, rel=0.05)
    assert params.params_total(arch) + mtp + shared == pytest.approx(685e9, rel=0.015)
    # the MTP layer is an MoE layer: its routed experts are 256 x 3 x 7168 x 2048
    assert params.mtp_layer_params(arch)[1] == 256 * 3 * 7168 * 2048
