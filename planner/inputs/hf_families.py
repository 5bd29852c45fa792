"""Each supported Hugging Face architecture's config.json mapped to ModelArch fields (Megatron
names): one small function per family, `FAMILIES` by `architectures[0]`; the MoE and hybrid
families here, the dense ones in `planner.inputs.hf_dense`, the Qwen ones in
`planner.inputs.hf_qwen`. `planner.inputs.hf_import`
reads the file and validates what these return; its docstring lists the mappings."""

from __future__ import annotations

from collections.abc import Callable

from planner.inputs.arch_fields import MAX_LAYERS
from planner.inputs.errors import spelled_json
from planner.inputs.hf_dense import (
    bloom,
    gemma2,
    gemma3,
    gpt2,
    gpt_neox,
    mistral,
    nemotron,
    olmo2,
    opt,
    phi3,
    seed_oss,
    smollm3,
)
from planner.inputs.hf_fields import Reader
from planner.inputs.hf_hybrid import nemotron_h
from planner.inputs.hf_llama4 import llama4
from planner.inputs.hf_qwen import (
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_5,
    qwen3_5_moe,
    qwen3_moe,
    qwen3_next,
)
from planner.inputs.hf_shapes import (
    Fields,
    dense_first_moe,
    llama,
    moe,
    partial_rope,
    router_score,
    tied,
    window,
)

# --- one mapper per architecture family


def _mixtral(r: Reader) -> Fields:
    """Mixtral: every layer MoE, each expert as wide as intermediate_size; sliding_window (when not
    null) on every layer, as Mistral's (transformers' MixtralAttention passes
    config.sliding_window to each layer's attention)."""
    f = llama(r)
    n = f["num_layers"]
    every = [True] * n
    return f | moe(r, ("num_local_experts",), f["ffn_hidden_size"], every) | window(r, n, True)


def _dbrx(r: Reader) -> Fields:
    """DBRX (DbrxForCausalLM, transformers' configuration_dbrx.py): d_model, n_heads, n_layers,
    max_seq_len; attn_config's kv_n_heads (GQA; q/k/v fused, no bias; absent:
    DbrxAttentionConfig's default 1, one KV head, not n_heads); ffn_config's
    moe_num_experts experts of ffn_hidden_size, top moe_top_k, a gated SiLU MLP on every layer,
    no shared expert; LayerNorm without bias (counted with it: 2 h a norm more). Its clip_qkv
    changes no weight."""
    hidden, heads = r.req_int("d_model"), r.req_int("n_heads")
    attn, ffn = _nested(r, "attn_config"), _nested(r, "ffn_config")
    layers = r.req_int("n_layers", maximum=MAX_LAYERS)
    kv = attn.opt_int("kv_n_heads", default=1)
    width = ffn.req_int("ffn_hidden_size")
    return {
        "num_layers": layers,
        "hidden_size": hidden,
        "ffn_hidden_size": width,
        "num_attention_heads": heads,
        "num_query_groups": None if kv == heads else kv,
        "kv_channels": hidden // heads if hidden % heads == 0 else None,
        "vocab_size": r.req_int("vocab_size"),
        "max_position_embeddings": r.opt_int("max_seq_len"),
        "activation": "swiglu",
        "gated_linear_unit": True,
        "normalization": "LayerNorm",
        "add_bias_linear": False,
        "position_embedding_type": "rope",
        **tied(r, False),
        **moe(ffn, ("moe_num_experts",), width, [True] * layers, topk=("moe_top_k",)),
    }


def _nested(r: Reader, key: str) -> Reader:
    """A config's nested table (DBRX's attn_config, ffn_config) read alone: errors name the file
    and the table."""
    table = r.cfg.get(key)
    if not isinstance(table, dict):
        raise r.error(key, f"must be an object {spelled_json(table)}")
    sub = Reader(table, None, r.arch)
    sub.file, sub.notes = f"{r.file}: {key}", r.notes
    return sub


