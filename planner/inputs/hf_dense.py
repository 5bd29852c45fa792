"""The dense Hugging Face architecture families (`planner.inputs.hf_families` maps them by
`architectures[0]`, beside the MoE and hybrid ones): Llama's relatives (Mistral, Phi-3,
SmolLM3, Seed-OSS, OLMo 2, Gemma 2 and 3, Nemotron-4; Qwen's are `planner.inputs.hf_qwen`'s)
and the GPT-2-era layouts (GPT-2, GPT-NeoX, BLOOM, OPT), each one small function from a
config.json's fields to ModelArch fields."""

from __future__ import annotations

from planner.inputs.hf_fields import Reader
from planner.inputs.hf_shapes import (
    Fields,
    dense_shape,
    gpt2_shape,
    llama,
    mlp,
    partial_rope,
    tied,
    window,
)


def olmo2(r: Reader) -> Fields:
    """OLMo 2 (Olmo2ForCausalLM; transformers' modeling_olmo2.py): Llama's shapes with RMSNorms of
    q and k (qk_layernorm) and its two norms after the attention and the MLP instead of before.
    Noted, not fields of ModelArch: the q / k norms span the whole projections (num_heads x
    head_dim and num_key_value_heads x head_dim weights where Megatron's have head_dim: a few
    thousand parameters a layer), and the norms' place (the same count and work)."""
    r.notes.append("q/k norms over whole projections and post-norms counted as per-head pre-norms")
    return {**llama(r), "qk_layernorm": True}


def mistral(r: Reader) -> Fields:
    """Mistral: Llama's shapes, sliding_window (when not null) on every layer."""
    f = llama(r)
    return {**f, **window(r, f["num_layers"], every=True)}


def gpt2(r: Reader) -> Fields:
    """GPT-2: n_embd / n_layer / n_head / n_positions."""
    return {
        **gpt2_shape(r, "n_embd", "hidden_size"),
        "max_position_embeddings": r.opt_int("n_positions", "max_position_embeddings"),
        **mlp(r, "activation_function", "gelu_new", gated=False),
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "position_embedding_type": "learned_absolute",
        **tied(r, True),
    }


def gpt_neox(r: Reader) -> Fields:
    """GPT-NeoX: partial rotary (rotary_pct), biases everywhere, untied by default."""
    return {
        **dense_shape(r, "intermediate_size"),
        **mlp(r, "hidden_act", "gelu", gated=False),
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "position_embedding_type": "rope",
        **tied(r, False),
    }


def bloom(r: Reader) -> Fields:
    """BLOOM: ALiBi (no position table), GeLU, tied. BLOOM-176B's config says n_embed /
    num_attention_heads, bloom-560m hidden_size / n_head. The LayerNorm after the word embedding
    (2h parameters) has no ModelArch field and is not counted."""
    return {
        **gpt2_shape(r, "hidden_size", "n_embed"),
        "activation": "gelu",
        "gated_linear_unit": False,
        "normalization": "LayerNorm",
        "add_bias_linear": True,
        "position_embedding_type": "alibi",
        **tied(r, True),
    }


def opt(r: Reader) -> Fields:
    """OPT: ffn_dim, ReLU, learned positions, tied. A word_embed_proj_dim other than hidden_size
    (OPT-350m) adds two small projections that ModelArch cannot express: noted in `source`."""
    hidden = r.req_int("hidden_size")
    proj = r.opt_int("word_embed_proj_dim", default=hidden)
    if proj != hidden:
        r.notes.append(
            f"word_embed_proj_dim {proj} != hidden_size {hidden}: embeddings are {proj} wide "
            "with project_in/project_out layers, not modelled"
        )
    return {
        **dense_shape(r, "ffn_dim"),
        **mlp(r, "activation_function", "relu", gated=False),
        "normalization": "LayerNorm",
        "add_bias_linear": r.flag("enable_bias", True),
        "position_embedding_type": "learned_absolute",
        **tied(r, True),
    }


def nemotron(r: Reader) -> Fields:
    """Nemotron-4: squared ReLU without GLU, LayerNorm1p (a LayerNorm), partial RoPE, head_dim."""
    return {**llama(r, gated=False), "normalization": "LayerNorm"}


