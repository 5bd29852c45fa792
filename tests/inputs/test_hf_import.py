"""HF config.json -> ModelArch.

Oracles: the fixtures in tests/data/hf/ are the published config.json files (but
glm4.5-355b-a32b.json, composed: Megatron-Bridge's GLM45ModelProvider355B values @5f28ae82 in the
field names of transformers 4.57.1's Glm4MoeConfig, no published file being in reach;
qwen3-next-80b-a3b.json, composed: the fields the Qwen/Qwen3-Next-80B-A3B-Instruct card's config
shows, the rest transformers' Qwen3NextConfig defaults, which are that model's; and
qwen3.5-397b-a17b.json, composed: Megatron-Bridge 067f987d's Qwen35VLMoEModelProvider defaults
for Qwen3.5-397B-A17B in the field names of transformers' Qwen3_5MoeTextConfig; qwen3.5-9b.json,
composed: transformers' Qwen3_5TextConfig defaults, which its docstring calls the Qwen3.5-9B style
configuration, with layer_types spelt out; qwen3.6-27b.json, the Qwen/Qwen3.6-27B config.json
as a QA pass copied it (2026-12-07; no pinned revision); deepseek-v3.2-exp.json, composed:
deepseek-v3.json with the architecture, model_type and index_n_heads 64 / index_head_dim 128 /
index_topk 2048 of the deepseek-ai/DeepSeek-V3.2-Exp card's config.json, whose other fields are
DeepSeek-V3's;
glm-5.json, composed: GlmMoeDsaConfig's defaults, which its docstring gives as GLM-5's
(PrimeIntellect-ai/prime-rl @ 0030893e configuration_glm_moe_dsa.py), in config.json's field
names; and seven configs read from copies of the published files, none at a pinned revision of
the original repository (shapes unchanged; whitespace compacted): phi-4.json from
Gunulhona/phi4-backup (_name_or_path microsoft/phi-4), gemma-2-9b.json from
thejaminator/gemma-hook-layer-0-step-2000 ("Copy config.json from google/gemma-2-9b-it"),
olmoe-1b-7b.json from a fine-tune of allenai/OLMoE-1B-7B-0924-Instruct, smollm3-3b.json from
fetchwiki/HuggingFaceTB-SmolLM3-3B @ 24f7882f, seed-oss-36b.json from a Seed-OSS-36B
derivative (darkc0de/4.3test2), minimax-m2.7.json from amd/MiniMax-M2.7-BF16 and
granite-3.0-3b-a800m.json from ibm-granite/granite-3.0-3b-a800m-instruct; dbrx-instruct.json
from SinclairSchneider/dbrx-instruct-quantization-fixed @731fe61 (no quantization block; the
shape of two other copies), qwen1.5-moe-a2.7b.json from a fine-tune whose _name_or_path is
Qwen/Qwen1.5-MoE-A2.7B); and three from ai-dynamo/aiconfigurator's copies of the published
files (auto_map dropped; Nemotron-H 56B's time_step_limit [0, Infinity] as [0, null]):
nemotron-3-nano-30b-a3b.json and nemotron-h-56b.json @ 0b077da5
(aic-core/src/aiconfigurator_core/model_configs/nvidia--*_config.json), glm-4.7-flash.json
@ 19d098ad (src/aiconfigurator/model_configs/zai-org--GLM-4.7-Flash_config.json, a trimmed
copy: no attention_bias, no num_nextn_predict_layers); llama4-scout-17b-16e.json and
llama4-maverick-17b-128e.json from the same repository @ 095f58a5
(aic-core/src/aiconfigurator_core/model_configs/meta-llama--Llama-4-*-Instruct_config.json, no
vision_config in them); gemma-3-1b.json from the config google/gemma-3-1b-it's card shows, as
Liwink/gemma-jax @ 2904b450 models/README.md quotes it, and olmo-2-13b.json from
mauer4/Attention-From-Scratch @ 381a295f weights/allenai/OLMo-2-1124-13B/config.json; the
expected Megatron fields follow Megatron-LM's example scripts (and the team's notes on mapping HF
fields to them); parameter counts are the published totals (Hugging Face `model.num_parameters()`
where an exact figure is quoted, the model card otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from paths import HF

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.arch_fields import MAX_EXPERTS, MAX_LAYERS
from planner.inputs.errors import InputError
from planner.inputs.hf_import import SUPPORTED, arch_from_hf, load_hf_config
from planner.model import params


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF / f"{name}.json").read_text())
    return data


def write(tmp_path: Path, cfg: dict[str, Any] | str, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return path


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as err:
        load_hf_config(path)
    message = str(err.value)
    assert str(path) in message, message
    return message


# --- every fixture maps to the expected Megatron fields

EXPECTED: dict[str, dict[str, Any]] = {
    # Megatron examples/llama/train_llama3_8b_h100_fp8.sh
    "llama3.1-8b": dict(
        num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
        num_query_groups=8, kv_channels=128, vocab_size=128256, max_position_embeddings=131072,
        gated_linear_unit=True, activation="swiglu", normalization="RMSNorm",
        add_bias_linear=False, position_embedding_type="rope",
        untie_embeddings_and_output_weights=True, num_moe_experts=None,
    ),
    # no num_key_value_heads key: plain multi-head attention
    "llama2-7b": dict(
        num_layers=32, hidden_size=4096, ffn_hidden_size=11008, num_attention_heads=32,
        num_query_groups=None, kv_channels=128, vocab_size=32000, max_position_embeddings=4096,
        gated_linear_unit=True, activation="swiglu", untie_embeddings_and_output_weights=True,
    ),
    "mistral-7b": dict(
        num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
        num_query_groups=8, kv_channels=128, vocab_size=32000, max_position_embeddings=32768,
        gated_linear_unit=True, normalization="RMSNorm", add_bias_linear=False,
        untie_embeddings_and_output_weights=True,
    ),
    "mixtral-8x7b": dict(
        num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
        num_query_groups=8, vocab_size=32000, num_moe_experts=8, moe_router_topk=2,
        moe_ffn_hidden_size=14336, moe_shared_expert_intermediate_size=None, moe_layer_freq=1,
        gated_linear_unit=True, untie_embeddings_and_output_weights=True,
    ),
    # Qwen2: bias on q, k, v only
    "qwen2.5-7b": dict(
        num_layers=28, hidden_size=3584, ffn_hidden_size=18944, num_attention_heads=28,
        num_query_groups=4, kv_channels=128, vocab_size=152064, max_position_embeddings=131072,
        add_qkv_bias=True, add_bias_linear=False, qk_layernorm=False,
        untie_embeddings_and_output_weights=True,
    ),
    # 64 heads x head_dim 128 = 8192 != hidden 5120: kv_channels must carry the 128
    "qwen3-32b": dict(
        num_layers=64, hidden_size=5120, ffn_hidden_size=25600, num_attention_heads=64,
        num_query_groups=8, kv_channels=128, vocab_size=151936, max_position_embeddings=40960,
        qk_layernorm=True, add_qkv_bias=False, add_bias_linear=False, gated_linear_unit=True,
        untie_embeddings_and_output_weights=True,
    ),
    "qwen3-30b-a3b": dict(
        num_layers=48, hidden_size=2048, ffn_hidden_size=6144, num_attention_heads=32,
        num_query_groups=4, kv_channels=128, vocab_size=151936, num_moe_experts=128,
        moe_router_topk=8, moe_ffn_hidden_size=768, moe_layer_freq=1, qk_layernorm=True,
        untie_embeddings_and_output_weights=True,
    ),
    # yanring/Megatron-MoE-ModelZoo e8650517 model_configs/benchmarking/Qwen3-Next-80B-A3B.yaml:
    # --linear-attention-freq 4 and the --linear-* sizes, --attention-output-gate, --kv-channels
    # 256, --moe-shared-expert-intermediate-size 512
    "qwen3-next-80b-a3b": dict(
        num_layers=48, hidden_size=2048, ffn_hidden_size=5120, num_attention_heads=16,
        num_query_groups=2, kv_channels=256, vocab_size=151936, num_moe_experts=512,
        moe_router_topk=10, moe_ffn_hidden_size=512, moe_shared_expert_intermediate_size=512,
        moe_layer_freq=1, qk_layernorm=True, attention_output_gate=True,
        linear_attention_freq=4, linear_conv_kernel_dim=4, linear_key_head_dim=128,
        linear_value_head_dim=128, linear_num_key_heads=16, linear_num_value_heads=32,
        untie_embeddings_and_output_weights=True,
    ),
    # Megatron-Bridge 067f987d Qwen35VLMoEModelProvider (the language model in text_config;
    # no dense layer, so ffn_hidden_size is the expert width, unused)
    "qwen3.5-397b-a17b": dict(
        num_layers=60, hidden_size=4096, ffn_hidden_size=1024, num_attention_heads=32,
        num_query_groups=2, kv_channels=256, vocab_size=248320, num_moe_experts=512,
        moe_router_topk=10, moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
        moe_layer_freq=1, qk_layernorm=True, attention_output_gate=True,
        linear_attention_freq=4, linear_num_key_heads=16, linear_num_value_heads=64,
        untie_embeddings_and_output_weights=True,
    ),
    # transformers' Qwen3_5TextConfig defaults (dense: every layer an MLP of intermediate_size;
    # layer_types' every 4th full attention read back as the int 4)
    "qwen3.5-9b": dict(
        num_layers=32, hidden_size=4096, ffn_hidden_size=12288, num_attention_heads=16,
        num_query_groups=4, kv_channels=256, vocab_size=248320, num_moe_experts=None,
        qk_layernorm=True, attention_output_gate=True, linear_attention_freq=4,
        linear_num_key_heads=16, linear_num_value_heads=32,
        untie_embeddings_and_output_weights=True,
    ),
    # Qwen3.6-27B (dense Qwen3.5 architecture): text_config's 64 layers of 24 heads x 256, 4 KV
    # heads, every 4th full attention, 48 linear value heads; its mtp_num_hidden_layers 1
    "qwen3.6-27b": dict(
        num_layers=64, hidden_size=5120, ffn_hidden_size=17408, num_attention_heads=24,
        num_query_groups=4, kv_channels=256, vocab_size=248320, num_moe_experts=None,
        qk_layernorm=True, attention_output_gate=True, linear_attention_freq=4,
        linear_num_key_heads=16, linear_num_value_heads=48, mtp_num_layers=1,
        untie_embeddings_and_output_weights=True,
    ),
    # models.yaml megatron note: first_k_dense_replace 3 -> --moe-layer-freq [0]*3+[1]*58 etc.
    "deepseek-v3": dict(
        num_layers=61, hidden_size=7168, ffn_hidden_size=18432, num_attention_heads=128,
        vocab_size=129280, max_position_embeddings=163840, multi_latent_attention=True,
        q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
        v_head_dim=128, num_moe_experts=256, moe_router_topk=8, moe_ffn_hidden_size=2048,
        moe_shared_expert_intermediate_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 58,
        mtp_num_layers=1, gated_linear_unit=True, normalization="RMSNorm",
        untie_embeddings_and_output_weights=True,
        # n_group 8 / topk_group 4: Megatron-Bridge's model_bridge.py maps them to
        # moe_router_num_groups / moe_router_group_topk (benchmarks/data/bridge_recipes.md)
        moe_router_num_groups=8, moe_router_group_topk=4,
    ),
    # DeepSeek-V3.2-Exp: DeepSeek-V3's shapes and its sparse attention's indexer (index_*)
    "deepseek-v3.2-exp": dict(
        num_layers=61, hidden_size=7168, num_attention_heads=128, multi_latent_attention=True,
        q_lora_rank=1536, kv_lora_rank=512, add_bias_linear=False, dsa_indexer_n_heads=64,
        dsa_indexer_head_dim=128, dsa_indexer_topk=2048,
    ),
    # GLM-5: MLA 192 / 64 / 256 with q-LoRA 2048, 3 dense then 75 MoE layers of 256 experts
    # top-8 and one shared, the indexer 32 heads of 128 (no MTP layer in the fixture)
    "glm-5": dict(
        num_layers=78, hidden_size=6144, ffn_hidden_size=12288, num_attention_heads=64,
        vocab_size=154880, multi_latent_attention=True, q_lora_rank=2048, kv_lora_rank=512,
        qk_head_dim=192, qk_pos_emb_head_dim=64, v_head_dim=256, num_moe_experts=256,
        moe_router_topk=8, moe_ffn_hidden_size=2048, moe_layer_freq=(0,) * 3 + (1,) * 75,
        mtp_num_layers=0, dsa_indexer_n_heads=32, dsa_indexer_head_dim=128,
        dsa_indexer_topk=2048, add_bias_linear=False,
    ),
    # DeepSeek-V2: one dense layer, then 59 MoE layers of 160 routed + 2 shared experts; its
    # topk_method "group_limited_greedy" (device-limited routing, M = 3 of 8) keeps the groups
    "deepseek-v2": dict(
        num_layers=60, hidden_size=5120, ffn_hidden_size=12288, num_attention_heads=128,
        vocab_size=102400, max_position_embeddings=163840, multi_latent_attention=True,
        q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64,
        v_head_dim=128, num_moe_experts=160, moe_router_topk=6, moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=3072, moe_layer_freq=(0,) + (1,) * 59,
        mtp_num_layers=0, moe_router_num_groups=8, moe_router_group_topk=3,
        untie_embeddings_and_output_weights=True,
    ),
    # V2-Lite: q_lora_rank null (a full-rank query projection); "greedy" routing, no groups
    "deepseek-v2-lite": dict(
        num_layers=27, hidden_size=2048, ffn_hidden_size=10944, num_attention_heads=16,
        q_lora_rank=None, kv_lora_rank=512, num_moe_experts=64, moe_router_topk=6,
        moe_ffn_hidden_size=1408, moe_shared_expert_intermediate_size=2816,
        moe_layer_freq=(0,) + (1,) * 26, mtp_num_layers=0, moe_router_num_groups=None,
        moe_router_group_topk=None,
    ),
    # the published config.json: 64 x 64 = 4096 != hidden 2880 (kv_channels carries 64); biases
    # on attention and experts (the checkpoint's *_proj_bias tensors); every layer MoE
    "gpt-oss-120b": dict(
        num_layers=36, hidden_size=2880, ffn_hidden_size=2880, num_attention_heads=64,
        num_query_groups=8, kv_channels=64, vocab_size=201088, max_position_embeddings=131072,
        gated_linear_unit=True, activation="swiglu", normalization="RMSNorm",
        add_bias_linear=True, position_embedding_type="rope", qk_layernorm=False,
        untie_embeddings_and_output_weights=True, num_moe_experts=128, moe_router_topk=4,
        moe_ffn_hidden_size=2880, moe_layer_freq=1, moe_shared_expert_intermediate_size=None,
    ),
    # GLM-4.5 (composed fixture, module docstring): Megatron-Bridge's GLM45ModelProvider355B
    # fields; head_dim 128 against hidden / heads = 53.3; q/k/v biases alone (transformers'
    # o_proj has bias=False); 3 dense layers (first_k_dense_replace), then 89 MoE
    "glm4.5-355b-a32b": dict(
        num_layers=92, hidden_size=5120, ffn_hidden_size=12288, num_attention_heads=96,
        num_query_groups=8, kv_channels=128, vocab_size=151552, max_position_embeddings=131072,
        add_qkv_bias=True, add_bias_linear=False, qk_layernorm=True, gated_linear_unit=True,
        num_moe_experts=160, moe_router_topk=8, moe_ffn_hidden_size=1536,
        moe_shared_expert_intermediate_size=1536, moe_layer_freq=(0,) * 3 + (1,) * 89,
        mtp_num_layers=1, moe_router_num_groups=None, moe_router_group_topk=None,
        untie_embeddings_and_output_weights=True,
    ),
    # n_inner null -> 4 x 768; learned positions (n_positions); tied; biases
    "gpt2": dict(
        num_layers=12, hidden_size=768, ffn_hidden_size=3072, num_attention_heads=12,
        num_query_groups=None, kv_channels=64, vocab_size=50257, max_position_embeddings=1024,
        gated_linear_unit=False, activation="gelu", normalization="LayerNorm",
        add_bias_linear=True, position_embedding_type="learned_absolute",
        untie_embeddings_and_output_weights=False,
    ),
    "gpt-neox-20b": dict(
        num_layers=44, hidden_size=6144, ffn_hidden_size=24576, num_attention_heads=64,
        kv_channels=96, vocab_size=50432, max_position_embeddings=2048, activation="gelu",
        gated_linear_unit=False, normalization="LayerNorm", add_bias_linear=True,
        position_embedding_type="rope", untie_embeddings_and_output_weights=True,
    ),
    "bloom-560m": dict(
        num_layers=24, hidden_size=1024, ffn_hidden_size=4096, num_attention_heads=16,
        vocab_size=250880, max_position_embeddings=None, activation="gelu",
        normalization="LayerNorm", add_bias_linear=True, position_embedding_type="alibi",
        untie_embeddings_and_output_weights=False,
    ),
    "opt-175b": dict(
        num_layers=96, hidden_size=12288, ffn_hidden_size=49152, num_attention_heads=96,
        vocab_size=50272, max_position_embeddings=2048, activation="relu",
        gated_linear_unit=False, normalization="LayerNorm", add_bias_linear=True,
        position_embedding_type="learned_absolute", untie_embeddings_and_output_weights=False,
    ),
    # relu2 -> squared ReLU, no GLU; LayerNorm1p -> LayerNorm; head_dim 192
    "nemotron-4-340b": dict(
        num_layers=96, hidden_size=18432, ffn_hidden_size=73728, num_attention_heads=96,
        num_query_groups=8, kv_channels=192, vocab_size=256000, max_position_embeddings=4096,
        activation="squared_relu", gated_linear_unit=False, normalization="LayerNorm",
        add_bias_linear=False, position_embedding_type="rope",
        untie_embeddings_and_output_weights=True,
    ),
    # Phi-4: Llama's shapes (fused qkv / gate_up), GQA 40 / 10, untied; its sliding_window
    # 16,384 (= its context) on every layer
    "phi-4": dict(
        num_layers=40, hidden_size=5120, ffn_hidden_size=17920, num_attention_heads=40,
        num_query_groups=10, kv_channels=128, vocab_size=100352, activation="swiglu",
        add_bias_linear=False, window_size=16383, window_attn_skip_freq=None,
        untie_embeddings_and_output_weights=True,
    ),
    # SmolLM3: Llama's shapes, embeddings tied by SmolLM3Config's default (no key in the file)
    "smollm3-3b": dict(
        num_layers=36, hidden_size=2048, ffn_hidden_size=11008, num_attention_heads=16,
        num_query_groups=4, kv_channels=128, vocab_size=128256, window_size=None,
        untie_embeddings_and_output_weights=False,
    ),
    # Seed-OSS: head_dim 128 (80 x 128 against hidden 5,120), bias on q, k, v only
    # (attention_bias true, attention_out_bias and mlp_bias false)
    "seed-oss-36b": dict(
        num_layers=64, hidden_size=5120, ffn_hidden_size=27648, num_attention_heads=80,
        num_query_groups=8, kv_channels=128, vocab_size=155136, add_qkv_bias=True,
        add_bias_linear=False, untie_embeddings_and_output_weights=True,
    ),
    # Gemma 2: GeLU-tanh on a gated MLP -> geglu; head_dim 256; tied; sliding_window 4,096 on
    # every other layer from the first (Gemma2Config's layer_types default) -> window 4,095,
    # every 2nd layer whole
    "gemma-2-9b": dict(
        num_layers=42, hidden_size=3584, ffn_hidden_size=14336, num_attention_heads=16,
        num_query_groups=8, kv_channels=256, vocab_size=256000, activation="geglu",
        gated_linear_unit=True, normalization="RMSNorm", window_size=4095,
        window_attn_skip_freq=2, untie_embeddings_and_output_weights=False,
    ),
    # OLMoE: 64 experts of 1,024 top-8 on every layer, q/k norms, plain MHA
    "olmoe-1b-7b": dict(
        num_layers=16, hidden_size=2048, num_attention_heads=16, num_query_groups=None,
        vocab_size=50304, num_moe_experts=64, moe_router_topk=8, moe_ffn_hidden_size=1024,
        moe_layer_freq=1, moe_shared_expert_intermediate_size=None, qk_layernorm=True,
        untie_embeddings_and_output_weights=True,
    ),
    # Granite 3.0 MoE: Mixtral's shapes (40 experts of 512, top 8), tied
    "granite-3.0-3b-a800m": dict(
        num_layers=32, hidden_size=1536, num_attention_heads=24, num_query_groups=8,
        vocab_size=49155, num_moe_experts=40, moe_router_topk=8, moe_ffn_hidden_size=512,
        moe_layer_freq=1, untie_embeddings_and_output_weights=False,
    ),
    # Qwen1.5-MoE-A2.7B: Qwen2's q/k/v bias, 60 experts of 1,408 top-4 on every layer and one
    # shared expert of 5,632 (modular_qwen2_moe.py)
    "qwen1.5-moe-a2.7b": dict(
        num_layers=24, hidden_size=2048, num_attention_heads=16, num_query_groups=None,
        vocab_size=151936, num_moe_experts=60, moe_router_topk=4, moe_ffn_hidden_size=1408,
        moe_shared_expert_intermediate_size=5632, moe_layer_freq=1, add_qkv_bias=True,
        untie_embeddings_and_output_weights=True,
    ),
    # DBRX: d_model / n_heads / n_layers; attn_config's kv_n_heads 8; ffn_config's 16 experts of
    # 10,752 top-4 (a gated SiLU MLP) on every layer; LayerNorm
    "dbrx-instruct": dict(
        num_layers=40, hidden_size=6144, ffn_hidden_size=10752, num_attention_heads=48,
        num_query_groups=8, kv_channels=128, vocab_size=100352, max_position_embeddings=32768,
        num_moe_experts=16, moe_router_topk=4, moe_ffn_hidden_size=10752, moe_layer_freq=1,
        gated_linear_unit=True, normalization="LayerNorm", add_bias_linear=False,
        untie_embeddings_and_output_weights=True,
    ),
    # Nemotron 3 Nano: the hybrid pattern as Megatron's (23 M, 23 E, 6 *); 128 squared-ReLU
    # experts of 1,856 top-6, one shared of 3,712; Mamba-2 64 heads of 64, state 128, 8 groups;
    # the same fields as model_zoo/nemotron3-nano-30b-a3b.toml (Megatron-LM's configuration)
    "nemotron-3-nano-30b-a3b": dict(
        num_layers=52, hidden_size=2688, ffn_hidden_size=1856, num_attention_heads=32,
        num_query_groups=2, kv_channels=128, vocab_size=131072, activation="squared_relu",
        gated_linear_unit=False, position_embedding_type="none",
        hybrid_layer_pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        mamba_num_heads=64, mamba_head_dim=64, mamba_state_dim=128, mamba_num_groups=8,
        num_moe_experts=128, moe_router_topk=6, moe_ffn_hidden_size=1856,
        moe_shared_expert_intermediate_size=3712, moe_router_num_groups=None,
        untie_embeddings_and_output_weights=True,
    ),
    # Nemotron-H 56B: no experts (M, -, *), attention_head_dim 128, Mamba-2 256 heads of 64,
    # state 256 (model_zoo/nemotronh-56b.toml)
    "nemotron-h-56b": dict(
        num_layers=118, hidden_size=8192, ffn_hidden_size=32768, num_attention_heads=64,
        num_query_groups=8, kv_channels=128, vocab_size=131072, activation="squared_relu",
        position_embedding_type="none", mamba_num_heads=256, mamba_head_dim=64,
        mamba_state_dim=256, mamba_num_groups=8, num_moe_experts=None,
    ),
    # GLM-4.7-Flash: DeepSeek-V3's MLA (q-LoRA 768, 192 / 64 / 256), one dense layer then 46
    # MoE layers of 64 experts of 1,536 top-4 and one shared; n_group 1 groups nothing
    "glm-4.7-flash": dict(
        num_layers=47, hidden_size=2048, ffn_hidden_size=10240, num_attention_heads=20,
        vocab_size=154880, multi_latent_attention=True, q_lora_rank=768, kv_lora_rank=512,
        qk_head_dim=192, qk_pos_emb_head_dim=64, v_head_dim=256, num_moe_experts=64,
        moe_router_topk=4, moe_ffn_hidden_size=1536, moe_shared_expert_intermediate_size=1536,
        moe_layer_freq=(0,) + (1,) * 46, mtp_num_layers=0, moe_router_num_groups=None,
    ),
    # Llama 4 Scout (text_config): 48 layers, every one MoE (interleave step 1): 16 experts of
    # 8,192 top-1 beside a shared one of 8,192; 40 heads, 8 KV groups of 128; untied
    "llama4-scout-17b-16e": dict(
        num_layers=48, hidden_size=5120, ffn_hidden_size=16384, num_attention_heads=40,
        num_query_groups=8, kv_channels=128, vocab_size=202048, num_moe_experts=16,
        moe_router_topk=1, moe_ffn_hidden_size=8192, moe_shared_expert_intermediate_size=8192,
        moe_layer_freq=1, gated_linear_unit=True, untie_embeddings_and_output_weights=True,
    ),
    # Maverick: every second layer MoE (interleave step 2: layers 1, 3, ...), 128 experts; the
    # dense layers' MLP intermediate_size_mlp 16,384
    "llama4-maverick-17b-128e": dict(
        num_layers=48, hidden_size=5120, ffn_hidden_size=16384, num_moe_experts=128,
        moe_router_topk=1, moe_ffn_hidden_size=8192, moe_shared_expert_intermediate_size=8192,
        moe_layer_freq=(0, 1) * 24,
    ),
    # Gemma 3 1B: Gemma 2's shapes (head_dim 256, geglu, tied) with q/k norms; window 512 on
    # five layers in six (sliding_window_pattern 6: layers 5, 11, ... global)
    "gemma-3-1b": dict(
        num_layers=26, hidden_size=1152, ffn_hidden_size=6912, num_attention_heads=4,
        num_query_groups=1, kv_channels=256, vocab_size=262144, activation="geglu",
        qk_layernorm=True, window_size=511, window_attn_skip_freq=6,
        untie_embeddings_and_output_weights=False,
    ),
    # OLMo 2 13B: Llama's shapes (40 heads, no GQA) with q/k norms
    "olmo-2-13b": dict(
        num_layers=40, hidden_size=5120, ffn_hidden_size=13824, num_attention_heads=40,
        num_query_groups=None, vocab_size=100352, qk_layernorm=True, activation="swiglu",
        untie_embeddings_and_output_weights=True,
    ),
    # MiniMax-M2: 256 experts of 1,536 top-8 on all 62 layers, no shared expert, q/k norms,
    # head_dim 128 (48 x 128 against hidden 3,072), 3 MTP modules (use_mtp)
    "minimax-m2.7": dict(
        num_layers=62, hidden_size=3072, num_attention_heads=48, num_query_groups=8,
        kv_channels=128, vocab_size=200064, num_moe_experts=256, moe_router_topk=8,
        moe_ffn_hidden_size=1536, moe_layer_freq=1, moe_shared_expert_intermediate_size=None,
        qk_layernorm=True, mtp_num_layers=3, untie_embeddings_and_output_weights=True,
    ),
}  # fmt: skip


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


# --- errors: always InputError, always naming the file


def test_unknown_architecture_lists_supported(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("llama3.1-8b"), "architectures": ["FalconForCausalLM"]})
    message = load_error(path)
    assert 'architectures: unsupported architecture "FalconForCausalLM"' in message
    for arch in SUPPORTED:
        assert arch in message


def test_unknown_model_type_without_architectures(tmp_path: Path) -> None:
    cfg = fixture("llama3.1-8b")
    del cfg["architectures"]
    cfg["model_type"] = "falcon"
    message = load_error(write(tmp_path, cfg))
    assert 'model_type: unsupported model_type "falcon"' in message
    assert "llama" in message


def test_missing_required_field(tmp_path: Path) -> None:
    cfg = fixture("llama3.1-8b")
    del cfg["hidden_size"]
    path = write(tmp_path, cfg)
    assert load_error(path) == f"{path}: hidden_size: required field missing for LlamaForCausalLM"


def test_missing_required_deepseek_field(tmp_path: Path) -> None:
    cfg = fixture("deepseek-v3")
    del cfg["kv_lora_rank"]
    assert "kv_lora_rank: required field missing" in load_error(write(tmp_path, cfg))


def test_json_past_what_the_decoder_reads_is_named(tmp_path: Path) -> None:
    """A fuzzer's configs: arrays nested 100,000 deep (RecursionError in json) and a 5,000-digit
    hidden_size (past Python's 4,300-digit int() limit) were internal errors."""
    deep = write(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert load_error(deep) == f"{deep}: JSON nested too deep to read"
    cfg = fixture("llama3.1-8b")
    big = write(
        tmp_path, json.dumps(cfg).replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000)
    )
    assert load_error(big).startswith(f"{big}: an integer of more than")


def test_routing_groups_the_experts_do_not_divide_are_the_configs(tmp_path: Path) -> None:
    """DeepSeek-V2-Lite's 64 experts in n_group 7: the model is refused where it is read
    (catalog show took it; check blamed a training field the plan did not have)."""
    cfg = fixture("deepseek-v2-lite")
    cfg.update(n_group=7, topk_group=3, topk_method="group_limited_greedy")
    message = load_error(write(tmp_path, cfg))
    assert "num_moe_experts (64) must be a multiple of moe_router_num_groups (7)" in message


def test_malformed_json_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, '{\n  "hidden_size": 4096,\n  "vocab_size": \n}\n')
    message = load_error(path)
    assert "malformed JSON at line 4" in message


