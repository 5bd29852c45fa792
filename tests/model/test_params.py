"""planner.model.params by hand: tiny GPT, MoE and MLA models, SC21 eq.(2) for the GPT models of
the Megatron papers, the layer split, learned positions and latent MoE.
"""

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
