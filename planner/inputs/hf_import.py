"""Hugging Face `config.json` -> ModelArch (Megatron field names).

`load_hf_config(path)` reads and parses the file; `arch_from_hf(cfg, path)` maps the parsed dict.
The architecture is `architectures[0]` (or, when that key is absent, `model_type`); each supported
one has a small mapping function below. Field names and quirks follow the published config.json
files (tests/data/hf) and transformers' config classes:

- num_key_value_heads -> num_query_groups (absent, null or equal to the heads: plain MHA, None);
  head_dim -> kv_channels (set whenever known; Qwen3 and Nemotron-4 need it because
  heads x head_dim may differ from hidden_size).
- hidden_act silu on a gated MLP (gate/up/down) -> gated_linear_unit + "swiglu" (gelu: "geglu");
  relu2 -> "squared_relu" (Nemotron); gelu_new / gelu_fast / ... -> "gelu" on a plain MLP.
- tie_word_embeddings (default per HF config class: True for GPT-2, OPT, BLOOM; False otherwise)
  -> untie_embeddings_and_output_weights = not tied.
- MoE: num_local_experts / num_experts / n_routed_experts -> num_moe_experts, num_experts_per_tok ->
  moe_router_topk, moe_intermediate_size -> moe_ffn_hidden_size; which layers are MoE
  (Qwen3-MoE decoder_sparse_step + mlp_only_layers, DeepSeek first_k_dense_replace +
  moe_layer_freq) -> moe_layer_freq, an int 1 when every layer is MoE, else a 0/1 list.
  scoring_func ("softmax" / "sigmoid") -> moe_router_score_function where a family reads it
  (DeepSeek, GLM, MiniMax-M2, Nemotron-H: `hf_shapes.router_score`, with the family's router
  where absent: sigmoid but DeepSeek-V2's softmax); moe_router_enable_expert_bias where the
  family's Megatron-Bridge bridge sets it (aux-loss-free balancing: DeepSeek-V3 noaux_tc, GLM,
  MiniMax-M2, Nemotron-H).
- DeepSeek-V3 MLA: qk_nope_head_dim -> qk_head_dim, qk_rope_head_dim -> qk_pos_emb_head_dim,
  n_shared_experts x moe_intermediate_size -> moe_shared_expert_intermediate_size,
  num_nextn_predict_layers -> mtp_num_layers; group-limited routing n_group / topk_group ->
  moe_router_num_groups / moe_router_group_topk (Megatron-Bridge's DeepSeek bridge maps them so).
  DeepSeek-V2 / V2-Lite the same, without MTP, and grouped only where topk_method is
  "group_limited_greedy" (V2-Lite's "greedy" routes over all 64 experts). DeepSeek-V3.2
  (deepseek_v32) as V3, with its sparse attention's indexer: index_n_heads, index_head_dim,
  index_topk -> dsa_indexer_n_heads, dsa_indexer_head_dim, dsa_indexer_topk; GLM-5 (glm_moe_dsa,
  GlmMoeDsaForCausalLM) the same fields (its indexer's numerics, no ReLU and no Hadamard
  rotation, do not change its shape).
- GLM-4.5 (glm4_moe): head_dim 128, q/k/v biases (attention_bias), use_qk_norm -> qk_layernorm;
  first_k_dense_replace dense layers, then n_routed_experts routed and n_shared_experts shared
  experts of moe_intermediate_size; num_nextn_predict_layers -> mtp_num_layers.
- gpt-oss: num_local_experts experts of width intermediate_size on every layer, biases
  everywhere; its attention sinks and clamped GLU are noted in `source`.
- sliding_window w -> window_size w - 1 on the layers layer_types marks "sliding_attention"
  (gpt-oss; Gemma 2, every other layer where it has no layer_types), or on every layer
  (Mistral, Mixtral, Phi-3, SmolLM3 where use_sliding_window) -> window_attn_skip_freq (an int,
  or a 0/1 list); the Qwen families' only where use_sliding_window (`planner.inputs.hf_qwen`).
- Llama's relatives (`planner.inputs.hf_dense`): Phi-3 / Phi-4, SmolLM3 (tied by default),
  Seed-OSS (q/k/v biases), Gemma 2 (GeLU-gated, tied; its logit soft-capping and extra norms
  noted). MoE: OLMoE (q/k norms), Granite 3.0 MoE (Mixtral's shapes), MiniMax-M2 (q/k norms,
  num_mtp_modules MTP layers where use_mtp; MiniMax-01's lightning-attention layers refused),
  Qwen1.5 / Qwen2-MoE (a shared expert beside Qwen3-MoE's layer rule), DBRX (its attn_config
  and ffn_config tables).
- Qwen3-Next (qwen3_next): the layers layer_types marks "linear_attention" (or all but every
  full_attention_interval-th) -> linear_attention_freq (an int, or a 0/1 list), the linear_*
  sizes -> the gated delta net's; its gated attention -> attention_output_gate;
  shared_expert_intermediate_size -> moe_shared_expert_intermediate_size,
  mtp_num_hidden_layers -> mtp_num_layers. Qwen3.5 (qwen3_5, qwen3_5_moe): the same fields in
  the config's text_config (its language model; the vision encoder is not modelled, and noted).

RoPE settings (rope_theta / rope_scaling, or the newer rope_parameters; rotary_pct,
partial_rotary_factor) have no ModelArch field and are accepted in either spelling and ignored.
Every error is an InputError naming the file, the HF field and the value.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError, spelled_json, where
from planner.inputs.files import read_file, validate
from planner.inputs.hf_families import FAMILIES, SUPPORTED
from planner.inputs.hf_fields import Reader

# --- entry points


def load_hf_config(path: Path) -> ModelArch:
    """Read a HF config.json and map it to a ModelArch (every failure is an InputError)."""
    return arch_from_hf(parse_json(read_file(path), path), path)


def parse_json(text: str, path: Path | str | None) -> dict[str, Any]:
    """Parse the file's text; malformed JSON names the file, line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{where(path)}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}"
        ) from None
    except RecursionError:  # the decoder recurses once per nested array or object
        raise InputError(f"{where(path)}: JSON nested too deep to read") from None
    except ValueError:  # an integer past Python's int() digit limit
        limit = sys.get_int_max_str_digits()
        raise InputError(
            f"{where(path)}: an integer of more than {limit:,} digits (no field holds one)"
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"{where(path)}: expected a JSON object, got {type(data).__name__}")
    return data


