"""The Qwen families' config.json mapped to ModelArch fields (`planner.inputs.hf_families` maps
them by `architectures[0]`): Qwen2 / Qwen2.5 and Qwen3 dense, Qwen1.5 / Qwen2-MoE, Qwen3-MoE,
Qwen3-Next and Qwen3.5. Defaults for absent keys are transformers' config classes' (@008e5743).

Their sliding window (transformers' Qwen2Config, Qwen3Config, Qwen2MoeConfig, Qwen3MoeConfig: each
sets sliding_window to None unless use_sliding_window, false by default and in every published
config) -> window_size on the layers it applies to:
- Qwen2 / Qwen3: the layers layer_types marks "sliding_attention"; without layer_types the config
  class derives them: layer i slides where i >= max_window_layers (28 by default).
- Qwen3-MoE: every layer (Qwen3MoeAttention sets sliding_window = config.sliding_window whatever
  the layer; its config has no layer_types and ignores max_window_layers).
- Qwen2-MoE: the layers layer_types marks; without it refused, transformers' versions disagreeing
  on the layers (Qwen2MoeConfig @008e5743 derives the even layers below max_window_layers, not
  Qwen2's rule).
"""

from __future__ import annotations

from planner.inputs.errors import spelled_json
from planner.inputs.hf_fields import Reader
from planner.inputs.hf_shapes import Fields, llama, moe, skip_freq, text_config, window

SLIDING_WINDOW = 4096
"""sliding_window's default in Qwen2Config, Qwen3Config, Qwen2MoeConfig and Qwen3MoeConfig."""
MAX_WINDOW_LAYERS = 28
"""max_window_layers' default in Qwen2Config and Qwen3Config."""
SHARED_EXPERT = 5632
"""shared_expert_intermediate_size's default in Qwen2MoeConfig (Qwen1.5-MoE-A2.7B's)."""


def _window_size(r: Reader) -> int | None:
    """sliding_window where use_sliding_window is true (absent: 4096; null: no window), else
    None."""
    if not r.flag("use_sliding_window", False):
        return None
    if "sliding_window" in r.cfg and r.cfg["sliding_window"] is None:
        return None
    return r.opt_int("sliding_window", default=SLIDING_WINDOW)


def _on_layers(r: Reader, n: int, size: int, types: object) -> Fields:
    """`window` of `size` on the layers `types` marks "sliding_attention"; none where no layer
    is."""
    f = window(r.with_fields(sliding_window=size, layer_types=types), n, every=False)
    freq = f.get("window_attn_skip_freq")
    return {} if isinstance(freq, list) and not any(freq) else f


def _dense_window(r: Reader, n: int) -> Fields:
    """Qwen2's and Qwen3's window: on the layers layer_types marks, else on i >= max_window_layers
    (Qwen2Config / Qwen3Config __post_init__)."""
    size = _window_size(r)
    if size is None:
        return {}
    types = r.cfg.get("layer_types")
    if types is None:
        first = r.opt_int("max_window_layers", default=MAX_WINDOW_LAYERS, minimum=0) or 0
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    return _on_layers(r, n, size, types)


def qwen2(r: Reader) -> Fields:
    """Qwen2 / Qwen2.5: bias on q, k, v only; the window as `_dense_window`."""
    f = {**llama(r), "add_qkv_bias": True, "add_bias_linear": False}
    return {**f, **_dense_window(r, f["num_layers"])}


def qwen3_shape(r: Reader, head_dim_default: int | None = 128) -> Fields:
    """Qwen3's shape: Llama's with q/k RMSNorm; head_dim defaults to 128 in Qwen3Config."""
    return {**llama(r, head_dim_default=head_dim_default), "qk_layernorm": True}


def qwen3(r: Reader) -> Fields:
    """Qwen3 dense: `qwen3_shape`, the window as `_dense_window`."""
    f = qwen3_shape(r)
    return {**f, **_dense_window(r, f["num_layers"])}


def _sparse_layers(r: Reader, n: int) -> list[bool]:
    """Layer i is MoE unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0."""
    step = r.opt_int("decoder_sparse_step", default=1) or 1
    dense = set(r.int_list("mlp_only_layers"))
    return [i not in dense and (i + 1) % step == 0 for i in range(n)]


def _qwen3_moe_shape(r: Reader, head_dim_default: int | None) -> Fields:
    """Qwen3-MoE's layout: `qwen3_shape`, the layers `_sparse_layers` picks MoE with num_experts
    of moe_intermediate_size."""
    f = qwen3_shape(r, head_dim_default)
    layers = _sparse_layers(r, f["num_layers"])
    return f | moe(r, ("num_experts",), r.req_int("moe_intermediate_size"), layers)


def qwen3_moe(r: Reader) -> Fields:
    """Qwen3-MoE (transformers' Qwen3MoeConfig, which has no head_dim: Qwen3MoeAttention takes
    getattr(config, "head_dim", hidden_size // num_attention_heads), so an absent head_dim is
    hidden / heads, not Qwen3Config's 128); the window, where used, on every layer."""
    f = _qwen3_moe_shape(r, None)
    size = _window_size(r)
    if size is None:
        return f
    every = r.with_fields(sliding_window=size, layer_types=None)
    return {**f, **window(every, f["num_layers"], every=True)}