def test_json_that_is_not_an_object(tmp_path: Path) -> None:
    assert "expected a JSON object" in load_error(write(tmp_path, "[1, 2]"))


def test_path_that_does_not_exist(tmp_path: Path) -> None:
    assert "no such file" in load_error(tmp_path / "missing" / "config.json")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    assert "is a directory" in load_error(tmp_path)


@pytest.mark.parametrize(
    ("name", "field", "value"),
    [
        ("llama3.1-8b", "hidden_size", -4096),
        ("llama3.1-8b", "num_hidden_layers", 0),
        ("gpt2", "n_embd", -768),
        ("mixtral-8x7b", "num_local_experts", 0),
        ("qwen3-32b", "head_dim", "128"),
    ],
)
def test_bad_size_names_hf_field_and_value(
    tmp_path: Path, name: str, field: str, value: object
) -> None:
    path = write(tmp_path, {**fixture(name), field: value})
    message = load_error(path)
    assert message.startswith(f"{path}: {field}: must be a positive integer")
    assert f"(got {json.dumps(value)})" in message  # as config.json spells it


@pytest.mark.parametrize(
    ("name", "field", "cap"),
    [
        ("deepseek-v3", "num_hidden_layers", MAX_LAYERS),
        ("gpt2", "n_layer", MAX_LAYERS),
        ("mixtral-8x7b", "num_local_experts", MAX_EXPERTS),
    ],
)
def test_count_above_its_cap_is_bad_input(tmp_path: Path, name: str, field: str, cap: int) -> None:
    # 10^30 layers once built a per-layer MoE table (MemoryError, or every byte of the machine);
    # 10^12 experts stalled the search's walk over the expert-parallel degrees
    path = write(tmp_path, {**fixture(name), field: 10**30})
    message = load_error(path)
    assert message.startswith(f"{path}: {field}: must be at most {cap:,}")
    assert repr(10**30) in message
    # the cap itself is a count like any other
    assert load_hf_config(write(tmp_path, {**fixture(name), field: cap}, "at.json"))