def arch_from_hf(cfg: dict[str, Any], path: Path | str | None = None) -> ModelArch:
    """Map one parsed HF config dict to a validated ModelArch."""
    arch = architecture(cfg, path)
    reader = Reader(cfg, path, arch)
    fields = FAMILIES[arch][1](reader)
    name_or_path = cfg.get("_name_or_path")
    fields["name"] = model_name(cfg, path)
    fields["display_name"] = name_or_path if isinstance(name_or_path, str) else ""
    fields["source"] = "; ".join([f"HF config {where(path)}", *reader.notes])
    try:
        return validate(ModelArch, fields, path)
    except InputError as e:  # name the config's own keys beside the Megatron fields
        raise InputError(with_hf_keys(str(e), cfg)) from None


HF_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers", "n_layer"),
    "ffn_hidden_size": ("intermediate_size", "n_inner", "ffn_dim"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_query_groups": ("num_key_value_heads",),
    "kv_channels": ("head_dim",),
    "num_moe_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "moe_router_topk": ("num_experts_per_tok",),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "intermediate_size"),
    "moe_router_num_groups": ("n_group",),
    "moe_router_group_topk": ("topk_group",),
    "mtp_num_layers": ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"),
    "window_size": ("sliding_window",),
    "qk_head_dim": ("qk_nope_head_dim",),
    "qk_pos_emb_head_dim": ("qk_rope_head_dim",),
}
"""The config.json keys each Megatron field is read from (`planner.inputs.hf_families`), in the
order the families look for them."""


def with_hf_keys(message: str, cfg: dict[str, Any]) -> str:
    """A validation message about Megatron fields, with the config.json keys they came from
    (the first of HF_KEYS' that the config, or its text_config, holds) where their names
    differ."""
    text = cfg.get("text_config")
    keys = {**cfg, **(text if isinstance(text, dict) else {})}
    named = []
    for field, candidates in HF_KEYS.items():
        key = next((k for k in candidates if k in keys), None)
        if key is not None and key != field and re.search(rf"\b{field}\b", message):
            named.append(f"{field} is {key}")
    return f"{message} (in config.json: {', '.join(named)})" if named else message


def architecture(cfg: dict[str, Any], path: Path | str | None = None) -> str:
    """`architectures[0]`, or the architecture of `model_type`; unsupported is an InputError."""
    archs = cfg.get("architectures")
    if archs is not None:
        if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
            raise InputError(
                f"{where(path)}: architectures: expected a list of names "
                f"(got {spelled_json(archs)})"
            )
        if archs[0] not in SUPPORTED:
            raise InputError(
                f"{where(path)}: architectures: unsupported architecture "
                f"{spelled_json(archs[0])}; "
                f"supported: {', '.join(SUPPORTED)}"
            )
        return str(archs[0])
    by_type = {t: a for a, t in SUPPORTED.items()}
    model_type = cfg.get("model_type")
    if model_type is None:
        raise InputError(
            f"{where(path)}: architectures: required field missing (and no model_type); "
            f"supported: {', '.join(SUPPORTED)}"
        )
    if not isinstance(model_type, str) or model_type not in by_type:
        raise InputError(
            f"{where(path)}: model_type: unsupported model_type {spelled_json(model_type)}; "
            f"supported: {', '.join(by_type)}"
        )
    return by_type[model_type]


def model_name(cfg: dict[str, Any], path: Path | str | None = None) -> str:
    """Lower-case hyphenated name: `_name_or_path`'s last part, else the file stem (when it is not
    `config`), else the file's directory name."""
    raw = cfg.get("_name_or_path")
    if isinstance(raw, str) and raw.strip("/\\ "):
        base = PurePosixPath(raw.replace("\\", "/").rstrip("/")).name
    elif path is not None:
        p = Path(path)
        base = p.stem if p.stem.lower() != "config" else p.resolve().parent.name
    else:
        base = ""
    name = re.sub(r"[^a-z0-9.]+", "-", base.lower()).strip("-.")
    return name or "hf-model"
