"""planner.model.params against three oracles: hand arithmetic on tiny models, SC21 eq.(2) for the
GPT models of the Megatron papers, and the parameter counts the model authors published."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from planner.inputs.arch import ModelArch
from planner.inputs.catalog import load_models
from planner.model import params

ZOO = load_models()


def _tiny(**fields: Any) -> ModelArch:
    return ModelArch.model_validate({"name": "tiny", **fields})


# --- hand arithmetic ---------------------------------------------------------------------------

# GPT-style: LayerNorm, biases, gelu 4h-ish MLP, learned positions, tied embeddings, GQA.
# h = 8, a = 4 heads, n_q = 2 groups, d_h = 8/4 = 2 -> Q = a*d_h = 8, K+V = 2*n_q*d_h = 8.
TINY_GPT = {
    "num_layers": 2,
    "hidden_size": 8,
    "ffn_hidden_size": 16,
    "num_attention_heads": 4,
    "num_query_groups": 2,
    "vocab_size": 10,
    "max_position_embeddings": 6,
    "activation": "gelu",
    "normalization": "LayerNorm",
    "add_bias_linear": True,
    "position_embedding_type": "learned_absolute",
}


def test_tiny_gpt_by_hand() -> None:
    arch = _tiny(**TINY_GPT)
    # attention: QKV 8*(8+8) = 128 + bias 16; proj 8*8 = 64 + bias 8          -> 216
    assert params.attention_params(arch) == 216
    # MLP: fc1 8*16 = 128 + bias 16; fc2 16*8 = 128 + bias 8                  -> 280
    assert params.dense_mlp_params(arch) == 280
    # two LayerNorms, weight + bias: 2 * 2 * 8                                -> 32
    assert params.layer_norm_params(arch) == 32
    # one layer 216 + 280 + 32 = 528, no experts
    assert params.layer_params(arch, 0) == (528, 0)
    assert params.layer_params(arch, 1) == (528, 0)
    # embedding: words 10*8 = 80 + positions 6*8 = 48                         -> 128
    assert params.embedding_params(arch) == 128
    # tied output: 0; final LayerNorm 2*8 = 16
    assert params.output_params(arch) == 0
    assert params.final_norm_params(arch) == 16
    # total 2*528 + 128 + 16 = 1200; dense, so active == total
    assert params.params_total(arch) == 1200
    assert params.params_active(arch) == 1200
    # MoE-only helpers are zero for a dense model
    assert params.expert_params(arch) == 0
    assert params.shared_expert_params(arch) == 0
    assert params.router_params(arch) == 0
    assert params.mtp_params(arch) == 0
    # padded vocab is passed explicitly: 10 -> 128 rows at divisible-by 128, 128*8 + 48 = 1072
    assert params.embedding_params(arch, arch.padded_vocab()) == 1072
    with pytest.raises(IndexError):
        params.layer_params(arch, 2)


# Llama/Qwen3-style MoE: RMSNorm, SwiGLU, no linear biases but a QKV bias, q/k norm, untied.
# h = 8, a = 2 heads of d_h = 4 (Q = 8), n_q = 1 (K+V = 8); layer 0 dense, layers 1-2 MoE with
# E = 4 experts of width 6 (top-2) and shared experts of total width 10; one MTP layer.
TINY_MOE = {
    "num_layers": 3,
    "hidden_size": 8,
    "ffn_hidden_size": 12,
    "num_attention_heads": 2,
    "num_query_groups": 1,
    "kv_channels": 4,
    "vocab_size": 20,
    "gated_linear_unit": True,
    "activation": "swiglu",
    "normalization": "RMSNorm",
    "add_bias_linear": False,
    "add_qkv_bias": True,
    "qk_layernorm": True,
    "untie_embeddings_and_output_weights": True,
    "num_moe_experts": 4,
    "moe_router_topk": 2,
    "moe_ffn_hidden_size": 6,
    "moe_shared_expert_intermediate_size": 10,
    "moe_layer_freq": [0, 1, 1],
    "mtp_num_layers": 1,
}


def test_tiny_moe_by_hand() -> None:
    arch = _tiny(**TINY_MOE)
    # attention: QKV 8*16 = 128 + QKV bias 16; proj 8*8 = 64; q/k RMSNorm 2*4 = 8 -> 216
    assert params.attention_params(arch) == 216
    # dense SwiGLU: 3*8*12 = 288; one expert 3*8*6 = 144; shared 3*8*10 = 240; router 8*4 = 32
    assert params.dense_mlp_params(arch) == 288
    assert params.expert_params(arch) == 144
    assert params.shared_expert_params(arch) == 240
    assert params.router_params(arch) == 32
    # two RMSNorms: 2*8 = 16
    assert params.layer_norm_params(arch) == 16
    # dense layer: 216 + 16 + 288 = 520
    assert params.layer_params(arch, 0) == (520, 0)
    # MoE layer: non-expert 216 + 16 + 32 + 240 = 504; experts 4*144 = 576
    assert params.layer_params(arch, 1) == (504, 576)
    assert params.layer_params(arch, 2) == (504, 576)
    # embedding 20*8 = 160 (rope: no positions); untied output 160; final RMSNorm 8
    assert params.embedding_params(arch) == 160
    assert params.output_params(arch) == 160
    assert params.final_norm_params(arch) == 8
    # total 328 + 520 + 2*(504 + 576) = 3008
    assert params.params_total(arch) == 3008
    # active 328 + 520 + 2*(504 + 2*144) = 2432
    assert params.params_active(arch) == 2432
    # MTP: 3 norms 3*8 = 24 + eh_proj 2*8*8 = 128 + an MoE layer (504, 576): (656, 576) -> 1232
    assert params.mtp_layer_params(arch) == (656, 576)
    assert params.mtp_params(arch) == 1232


# MLA: h = 8, a = 2, r_q = 4, r_kv = 3, d_qk = 2, d_r = 1, d_v = 2, RMSNorm latent norms.
TINY_MLA = {
    "num_layers": 1,
    "hidden_size": 8,
    "ffn_hidden_size": 12,
    "num_attention_heads": 2,
    "vocab_size": 20,
    "gated_linear_unit": True,
    "activation": "swiglu",
    "normalization": "RMSNorm",
    "add_bias_linear": False,
    "qk_layernorm": True,
    "multi_latent_attention": True,
    "q_lora_rank": 4,
    "kv_lora_rank": 3,
    "qk_head_dim": 2,
    "qk_pos_emb_head_dim": 1,
    "v_head_dim": 2,
}


def test_tiny_mla_by_hand() -> None:
    arch = _tiny(**TINY_MLA)
    # q: down 8*4 = 32 + up 4*2*(2+1) = 24 + norm 4                  -> 60
    # kv: down 8*(3+1) = 32 + up 3*2*(2+2) = 24 + norm 3            -> 59
    # proj: 2*2*8 = 32                                               -> 151
    # (ecosystem.md 1.4: 4*(8+6+1) + 3*(8+8+1) + 8*1 + 2*2*8 = 60 + 51 + 8 + 32 = 151)
    assert params.attention_params(arch) == 151
    # without q-LoRA: q = 8*2*(2+1) = 48 -> 48 + 59 + 32 = 139
    assert params.attention_params(_tiny(**{**TINY_MLA, "q_lora_rank": None})) == 139
    # without --qk-layernorm the two latent norms (4 + 3) go away
    assert params.attention_params(_tiny(**{**TINY_MLA, "qk_layernorm": False})) == 144


# --- SC21 eq.(2) -------------------------------------------------------------------------------

SC21_GPT = [n for n in ZOO if n.startswith(("gpt-sc21-", "gpt-korthikanti-"))]


@pytest.mark.parametrize("name", SC21_GPT)
def test_sc21_eq2(name: str) -> None:
    # Narayanan et al. 2021 (arXiv:2104.04473) eq.(2), with l = n_l layers:
    #   P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
    # It counts per layer 12h^2 + 13h (QKV/proj/fc1/fc2 weights and biases, two LayerNorms) plus
    # a tied V x h embedding and s x h learned positions; it leaves out only the final LayerNorm
    # (2h), so our count is eq.(2) + 2h exactly (a relative difference below 1e-7).
    arch = ZOO[name]
    n_l, h, v = arch.num_layers, arch.hidden_size, arch.vocab_size
    s = arch.max_position_embeddings
    assert s is not None
    eq2 = 12 * n_l * h**2 * (1 + 13 / (12 * h) + (v + s) / (12 * n_l * h))
    total = params.params_total(arch)
    assert total == pytest.approx(eq2, rel=1e-3)
    assert total == 12 * n_l * h * h + 13 * n_l * h + (v + s) * h + 2 * h


# SC21 Table 1 "number of parameters (billion)" column; our counts round to it.
SC21_TABLE1 = {
    "gpt-sc21-1.7b": 1.7,
    "gpt-sc21-3.6b": 3.6,
    "gpt-sc21-7.5b": 7.5,
    "gpt-sc21-18.4b": 18.4,
    "gpt-sc21-39.1b": 39.1,
    "gpt-sc21-76.1b": 76.1,
    "gpt-sc21-145.6b": 145.6,
    "gpt-sc21-310.1b": 310.1,
    "gpt-sc21-529.6b": 529.6,
    "gpt-sc21-1008b": 1008.0,
}


@pytest.mark.parametrize(("name", "billions"), SC21_TABLE1.items())
def test_sc21_table1_params(name: str, billions: float) -> None:
    assert round(params.params_total(ZOO[name]) / 1e9, 1) == billions


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


def test_layer_split_sums_to_total() -> None:
    for arch in ZOO.values():
        layers = sum(sum(params.layer_params(arch, i)) for i in range(arch.num_layers))
        outside = (
            params.embedding_params(arch)
            + params.output_params(arch)
            + params.final_norm_params(arch)
        )
        assert layers + outside == params.params_total(arch), arch.name


def test_learned_positions_need_a_length() -> None:
    # ModelArch refuses learned positions without a length (validated at the boundary)
    with pytest.raises(ValidationError, match="max_position_embeddings"):
        _tiny(**{**TINY_GPT, "max_position_embeddings": None})
    # seq_length stands in when max_position_embeddings is not given
    arch = _tiny(**{**TINY_GPT, "max_position_embeddings": None, "seq_length": 6})
    assert params.embedding_params(arch) == 128


def test_latent_moe_by_hand() -> None:
    # TINY_MOE with a latent width L = 4 (Megatron --moe-latent-size; moe_layer.py fc1_latent_proj
    # h -> L and fc2_latent_proj L -> h, no biases here): one routed expert is a SwiGLU MLP at
    # L: 3*4*6 = 72 (144 at h = 8); the projections 2*8*4 = 64 per MoE layer; the router (8*4)
    # and shared experts (3*8*10) stay at h. The same terms as Megatron-LM's own
    # theoretical_memory_usage.py (routed_expert_params at moe_latent_size,
    # latent_projection_params 2 * h * L)
    arch = _tiny(**{**TINY_MOE, "moe_latent_size": 4})
    assert arch.expert_hidden == 4
    assert params.expert_params(arch) == 72
    assert params.latent_projection_params(arch) == 64
    # MoE layer: non-expert 504 + 64 = 568; experts 4*72 = 288
    assert params.layer_params(arch, 1) == (568, 288)
    # total 328 + 520 + 2*(568 + 288) = 2560; active 328 + 520 + 2*(568 + 2*72) = 2272
    assert params.params_total(arch) == 2560
    assert params.params_active(arch) == 2272
    with pytest.raises(ValidationError, match="moe_latent_size needs num_moe_experts"):
        _tiny(**TINY_GPT, moe_latent_size=4)  # a dense model has no experts to project for