def test_inconsistent_shape_names_megatron_fields(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("llama3.1-8b"), "num_key_value_heads": 5})
    message = load_error(path)
    assert "num_attention_heads (32) must be a multiple of num_query_groups (5)" in message


def test_unsupported_activation(tmp_path: Path) -> None:
    path = write(tmp_path, {**fixture("gpt2"), "activation_function": "tanh"})
    assert 'activation_function: unsupported activation "tanh"' in load_error(path)


def test_result_is_a_model_arch() -> None:
    assert isinstance(load_hf_config(HF / "gpt2.json"), ModelArch)


def test_sliding_window_layers() -> None:
    # gpt-oss: layer_types alternates, sliding first; sliding_window 128 -> Megatron's (127, 0)
    # with window_attn_skip_freq 2 (Megatron-Bridge gpt_oss_bridge.py:87-88 @067f987d); the zoo
    # entry says the same
    oss = load_hf_config(HF / "gpt-oss-120b.json")
    assert (oss.window_size, oss.window_attn_skip_freq) == (127, 2)
    zoo = catalog.get_model("gpt-oss-120b")
    assert (zoo.window_size, zoo.window_attn_skip_freq) == (127, 2)
    assert [oss.is_windowed(i) for i in range(4)] == [True, False, True, False]
    # Mistral 7B: sliding_window 4096 on every layer, no layer_types
    mistral = load_hf_config(HF / "mistral-7b.json")
    assert (mistral.window_size, mistral.window_attn_skip_freq) == (4095, None)
    # Qwen2.5 (use_sliding_window false) and Mixtral (null): none
    assert load_hf_config(HF / "qwen2.5-7b.json").window_size is None
    assert load_hf_config(HF / "mixtral-8x7b.json").window_size is None
    # an irregular pattern is kept as the 1 / 0 list; a wrong one is refused naming the field
    cfg = fixture("gpt-oss-120b")
    n = cfg["num_hidden_layers"]
    types = ["full_attention"] * 3 + ["sliding_attention"] * (n - 3)
    irregular = arch_from_hf({**cfg, "layer_types": types}, "x.json")
    assert irregular.window_attn_skip_freq == (0, 0, 0) + (1,) * (n - 3)
    with pytest.raises(InputError, match=r"x\.json: layer_types: must list"):
        arch_from_hf({**cfg, "layer_types": ["sliding_attention"]}, "x.json")


