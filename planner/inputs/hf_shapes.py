"""The config.json pieces Hugging Face architecture families spell alike (dense shape, attention,
activation, tied embeddings, routed experts), as ModelArch fields; `planner.inputs.hf_families`
builds each family's mapping from them."""

from __future__ import annotations

from typing import Any

from planner.inputs.arch_fields import MAX_EXPERTS, MAX_LAYERS
from planner.inputs.errors import spelled_json
from planner.inputs.hf_fields import Reader

Fields = dict[str, Any]

GELU = (  # every GeLU approximation maps to Megatron's gelu
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_accurate",
    "gelu_python",
    "gelu_10",
    "quick_gelu",
)


def mlp(r: Reader, key: str, default: str, gated: bool) -> Fields:
    """activation + gated_linear_unit from hidden_act / activation_function."""
    act = r.text(key, default)
    if gated:
        table = {"silu": "swiglu", "swish": "swiglu", **dict.fromkeys(GELU, "geglu")}
    else:
        table = {
            "relu": "relu",
            "relu2": "squared_relu",
            "silu": "silu",
            "swish": "silu",
            **dict.fromkeys(GELU, "gelu"),
        }
    if act not in table:
        raise r.error(
            key,
            f"unsupported activation {spelled_json(act)} for {r.arch}; "
            f"supported: {', '.join(table)}",
        )
    return {"activation": table[act], "gated_linear_unit": gated}


def attention(r: Reader, hidden: int, heads: int, head_dim_default: int | None = None) -> Fields:
    """num_query_groups and kv_channels from num_key_value_heads and head_dim."""
    kv = r.opt_int("num_key_value_heads")
    head_dim = r.opt_int("head_dim", default=head_dim_default)
    if head_dim is None and hidden % heads == 0:
        head_dim = hidden // heads
    return {
        "num_query_groups": None if kv in (None, heads) else kv,
        "kv_channels": head_dim,
    }


def tied(r: Reader, default: bool) -> Fields:
    return {"untie_embeddings_and_output_weights": not r.flag("tie_word_embeddings", default)}


def dense_shape(r: Reader, ffn_key: str, head_dim_default: int | None = None) -> Fields:
    """The fields the HF-style configs spell alike: layers, hidden, ffn (under ffn_key), heads,
    the attention shape, vocabulary and positions."""
    hidden = r.req_int("hidden_size")
    heads = r.req_int("num_attention_heads")
    return {
        "num_layers": r.req_int("num_hidden_layers", maximum=MAX_LAYERS),
        "hidden_size": hidden,
        "ffn_hidden_size": r.req_int(ffn_key),
        "num_attention_heads": heads,
        **attention(r, hidden, heads, head_dim_default),
        "vocab_size": r.req_int("vocab_size"),
        "max_position_embeddings": r.opt_int("max_position_embeddings"),
    }


def gpt2_shape(r: Reader, *hidden_keys: str) -> Fields:
    """The same fields in GPT-2-era spelling (n_layer, n_head, n_inner; the newer names are also
    accepted); n_inner absent or null -> 4 x hidden."""
    hidden = r.req_int(*hidden_keys)
    heads = r.req_int("n_head", "num_attention_heads")
    return {
        "num_layers": r.req_int("n_layer", "num_hidden_layers", maximum=MAX_LAYERS),
        "hidden_size": hidden,
        "ffn_hidden_size": r.opt_int("n_inner", default=4 * hidden),
        "num_attention_heads": heads,
        **attention(r, hidden, heads),
        "vocab_size": r.req_int("vocab_size"),
    }


def llama(r: Reader, head_dim_default: int | None = None, gated: bool = True) -> Fields:
    """Llama, Mistral and the Qwen/Mixtral variants: RMSNorm, RoPE, gated MLP (gate/up/down).
    attention_bias / mlp_bias (default false) -> add_bias_linear (either one: erring high)."""
    return {
        **dense_shape(r, "intermediate_size", head_dim_default),
        **mlp(r, "hidden_act", "silu" if gated else "relu2", gated=gated),
        "normalization": "RMSNorm",
        "add_bias_linear": r.flag("attention_bias", False) or r.flag("mlp_bias", False),
        "position_embedding_type": "rope",
        **tied(r, False),
    }


def moe(
    r: Reader,
    experts: tuple[str, ...],
    expert_ffn: int,
    moe_layers: list[bool],
    topk: tuple[str, ...] = ("num_experts_per_tok",),
) -> Fields:
    """The routed experts (top num_experts_per_tok, or `topk`'s key); moe_layer_freq is 1 when
    every layer is MoE, else one 0/1 entry per layer."""
    return {
        "num_moe_experts": r.req_int(*experts, maximum=MAX_EXPERTS),
        "moe_router_topk": r.req_int(*topk),
        "moe_ffn_hidden_size": expert_ffn,
        "moe_layer_freq": 1 if all(moe_layers) else [int(m) for m in moe_layers],
    }


