"""The `[model]` table of a plan read from Megatron-LM flags (for `megatron_args`): the shape
(`MODEL_INT`, `MODEL_SWITCH`; MLA's argparse defaults), the activation, normalization and softmax,
position embeddings, the MoE layer pattern and the sliding window, and Megatron's default FFN
width; hybrid Mamba stacks from `megatron_hybrid`, gated delta nets from `megatron_gdn`, DeepSeek
sparse attention from `megatron_dsa`, T5's layers from `megatron_t5`. Flag names and meanings:
Megatron-LM d98e8a64 (`megatron/training/arguments.py`, the config dataclasses)."""

from __future__ import annotations

import math
from typing import Any, get_args

from planner.inputs import megatron_dsa, megatron_gdn, megatron_t5
from planner.inputs.arch_fields import SoftmaxType
from planner.inputs.errors import InputError
from planner.inputs.megatron_hybrid import model_fields as hybrid_fields
from planner.inputs.megatron_line import Line
from planner.inputs.megatron_values import layer_pattern

# flag -> ModelArch field (integer valued)
MODEL_INT = {
    "--num-layers": "num_layers",
    "--hidden-size": "hidden_size",
    "--ffn-hidden-size": "ffn_hidden_size",
    "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups",
    "--kv-channels": "kv_channels",
    "--max-position-embeddings": "max_position_embeddings",
    "--num-experts": "num_moe_experts",
    "--moe-router-topk": "moe_router_topk",
    "--moe-ffn-hidden-size": "moe_ffn_hidden_size",
    "--moe-shared-expert-intermediate-size": "moe_shared_expert_intermediate_size",
    "--moe-latent-size": "moe_latent_size",
    "--q-lora-rank": "q_lora_rank",
    "--kv-lora-rank": "kv_lora_rank",
    "--qk-head-dim": "qk_head_dim",
    "--qk-pos-emb-head-dim": "qk_pos_emb_head_dim",
    "--v-head-dim": "v_head_dim",
    "--mtp-num-layers": "mtp_num_layers",
}
MLA_DEFAULTS = {
    "kv_lora_rank": 32,
    "qk_head_dim": 128,
    "qk_pos_emb_head_dim": 64,
    "v_head_dim": 128,
}
"""Megatron-LM d98e8a64's argparse defaults of the MLA shape (arguments.py `_add_mla_args`;
--q-lora-rank None: the query unfactored), which a --multi-latent-attention line may leave out."""
# flag -> ModelArch field set to a constant
MODEL_SWITCH: dict[str, tuple[str, Any]] = {
    "--untie-embeddings-and-output-weights": ("untie_embeddings_and_output_weights", True),
    "--disable-bias-linear": ("add_bias_linear", False),
    "--add-qkv-bias": ("add_qkv_bias", True),
    "--qk-layernorm": ("qk_layernorm", True),
    "--attention-output-gate": ("attention_output_gate", True),
    "--multi-latent-attention": ("multi_latent_attention", True),
    "--qk-l2-norm": ("qk_l2_norm", True),  # every layer (gpt_layer_specs.py:148-153)
    "--moe-apply-probs-on-input": ("moe_apply_probs_on_input", True),
    # aux-loss-free balancing (TransformerConfig d98e8a64 transformer_config.py:816); its
    # --moe-router-bias-update-rate (:821) changes no size or time and is left unread
    "--moe-router-enable-expert-bias": ("moe_router_enable_expert_bias", True),
}
SOFTMAX_TYPES: tuple[str, ...] = get_args(SoftmaxType)
"""--softmax-type's choices (`ModelArch.softmax_type`)."""
# Megatron position embeddings that store what RoPE stores (YaRN and multimodal RoPE rescale it)
_ROPE_LIKE = {"yarn": "rope", "mrope": "rope"}