def _deepseek_v3(r: Reader, score: str = "sigmoid", bias: bool = True) -> Fields:
    """MLA + DeepSeekMoE. Layer i is MoE when i >= first_k_dense_replace and i % moe_layer_freq
    == 0; intermediate_size is the dense layers' MLP width. The fields that change the parameter
    count are required (their defaults differ between transformers' DeepseekV3Config and DeepSeek's
    own configuration_deepseek.py); q_lora_rank and n_shared_experts may be null. The router
    (`router_score`): scoring_func, absent `score`: V3's sigmoid (Megatron-Bridge 067f987d
    deepseek_v3_bridge.py:73), with the aux-loss-free expert bias (:74) where `bias` and
    topk_method is "noaux_tc" (DeepSeek's configs; absent: transformers' DeepseekV3TopkRouter,
    which always has e_score_correction_bias); Kimi K2, GLM-5 and GLM-4.7-Flash route so too:
    kimi_bridge.py via scoring_func and :62, glm5_bridge.py:102-103,
    glm47_flash_bridge.py:85-86)."""
    f = llama(r)
    freq = r.opt_int("moe_layer_freq", default=1) or 1
    v_head_dim = r.req_int("v_head_dim")
    return {
        **f,
        "num_query_groups": None,  # MLA: latent KV, no GQA groups
        "kv_channels": v_head_dim,  # unused by MLA; hidden/heads (56) would mislead
        **dense_first_moe(r, f["num_layers"], ("n_routed_experts", "num_local_experts"), freq),
        "multi_latent_attention": True,
        "qk_layernorm": True,  # MLA's q_a / kv_a latent RMSNorms (Megatron --qk-layernorm)
        "q_lora_rank": r.nullable_int("q_lora_rank"),
        "kv_lora_rank": r.req_int("kv_lora_rank"),
        "qk_head_dim": r.req_int("qk_nope_head_dim"),
        "qk_pos_emb_head_dim": r.req_int("qk_rope_head_dim"),
        "v_head_dim": v_head_dim,
        "mtp_num_layers": r.opt_int("num_nextn_predict_layers", default=0, minimum=0),
        "moe_router_num_groups": r.opt_int("n_group"),
        "moe_router_group_topk": r.opt_int("topk_group"),
        **router_score(r, score, bias and r.cfg.get("topk_method", "noaux_tc") == "noaux_tc"),
    }


def _glm4_moe_lite(r: Reader) -> Fields:
    """GLM-4.7-Flash (Glm4MoeLiteForCausalLM; transformers' modular_glm4_moe_lite.py @008e5743:
    DeepSeek-V3's attention, GLM-4.5's experts): DeepSeek-V3's fields (`_deepseek_v3`). Its
    dense layers are the leading "dense" entries of mlp_layer_types where the config lists them
    (transformers' default: the first layer dense, the rest "sparse"), else
    first_k_dense_replace; its one routing group (n_group 1, the default) groups nothing."""
    types = r.cfg.get("mlp_layer_types")
    if "first_k_dense_replace" not in r.cfg and types is not None:
        dense = next((i for i, t in enumerate(types) if t != "dense"), len(types))
        if not isinstance(types, list) or any(t != "sparse" for t in types[dense:]):
            raise r.error(
                "mlp_layer_types",
                f'must list "dense" layers, then "sparse" ones {spelled_json(types)}',
            )
        r = r.with_fields(first_k_dense_replace=dense)
    elif "first_k_dense_replace" not in r.cfg:
        r = r.with_fields(first_k_dense_replace=1)
    f = _deepseek_v3(r)
    if (f["moe_router_num_groups"] or 1) == 1:
        f["moe_router_num_groups"] = f["moe_router_group_topk"] = None
    return f


def _deepseek_v32(r: Reader) -> Fields:
    """DeepSeek-V3.2 (DeepseekV32ForCausalLM, model_type deepseek_v32): DeepSeek-V3's shapes
    (`_deepseek_v3`) with DeepSeek sparse attention's lightning indexer: index_n_heads ->
    dsa_indexer_n_heads, index_head_dim -> dsa_indexer_head_dim, index_topk -> dsa_indexer_topk
    (Megatron's --dsa-indexer-*, which have no defaults: required)."""
    return {
        **_deepseek_v3(r),
        "dsa_indexer_n_heads": r.req_int("index_n_heads"),
        "dsa_indexer_head_dim": r.req_int("index_head_dim"),
        "dsa_indexer_topk": r.req_int("index_topk"),
    }


def _deepseek_v2(r: Reader) -> Fields:
    """DeepSeek-V2 / V2-Lite: DeepSeek-V3's shapes (`_deepseek_v3`: MLA, DeepSeekMoE, the dense
    first layers), no MTP layer, and routing groups only under topk_method
    "group_limited_greedy" (V2's device-limited routing, n_group 8 / topk_group 3); V2-Lite's
    "greedy" routes over all experts (its n_group 1 / topk_group 1 group nothing). Its router
    is softmax (both published configs' scoring_func)."""
    f = _deepseek_v3(r, score="softmax", bias=False)  # (deepseek_v2_bridge.py: no expert bias)
    method = r.choice("topk_method", "greedy", ("greedy", "group_limited_greedy"))
    if method != "group_limited_greedy":
        f["moe_router_num_groups"] = f["moe_router_group_topk"] = None
    return f