def test_qwen3_5_reads_its_text_config(tmp_path: Path) -> None:
    cfg = fixture("qwen3.5-9b")
    # the model's tie_word_embeddings stands where the text config has none
    tied = {**cfg, "tie_word_embeddings": True}
    assert not load_hf_config(write(tmp_path, tied)).untie_embeddings_and_output_weights
    # an error inside the language model names the file and text_config
    bad = {**cfg, "text_config": {**cfg["text_config"], "linear_num_key_heads": 0}}
    message = load_error(write(tmp_path, bad))
    assert "text_config: linear_num_key_heads" in message
    assert "text_config: must be an object" in load_error(
        write(tmp_path, {**cfg, "text_config": 3})
    )


def test_qwen3_next_mtp_layers(tmp_path: Path) -> None:
    # mtp_num_hidden_layers -> mtp_num_layers (Megatron-Bridge's mapping); the MTP layer is the
    # last decoder layer's kind, a full-attention MoE layer in Qwen3-Next
    cfg = {**fixture("qwen3-next-80b-a3b"), "mtp_num_hidden_layers": 1}
    arch = load_hf_config(write(tmp_path, cfg))
    assert arch.mtp_num_layers == 1
    assert [k.name for k in arch.mtp_kinds] == ["moe"]
    assert load_hf_config(HF / "qwen3-next-80b-a3b.json").mtp_num_layers == 0