def model_table(line: Line, notes: list[str], missing: list[str]) -> dict[str, Any]:
    """The `[model]` table; how the line was read is appended to `notes`, what it asks for that
    planner does not model to `missing`."""
    where = line.where
    model: dict[str, Any] = {}
    for flag, field in MODEL_INT.items():
        value = line.integer(flag)
        if value is not None:
            model[field] = value
    if megatron_t5.is_t5(line):
        model["num_layers"] = megatron_t5.t5_layers(line)
    elif line.has("--img-h") and (line.has("--num-layers") or line.has("--encoder-num-layers")):
        # LLaVA: validate_args' rule (arguments.py:1304-1311), then the language model's depth,
        # --decoder-num-layers where given (pretrain_vlm.py:123-126, Megatron-LM d98e8a64)
        layers = megatron_t5.t5_layers(line)
        model["num_layers"] = line.integer("--decoder-num-layers") or layers
    for flag, (field, value) in MODEL_SWITCH.items():
        if line.has(flag):
            model[field] = value
    model.update(hybrid_fields(line, model, notes))
    if model.get("mtp_num_layers") and line.has("--mtp-use-repeated-layer"):
        model["mtp_use_repeated_layer"] = True  # a transformer's MTP too (gpt_layer_specs.py:779)
    model.update(megatron_gdn.model_fields(line, "hybrid_layer_pattern" in model, notes))
    model.update(megatron_dsa.model_fields(line, "hybrid_layer_pattern" in model, missing))
    if not line.has("--group-query-attention"):
        model.pop("num_query_groups", None)  # Megatron ignores it without the switch
    else:  # TransformerConfig's argparse default (transformer_config.py d98e8a64)
        model.setdefault("num_query_groups", 1)
    if model.get("num_moe_experts") == 0:
        del model["num_moe_experts"]  # validate_args: --num-experts 0 is a dense model
    if model.get("multi_latent_attention"):
        for field, default in MLA_DEFAULTS.items():
            model.setdefault(field, default)
    model.update(_activation(line))
    model.update(_glu_fields(line))
    norm = line.text("--normalization")
    if norm is not None:
        model["normalization"] = norm
    softmax = line.text("--softmax-type")
    if softmax is not None:
        if softmax not in SOFTMAX_TYPES:
            raise InputError(
                f"{where}: --softmax-type: expected one of {', '.join(SOFTMAX_TYPES)} "
                f"(got {softmax!r})"
            )
        model["softmax_type"] = softmax
    # Megatron's default (arguments.py): learned absolute position embeddings; the legacy
    # --use-rotary-position-embeddings sets rope
    position = line.text("--position-embedding-type") or "learned_absolute"
    if line.has("--use-rotary-position-embeddings"):
        position = "rope"
    if position in _ROPE_LIKE:
        notes.append(f"--position-embedding-type {position}: stores what rope stores")
        position = _ROPE_LIKE[position]
    model["position_embedding_type"] = position
    for flag, field in (("--moe-layer-freq", "moe_layer_freq"), ("--no-rope-freq", "no_rope_freq")):
        freq = line.text(flag)
        if freq is not None:
            model[field] = layer_pattern(freq, f"{where}: {flag}")
    score = line.text("--moe-router-score-function")  # choices checked by megatron_choices
    if score is not None:
        model["moe_router_score_function"] = score
    model.update(_window(line, where))
    for required in ("num_layers", "hidden_size", "num_attention_heads"):
        if required not in model:
            flag = next(f for f, v in MODEL_INT.items() if v == required)
            why = ""
            if line.has("--use-checkpoint-args"):
                why = (
                    " (--use-checkpoint-args takes it from the checkpoint, which planner does "
                    "not read)"
                )
            raise InputError(f"{where}: {flag}: required to size the model, but not given{why}")
    if "ffn_hidden_size" not in model:  # (setdefault would size it from any hidden size)
        model["ffn_hidden_size"] = _default_ffn(model)
    _check_quick_geglu(line, model)
    return model


def _check_quick_geglu(line: Line, model: dict[str, Any]) -> None:
    """Megatron's MLP and shared experts fuse quick_gelu only with the routing probabilities
    (`_activation`): a fused --quick-geglu model with a dense MLP layer or a shared expert fails
    at its first forward."""
    if model.get("activation") != "quick_geglu" or line.has("--no-bias-gelu-fusion"):
        return
    freq = model.get("moe_layer_freq", 1)
    dense = (
        "num_moe_experts" not in model
        or (freq > 1 if isinstance(freq, int) else 0 in freq)
        or "-" in (model.get("hybrid_layer_pattern") or "")
    )
    if dense or model.get("moe_shared_expert_intermediate_size"):
        raise InputError(
            f"{line.where}: --quick-geglu: its fused bias-activation (on unless "
            "--no-bias-gelu-fusion) runs only in the routed experts; a dense MLP or a shared "
            "expert raises ValueError (Megatron-LM d98e8a64 mlp.py:317-318, "
            "shared_experts.py:292-293); add --no-bias-gelu-fusion"
        )


