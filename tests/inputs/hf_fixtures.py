"""The Hugging Face config.json fixtures of tests/data/hf/ and the Megatron fields each maps to
(EXPECTED), shared by the test_hf_import*.py files.

Provenance: the fixtures are the published config.json files (but
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
where an exact figure is quoted, the model card otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from paths import HF

from planner.inputs.errors import InputError
from planner.inputs.hf_import import load_hf_config


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


# every fixture -> the Megatron fields it maps to (test_hf_import.py checks each)

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
    # on attention and experts (the checkpoint's *_proj_bias tensors); every layer MoE; the
    # experts' GLU is gate * sigmoid(1.702 gate) (transformers GptOssExperts): quick-GELU's
    "gpt-oss-120b": dict(
        num_layers=36, hidden_size=2880, ffn_hidden_size=2880, num_attention_heads=64,
        num_query_groups=8, kv_channels=64, vocab_size=201088, max_position_embeddings=131072,
        gated_linear_unit=True, activation="quick_geglu", normalization="RMSNorm",
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