# --- the families added from real configs (phi3, smollm3, seed_oss, gemma2, olmoe, granitemoe,
# minimax_m2)


def test_vendors_quoting_active_parameters_without_embeddings() -> None:
    """MiniMax's "230B total, 10B active" and IBM's 3B-A800M count the active parameters
    without the embedding table and the output layer (params_active counts both: the tables
    less); MTP modules are outside the total, as DeepSeek reports. Tolerances: the published
    figures' rounding (10B and 800M to their last digit, 5%; 230B and 3.3B, 1%)."""
    for name, total, active in (
        ("minimax-m2.7", 230e9, 10e9),
        ("granite-3.0-3b-a800m", 3.3e9, 0.8e9),
    ):
        arch = load_hf_config(HF / f"{name}.json")
        tables = (1 + arch.untie_embeddings_and_output_weights) * arch.vocab_size
        assert params.params_total(arch) == pytest.approx(total, rel=0.01), name
        non_embedding = params.params_active(arch) - tables * arch.hidden_size
        assert non_embedding == pytest.approx(active, rel=0.05), name


def test_minimax_lightning_attention_layers_are_refused(tmp_path: Path) -> None:
    """MiniMax-01's lightning (linear) attention, attn_type_list 0, has no model here."""
    cfg = fixture("minimax-m2.7")
    cfg["attn_type_list"] = [0] + [1] * 61
    message = load_error(write(tmp_path, cfg))
    assert "attn_type_list: only full attention (1 on each of the 62 layers)" in message


