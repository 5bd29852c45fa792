"""The model fields of a Megatron-Bridge override (`planner.emit.bridge`) that make the recipe's
model the plan's where planner times what they change.

A Bridge recipe builds its own model through its HF bridge (e.g. gpt_oss_bridge.py:83-88 at
NVIDIA-NeMo/Megatron-Bridge 067f987d sets activation_func_clamp_value, glu_linear_offset,
window_size, softmax_type), so a field left out keeps the recipe's value, not Megatron-Core's
default: each field below is written with the plan's value whatever it is (null and the default
included), under its TransformerConfig name (Megatron-LM 2a75ac12
megatron/core/transformer/transformer_config.py: mtp_num_layers :68, softmax_type :163,
glu_linear_offset :224, activation_func_clamp_value :228, qk_l2_norm :255, no_rope_freq :284,
linear_attention_freq :356, moe_shared_expert_intermediate_size :687,
moe_router_score_function :794, moe_router_enable_expert_bias :802, moe_apply_probs_on_input
:927), all of which GPTModelProvider takes (tests/data/megatron_bridge_config_schema.json). A
hybrid Mamba stack's pattern carries its MTP and linear-attention layers (HybridModelProvider),
so those two are left to it there. The sliding window is left to the recipe with a note
(`window_note`).
"""

from __future__ import annotations

from typing import Any

from planner.inputs.arch import ModelArch


def window_note(arch: ModelArch) -> str | None:
    """The sliding window is the one shape field left to the recipe's provider: providers read
    window_size their own way (Gemma 3's takes the HF count, an int, and subtracts one on each
    local layer, gemma3_provider.py:72, :251 at 067f987d, where Gemma 2's and gpt-oss's take
    Megatron-Core's (W, 0) tuple), so no one value is right for every recipe."""
    if arch.window_size is None:
        return None
    return (
        f"sliding-window attention: planned with a window of {arch.window_size} tokens on the "
        f"layers window_attn_skip_freq={arch.window_attn_skip_freq} leaves local: the recipe's "
        "model must set them (its provider reads window_size its own way)"
    )


def _freq(freq: int | tuple[int, ...] | None) -> int | list[int] | None:
    """A layer-frequency field as TransformerConfig takes it: an int N, a list, or None."""
    return list(freq) if isinstance(freq, tuple) else freq


def shape_fields(arch: ModelArch) -> dict[str, Any]:
    """The model table's shape fields for `arch` (the module docstring)."""
    out: dict[str, Any] = {
        "activation_func_clamp_value": arch.activation_func_clamp_value,
        "glu_linear_offset": float(arch.glu_linear_offset),
        "softmax_type": arch.softmax_type,
        "qk_l2_norm": arch.qk_l2_norm,
        "no_rope_freq": _freq(arch.no_rope_freq),
    }
    if not arch.is_hybrid:
        out["mtp_num_layers"] = arch.mtp_num_layers or None
        out["mtp_use_repeated_layer"] = arch.mtp_use_repeated_layer
        out["linear_attention_freq"] = _freq(arch.linear_attention_freq)
        if arch.has_gdn and arch.linear_attention_freq is not None:  # the GDN layers' sizes
            out["experimental_attention_variant"] = "gdn"
            for name in ("conv_kernel_dim", "key_head_dim", "value_head_dim"):
                out[f"linear_{name}"] = getattr(arch, f"linear_{name}")
            out["linear_num_key_heads"] = arch.linear_num_key_heads
            out["linear_num_value_heads"] = arch.linear_num_value_heads
    if arch.is_moe:
        out["moe_shared_expert_intermediate_size"] = arch.moe_shared_expert_intermediate_size
        out["moe_router_score_function"] = arch.moe_router_score_function
        out["moe_apply_probs_on_input"] = arch.moe_apply_probs_on_input
        out["moe_router_enable_expert_bias"] = arch.moe_router_enable_expert_bias
    return out