def _activation(line: Line) -> dict[str, Any]:
    """--swiglu (F.silu, gated), --quick-geglu (quick_gelu, gated: gpt-oss's GLU) or
    --squared-relu (argument_utils.py:314-326 d98e8a64). A nonzero --glu-linear-offset under the
    fused bias-activation kernel (bias_activation_fusion: --swiglu's from --no-bias-swiglu-fusion,
    --quick-geglu's from --no-bias-gelu-fusion, :316-319) Megatron takes only with quick_gelu
    (transformer_config.py:2440-2444 raises ValueError); and its MLP and shared experts fuse
    quick_gelu only where the routed experts weight it by the probabilities (mlp.py:317-318,
    shared_experts.py:292-293 raise 'Only support fusion of gelu and swiglu')."""
    offset = line.number("--glu-linear-offset") or 0.0
    if line.has("--swiglu"):
        if offset and not line.has("--no-bias-swiglu-fusion"):
            raise InputError(
                f"{line.where}: --glu-linear-offset {offset:g}: not with --swiglu's fused "
                "bias-SwiGLU (Megatron-LM d98e8a64 transformer_config.py:2440-2444 raises "
                "ValueError: a nonzero offset under bias_activation_fusion needs quick_gelu); "
                "add --no-bias-swiglu-fusion, or use --quick-geglu"
            )
        return {"gated_linear_unit": True, "activation": "swiglu"}
    if line.has("--quick-geglu"):
        return {"gated_linear_unit": True, "activation": "quick_geglu"}
    if line.has("--squared-relu"):
        return {"activation": "squared_relu"}
    return {}


def _glu_fields(line: Line) -> dict[str, float]:
    """--activation-func-clamp-value and --glu-linear-offset (TransformerConfig d98e8a64
    transformer_config.py:231, :235; gpt-oss: 7.0 and 1.0): `ModelArch`'s fields of the same
    names. The clamp must be finite and positive (as Megatron asserts for SwiGLU, :2476-2482)."""
    out: dict[str, float] = {}
    clamp = line.number("--activation-func-clamp-value")
    if clamp is not None:
        if not 0 < clamp < math.inf:
            raise InputError(
                f"{line.where}: --activation-func-clamp-value: must be finite and greater than "
                f"zero (got {clamp!r})"
            )
        out["activation_func_clamp_value"] = clamp
    offset = line.number("--glu-linear-offset")
    if offset is not None:
        if not math.isfinite(offset):
            raise InputError(f"{line.where}: --glu-linear-offset: must be finite (got {offset!r})")
        out["glu_linear_offset"] = offset
    return out


def _default_ffn(model: dict[str, Any]) -> int:
    """Megatron's default ffn_hidden_size: 4h, or int(4h x 2/3 / 64) x 64 with --swiglu, in
    integers (the same floor; a 400-digit hidden size overflows a float, and is then refused as
    the model's hidden_size)."""
    h = int(model["hidden_size"])
    if model.get("gated_linear_unit"):
        return 8 * h // 3 // 64 * 64
    return 4 * h


def _window(line: Line, where: str) -> dict[str, Any]:
    """--window-size L,R (Megatron's tuple_type: ints, -1 an infinite side) and
    --window-attn-skip-freq (an int or a 0/1 list expression, as --moe-layer-freq): a causal
    window of L tokens before each query; none with L = -1 or without the flag."""
    text = line.text("--window-size")
    if text is None:
        return {}
    parts = text.strip("()").split(",")
    try:
        left, right = (int(p) for p in parts)
    except ValueError:
        raise InputError(
            f"{where}: --window-size: expected two integers 'left,right' (got {text!r})"
        ) from None
    if left < -1 or right not in (0, -1):
        raise InputError(
            f"{where}: --window-size: planner models causal windows 'W,0' with W >= 0 or -1 "
            f"(got {text!r})"
        )
    if left == -1:
        return {}
    out: dict[str, Any] = {"window_size": left}
    freq = line.text("--window-attn-skip-freq")
    if freq is not None:
        out["window_attn_skip_freq"] = layer_pattern(freq, f"{where}: --window-attn-skip-freq")
    return out