def test_minimax_mtp_only_where_used_and_partial_rope_noted() -> None:
    arch = load_hf_config(HF / "minimax-m2.7.json")
    assert "RoPE on 64 of 128 head dims (rotary_dim)" in arch.source
    off = arch_from_hf({**fixture("minimax-m2.7"), "use_mtp": False}, "x.json")
    assert off.mtp_num_layers == 0
    assert params.params_total(off) == params.params_total(arch)  # MTP is outside the total


def test_gemma2_layer_types_spelt_out_equal_the_default_alternation() -> None:
    """Gemma2Config's default: layer i slides where i + 1 is odd (i = 0, 2, ...): the same as
    the list spelt out, and with every layer sliding no skip frequency at all."""
    cfg = fixture("gemma-2-9b")
    types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(42)]
    assert arch_from_hf({**cfg, "layer_types": types}, "x.json") == arch_from_hf(cfg, "x.json")
    every = arch_from_hf({**cfg, "layer_types": ["sliding_attention"] * 42}, "x.json")
    assert (every.window_size, every.window_attn_skip_freq) == (4095, None)
    assert "soft-capping" in arch_from_hf(cfg, "x.json").source


def test_smollm3_window_only_where_used_and_seed_oss_out_bias() -> None:
    smol = fixture("smollm3-3b")
    assert arch_from_hf({**smol, "sliding_window": 4096}, "x.json").window_size is None
    on = arch_from_hf({**smol, "sliding_window": 4096, "use_sliding_window": True}, "x.json")
    assert on.window_size == 4095
    assert "no_rope_layers" in arch_from_hf(smol, "x.json").source
    # a fuzzer's string there was an internal error ('in <string>' with an int): it is a note
    assert arch_from_hf({**smol, "no_rope_layers": "full_attention"}, "x.json").num_layers == 36
    seed = arch_from_hf({**fixture("seed-oss-36b"), "attention_out_bias": True}, "x.json")
    assert (seed.add_bias_linear, seed.add_qkv_bias) == (True, False)


def test_phi3_partial_rope_is_noted() -> None:
    arch = arch_from_hf({**fixture("phi-4"), "partial_rotary_factor": 0.75}, "x.json")
    assert "RoPE on 0.75 of each head" in arch.source


def test_a_bad_value_is_named_by_its_config_key_too(tmp_path: Path) -> None:
    """ModelArch's rules speak of Megatron's fields; a config.json holds Hugging Face's keys:
    the message says which key each named field was read from (the rule itself: 32 heads in
    groups of 5 do not divide)."""
    cfg = {**fixture("llama3.1-8b"), "num_key_value_heads": 5}
    message = load_error(write(tmp_path, cfg))
    assert "num_attention_heads (32) must be a multiple of num_query_groups (5)" in message
    assert message.endswith("(in config.json: num_query_groups is num_key_value_heads)")
    dsv2 = fixture("deepseek-v2-lite")
    dsv2.update(n_group=7, topk_group=3, topk_method="group_limited_greedy")
    message = load_error(write(tmp_path, dsv2))
    assert "num_moe_experts is n_routed_experts, moe_router_num_groups is n_group" in message