def qwen2_moe(r: Reader) -> Fields:
    """Qwen1.5-MoE / Qwen2-MoE (transformers' modular_qwen2_moe.py): Qwen2's attention (bias on
    q, k and v), Qwen3-MoE's layer rule (`_sparse_layers`; a dense layer is intermediate_size
    wide), num_experts of moe_intermediate_size, top num_experts_per_tok, and a shared expert of
    shared_expert_intermediate_size (absent: Qwen2MoeConfig's 5632); its sigmoid gate
    (hidden_size weights a layer) is not counted. The window only on the layers layer_types
    marks (the module docstring)."""
    f = {**llama(r), "add_qkv_bias": True, "add_bias_linear": False}
    n = f["num_layers"]
    shared = r.opt_int("shared_expert_intermediate_size", default=SHARED_EXPERT, minimum=0)
    f = {
        **f,
        **moe(r, ("num_experts",), r.req_int("moe_intermediate_size"), _sparse_layers(r, n)),
        "moe_shared_expert_intermediate_size": shared or None,
    }
    size = _window_size(r)
    if size is None:
        return f
    types = r.cfg.get("layer_types")
    if types is None:
        raise r.error(
            "use_sliding_window",
            "true without layer_types: transformers' versions disagree on which layers of "
            "Qwen2-MoE slide (Qwen2MoeConfig @008e5743: the even layers below max_window_layers, "
            "unlike Qwen2's i >= max_window_layers); list each layer's kind in layer_types "
            f"(got {spelled_json(True)})",
        )
    return {**f, **_on_layers(r, n, size, types)}


def _gated_delta_nets(r: Reader, n: int) -> Fields:
    """The gated delta nets of Qwen3-Next and Qwen3.5 (transformers' Qwen3NextConfig and
    Qwen3_5TextConfig, same fields and defaults): on the layers layer_types marks
    "linear_attention" (without it, all but every full_attention_interval-th, 4 by default) ->
    linear_attention_freq, and the linear_* sizes; their full-attention layers are gated
    (q_proj makes the query and its output gate: attention_output_gate). RoPE on part of each head
    (partial_rotary_factor, 0.25) is timed as if whole."""
    types = r.cfg.get("layer_types")
    if types is None:
        every = r.opt_int("full_attention_interval", default=4, minimum=1) or 4
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    kinds = ("linear_attention", "full_attention")
    if not isinstance(types, list) or len(types) != n or any(t not in kinds for t in types):
        raise r.error(
            "layer_types",
            f'must list "linear_attention" or "full_attention" for each of the {n} layers '
            f"{spelled_json(types)}",
        )
    defaults = {"conv_kernel_dim": 4, "key_head_dim": 128, "value_head_dim": 128}
    defaults |= {"num_key_heads": 16, "num_value_heads": 32}
    linear = {f"linear_{k}": r.opt_int(f"linear_{k}", default=v) for k, v in defaults.items()}
    flags = tuple(int(t == kinds[0]) for t in types)
    r.notes.append("RoPE on part of each head (partial_rotary_factor) timed as whole")
    return {
        **linear,
        "attention_output_gate": True,
        "linear_attention_freq": skip_freq(flags) if any(flags) else None,
    }


def _mtp(r: Reader) -> Fields:
    """mtp_num_hidden_layers -> mtp_num_layers (absent: none), as Megatron-Bridge 067f987d maps it
    for every model (conversion/model_bridge.py:498); Qwen3-Next's, Qwen3.5's and Qwen3.5 MoE's
    text config spell it."""
    return {"mtp_num_layers": r.opt_int("mtp_num_hidden_layers", default=0, minimum=0)}


def qwen3_next(r: Reader) -> Fields:
    """Qwen3-Next (transformers' Qwen3NextConfig, whose defaults are Qwen3-Next-80B-A3B's): Qwen3's
    MoE layout (`_qwen3_moe_shape`) with one shared expert of shared_expert_intermediate_size,
    head_dim 256, and its gated delta nets (`_gated_delta_nets`); its MTP layers (`_mtp`)."""
    f = _qwen3_moe_shape(r, head_dim_default=256)
    shared = r.opt_int("shared_expert_intermediate_size", default=512, minimum=0)
    return {
        **f,
        **_gated_delta_nets(r, f["num_layers"]),
        "moe_shared_expert_intermediate_size": shared or None,
        **_mtp(r),
    }


def qwen3_5_moe(r: Reader) -> Fields:
    """Qwen3.5 MoE (Qwen3_5MoeForConditionalGeneration; transformers' Qwen3_5MoeTextConfig):
    Qwen3-Next's language model in text_config (`qwen3_next`), every layer MoE (the text config
    has no dense layers, no intermediate_size: ffn_hidden_size takes the expert width, unused)."""
    text = r.cfg.get("text_config")
    experts = text.get("moe_intermediate_size") if isinstance(text, dict) else None
    return qwen3_next(text_config(r, intermediate_size=experts))


def qwen3_5(r: Reader) -> Fields:
    """Qwen3.5 dense (Qwen3_5ForConditionalGeneration): Qwen3's dense shape in text_config with
    head_dim 256, the gated delta nets (`_gated_delta_nets`) and its MTP layers (`_mtp`: the dense
    Qwen3.5 bridge converts their weights, Megatron-Bridge 067f987d
    qwen_vl/qwen35_vl_bridge.py:365 `_get_dense_mtp_mappings`)."""
    t = text_config(r)
    f = qwen3_shape(t, head_dim_default=256)
    return {**f, **_gated_delta_nets(t, f["num_layers"]), **_mtp(t)}