def phi3(r: Reader) -> Fields:
    """Phi-3, Phi-3.5-mini and Phi-4 (Phi3ForCausalLM): Llama's shapes, q/k/v and gate/up each
    fused into one projection (the same weights); sliding_window, where set, on every layer
    (transformers' Phi3Attention passes it to each). RoPE on part of each head
    (partial_rotary_factor, Phi-4-mini) is noted: timed as if whole."""
    f = llama(r)
    partial_rope(r)
    return {**f, **window(r, f["num_layers"], every=True)}


def smollm3(r: Reader) -> Fields:
    """SmolLM3 (transformers' SmolLM3Config, which ties the embeddings by default): Llama's shapes;
    its layers without RoPE (no_rope_layers) have the same weights and are timed with it; the
    sliding window where use_sliding_window is true (every layer, as Mistral)."""
    f = {**llama(r), **tied(r, True)}
    no_rope = r.cfg.get("no_rope_layers")  # a note only: read where it is the 0/1 list
    if isinstance(no_rope, list) and 0 in no_rope:
        r.notes.append("layers without RoPE (no_rope_layers) timed with it")
    if not r.flag("use_sliding_window", False):
        return f
    return {**f, **window(r, f["num_layers"], every=True)}


def seed_oss(r: Reader) -> Fields:
    """Seed-OSS (transformers' SeedOssConfig): Llama's shapes with head_dim; attention_bias puts
    biases on q, k and v, attention_out_bias on o_proj and mlp_bias on the MLP, either of the
    last two -> add_bias_linear (every linear layer: erring high)."""
    f = llama(r)
    everywhere = r.flag("attention_out_bias", False) or r.flag("mlp_bias", False)
    qkv = r.flag("attention_bias", False)
    return {**f, "add_bias_linear": everywhere, "add_qkv_bias": qkv and not everywhere}


def gemma2(r: Reader) -> Fields:
    """Gemma 2 (transformers' Gemma2Config): Llama's shapes with head_dim (256 by default), GeLU
    on the gated MLP (hidden_activation, gelu_pytorch_tanh) -> geglu, tied embeddings; the
    sliding window on the layers layer_types marks, or without it on every other layer from the
    first (Gemma2Config's default: layer i slides where (i + 1) is odd) -> window_attn_skip_freq
    2. Not fields of ModelArch, noted: the logit soft-capping of attention and of the output
    (timed as plain attention), and the two extra RMSNorms per layer (2 h parameters)."""
    r.notes.append("logit soft-capping and the 2 extra norms per layer not modelled")
    return _gemma(r, 2)


def _gemma(r: Reader, every: int) -> Fields:
    """Gemma's shapes (`gemma2`), the window on the layers layer_types marks, else on all but
    every `every`-th layer."""
    act = "hidden_activation" if r.cfg.get("hidden_activation") is not None else "hidden_act"
    f = {
        **dense_shape(r, "intermediate_size", 256),
        **mlp(r, act, "gelu_pytorch_tanh", gated=True),
        "normalization": "RMSNorm",
        "add_bias_linear": r.flag("attention_bias", False),
        "position_embedding_type": "rope",
        **tied(r, True),
    }
    n = f["num_layers"]
    if r.cfg.get("layer_types") is None and r.cfg.get("sliding_window") is not None:
        slides = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)]
        r = r.with_fields(layer_types=slides)
    return {**f, **window(r, n, every=False)}


def gemma3(r: Reader) -> Fields:
    """Gemma 3's language model (Gemma3ForCausalLM; transformers' Gemma3TextConfig): Gemma 2's
    shapes (`gemma2`) with RMSNorms of q and k (qk_layernorm), no soft-capping, and without
    layer_types every sliding_window_pattern-th layer global (default 6: layer i slides where
    (i + 1) % 6 != 0, five local to one global)."""
    r.notes.append("the 2 extra norms per layer not modelled")
    every = r.opt_int("sliding_window_pattern", default=6) or 6
    return {**_gemma(r, every), "qk_layernorm": True}