def _glm4_moe(r: Reader) -> Fields:
    """GLM-4.5 / GLM-4.5-Air (Glm4MoeForCausalLM; transformers 4.57.1 modeling_glm4_moe.py, and
    Megatron-Bridge's GLM45Bridge @681278ca): Llama's shapes with head_dim (96 x 128 against a
    5,120 hidden size), bias on q, k and v alone (attention_bias; o_proj has none), q/k RMSNorm
    where use_qk_norm; DeepSeek's MoE layout (`dense_first_moe`: the first first_k_dense_replace
    layers dense, intermediate_size wide, then n_routed_experts and n_shared_experts of width
    moe_intermediate_size, top num_experts_per_tok); num_nextn_predict_layers MTP
    layers; routing groups only where n_group > 1 (the released models' 1 / 1 group nothing). The
    fields that change the parameter count are required, as for DeepSeek-V3. RoPE on part of
    each head (partial_rotary_factor) is noted: timed as if whole. Its router is sigmoid
    (Megatron-Bridge 067f987d glm45_bridge.py:74; transformers' Glm4MoeConfig has no
    scoring_func: `router_score` reads one where given), with the expert bias (:76)."""
    f = llama(r)
    groups = r.opt_int("n_group")
    partial_rope(r)
    return {
        **f,
        "add_bias_linear": False,
        "add_qkv_bias": r.flag("attention_bias", False),
        "qk_layernorm": r.flag("use_qk_norm", False),
        **dense_first_moe(r, f["num_layers"], ("n_routed_experts", "num_experts")),
        "mtp_num_layers": r.opt_int("num_nextn_predict_layers", default=0, minimum=0),
        "moe_router_num_groups": groups if groups and groups > 1 else None,
        "moe_router_group_topk": r.opt_int("topk_group") if groups and groups > 1 else None,
        **router_score(r, "sigmoid", expert_bias=True),
    }


def _olmoe(r: Reader) -> Fields:
    """OLMoE (transformers' OlmoeConfig): every layer MoE, num_experts experts each
    intermediate_size wide, top num_experts_per_tok, no shared expert; q/k RMSNorm (over the whole
    projection, not per head: a few thousand parameters more, not counted)."""
    f = {**llama(r), "qk_layernorm": True}
    every = [True] * f["num_layers"]
    return f | moe(r, ("num_experts",), f["ffn_hidden_size"], every)


def _granite_moe(r: Reader) -> Fields:
    """Granite 3.0 MoE (GraniteMoeForCausalLM): Mixtral's shapes (`_mixtral`); its scalar
    multipliers (embedding, residual, attention, logits) change no weight and no FLOP."""
    return _mixtral(r)


def _minimax_m2(r: Reader) -> Fields:
    """MiniMax-M2 (MiniMaxM2ForCausalLM, its repository's configuration_minimax_m2.py): Llama's
    shapes with head_dim, full attention on every layer (attn_type_list all 1: its 0, MiniMax-01's
    lightning attention, is refused), q/k RMSNorm where use_qk_norm; every layer MoE,
    num_local_experts experts of width intermediate_size, top num_experts_per_tok, a shared
    expert of shared_intermediate_size where above 0; num_mtp_modules MTP layers where use_mtp;
    scoring_func's router (`router_score`; absent: sigmoid, Megatron-Bridge 067f987d
    minimax_m2_bridge.py:167, with the expert bias, :168). RoPE on rotary_dim of each head is
    noted: timed as if whole."""
    f = llama(r)
    n = f["num_layers"]
    types = r.cfg.get("attn_type_list")
    if types is not None and types != [1] * n:
        raise r.error(
            "attn_type_list",
            f"only full attention (1 on each of the {n} layers) is modelled {spelled_json(types)}",
        )
    rotary, head_dim = r.opt_int("rotary_dim"), f["kv_channels"]
    if rotary is not None and head_dim is not None and rotary < head_dim:
        r.notes.append(f"RoPE on {rotary} of {head_dim} head dims (rotary_dim) timed as whole")
    shared = r.opt_int("shared_intermediate_size", default=0, minimum=0)
    mtp = r.opt_int("num_mtp_modules", default=0, minimum=0) if r.flag("use_mtp", False) else 0
    return {
        **f,
        "qk_layernorm": r.flag("use_qk_norm", False),
        **moe(r, ("num_local_experts",), f["ffn_hidden_size"], [True] * n),
        "moe_shared_expert_intermediate_size": shared or None,
        "mtp_num_layers": mtp,
        **router_score(r, "sigmoid", expert_bias=True),
    }