SCORE_FUNCTIONS = ("softmax", "sigmoid")
"""The scoring_func values read: the routers of the families that spell it."""


def router_score(r: Reader, default: str, expert_bias: bool = False) -> Fields:
    """scoring_func -> moe_router_score_function, as Megatron-Bridge maps it for every model
    (067f987d conversion/model_bridge.py:485); absent or null: `default`, the family's router.
    `expert_bias`: the family's bridge learns an expert bias (moe_router_enable_expert_bias),
    which Megatron-LM refuses beside softmax (d98e8a64 transformer_config.py:2617-2625): a
    softmax router the config spells drops it, with a note."""
    score = r.choice("scoring_func", default, SCORE_FUNCTIONS)
    if expert_bias and score == "softmax":
        r.notes.append("scoring_func softmax: no expert bias (Megatron takes it with sigmoid only)")
    return {
        "moe_router_score_function": score,
        "moe_router_enable_expert_bias": expert_bias and score != "softmax",
    }


def dense_first_moe(r: Reader, num_layers: int, experts: tuple[str, ...], freq: int = 1) -> Fields:
    """DeepSeekMoE's layout, which GLM-4.5 shares: layer i is MoE when i >= first_k_dense_replace
    and i % freq == 0; routed experts of moe_intermediate_size (`moe`) and n_shared_experts
    (may be null) shared ones of that width. Both count-changing fields are required."""
    expert_ffn = r.req_int("moe_intermediate_size")
    first_dense = r.req_int("first_k_dense_replace", minimum=0)
    shared = r.nullable_int("n_shared_experts", minimum=0)
    moe_layers = [i >= first_dense and i % freq == 0 for i in range(num_layers)]
    return {
        **moe(r, experts, expert_ffn, moe_layers),
        "moe_shared_expert_intermediate_size": shared * expert_ffn if shared else None,
    }


def window(r: Reader, num_layers: int, every: bool) -> Fields:
    """sliding_window w (HF: a query sees itself and the w - 1 tokens before it) -> window_size
    w - 1 (Megatron-Bridge's conversion, models/conversion/utils.py `mcore_to_hf_window_size`
    @067f987d: HF = Megatron's left window + 1), on the layers layer_types marks
    "sliding_attention": all of them -> no window_attn_skip_freq, all but every N-th -> N, else
    the 1 (window) / 0 list. Without layer_types, every layer when `every` (Mistral), else none
    (the whole sequence: the slower side)."""
    window = r.opt_int("sliding_window")
    types = r.cfg.get("layer_types")
    if window is None or (types is None and not every):
        return {}
    if types is None:
        return {"window_size": window - 1}
    kinds = ("sliding_attention", "full_attention")
    listed = isinstance(types, list) and len(types) == num_layers
    if not listed or any(t not in kinds for t in types):
        raise r.error(
            "layer_types",
            f'must list "sliding_attention" or "full_attention" for each of the {num_layers} '
            f"layers {spelled_json(types)}",
        )
    flags = tuple(int(t == kinds[0]) for t in types)
    out: Fields = {"window_size": window - 1}
    if all(flags):
        return out
    return {**out, "window_attn_skip_freq": skip_freq(flags)}


def skip_freq(flags: tuple[int, ...]) -> int | list[int]:
    """A per-layer 0/1 pattern as Megatron's frequency flags take it (--window-attn-skip-freq,
    --linear-attention-freq): the int N where layer k (from 1) is 0 iff k % N == 0, else the
    list."""
    for n in range(2, len(flags) + 1):
        if flags == tuple(int((i + 1) % n != 0) for i in range(len(flags))):
            return n
    return list(flags)


def partial_rope(r: Reader) -> None:
    """Note RoPE on part of each head (partial_rotary_factor below 1): timed as if whole."""
    rotary = r.cfg.get("partial_rotary_factor")
    if isinstance(rotary, int | float) and rotary < 1:
        r.notes.append(f"RoPE on {rotary:g} of each head (partial_rotary_factor) timed as whole")


def text_config(r: Reader, **fill: object) -> Reader:
    """A vision-language config's language model (its text_config object), read alone, `fill`
    standing in for fields it lacks: errors name the file and text_config, notes join the outer
    reader's."""
    text = r.cfg.get("text_config")
    if not isinstance(text, dict):
        raise r.error("text_config", f"must be an object (the language model) {spelled_json(text)}")
    outer_tie = r.cfg.get("tie_word_embeddings")  # the model's, where the text config has none
    tie = (
        {}
        if outer_tie is None or "tie_word_embeddings" in text
        else {"tie_word_embeddings": outer_tie}
    )
    sub = Reader({**fill, **tie, **text}, None, r.arch)
    sub.file = f"{r.file}: text_config"
    sub.notes = r.notes
    r.notes.append("the vision encoder is not modelled (text_config only)")
    return sub