def _gpt_oss(r: Reader) -> Fields:
    """gpt-oss: every layer MoE (num_local_experts, each intermediate_size wide, top
    num_experts_per_tok), GQA with head_dim, RMSNorm, RoPE, sliding-window attention on the
    layers layer_types marks (`window`). The experts and the router always carry biases and
    attention_bias (default true) puts them on q/k/v/o: add_bias_linear (erring high when
    attention_bias is false). The per-head attention sinks (GptOssAttention.sinks): softmax_type
    "learnable". The experts' GLU (GptOssExperts) is quick-GELU's (alpha 1.702): quick_geglu.
    It clamps its halves at swiglu_limit (7.0 by default): activation_func_clamp_value, and adds 1
    to the linear half: glu_linear_offset 1.0 (Megatron-Bridge 067f987d gpt_oss_bridge.py:82-84).
    Not expressible, noted in `source`: the router bias."""
    f = llama(r, head_dim_default=64)
    every = [True] * f["num_layers"]
    limit = r.cfg.get("swiglu_limit")
    limit = 7.0 if limit is None else limit
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not 0 < limit < 1e30:
        raise r.error("swiglu_limit", f"must be a positive number for {r.arch} (got {limit!r})")
    r.notes.append("router bias not modelled")
    return {
        **f,
        "add_bias_linear": True,
        "softmax_type": "learnable",
        "activation": "quick_geglu",  # GptOssExperts: gate * sigmoid(1.702 gate)
        "activation_func_clamp_value": float(limit),
        "glu_linear_offset": 1.0,
        **moe(r, ("num_local_experts", "num_experts"), f["ffn_hidden_size"], every),
        **window(r, f["num_layers"], every=False),
    }


# architectures[0] -> (model_type, mapper), in the order error messages list them
FAMILIES: dict[str, tuple[str, Callable[[Reader], Fields]]] = {
    "LlamaForCausalLM": ("llama", llama),
    "MistralForCausalLM": ("mistral", mistral),
    "MixtralForCausalLM": ("mixtral", _mixtral),
    "Llama4ForConditionalGeneration": ("llama4", llama4),
    "Qwen2ForCausalLM": ("qwen2", qwen2),
    "Qwen3ForCausalLM": ("qwen3", qwen3),
    "Qwen3MoeForCausalLM": ("qwen3_moe", qwen3_moe),
    "Qwen3NextForCausalLM": ("qwen3_next", qwen3_next),
    "Qwen3_5ForConditionalGeneration": ("qwen3_5", qwen3_5),
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5_moe", qwen3_5_moe),
    "DeepseekV3ForCausalLM": ("deepseek_v3", _deepseek_v3),
    "DeepseekV32ForCausalLM": ("deepseek_v32", _deepseek_v32),
    "GlmMoeDsaForCausalLM": ("glm_moe_dsa", _deepseek_v32),  # GLM-5: V3.2's fields
    "Glm4MoeLiteForCausalLM": ("glm4_moe_lite", _glm4_moe_lite),
    "DeepseekV2ForCausalLM": ("deepseek_v2", _deepseek_v2),
    "GptOssForCausalLM": ("gpt_oss", _gpt_oss),
    "Glm4MoeForCausalLM": ("glm4_moe", _glm4_moe),
    "MiniMaxM2ForCausalLM": ("minimax_m2", _minimax_m2),
    "Qwen2MoeForCausalLM": ("qwen2_moe", qwen2_moe),
    "DbrxForCausalLM": ("dbrx", _dbrx),
    "OlmoeForCausalLM": ("olmoe", _olmoe),
    "GraniteMoeForCausalLM": ("granitemoe", _granite_moe),
    "Phi3ForCausalLM": ("phi3", phi3),
    "SmolLM3ForCausalLM": ("smollm3", smollm3),
    "SeedOssForCausalLM": ("seed_oss", seed_oss),
    "Gemma2ForCausalLM": ("gemma2", gemma2),
    "Gemma3ForCausalLM": ("gemma3_text", gemma3),
    "Olmo2ForCausalLM": ("olmo2", olmo2),
    "GPT2LMHeadModel": ("gpt2", gpt2),
    "GPTNeoXForCausalLM": ("gpt_neox", gpt_neox),
    "BloomForCausalLM": ("bloom", bloom),
    "OPTForCausalLM": ("opt", opt),
    "NemotronForCausalLM": ("nemotron", nemotron),
    "NemotronHForCausalLM": ("nemotron_h", nemotron_h),
}
SUPPORTED: dict[str, str] = {arch: model_type for arch, (model_type, _) in FAMILIES.items()}
