"""The gated delta net half of a Megatron-LM command line: --experimental-attention-variant gdn,
--linear-attention-freq and the --linear-* sizes as model fields (`planner.model.gdn`).

Megatron-LM d98e8a64 (transformer_config.py `experimental_attention_variant`, `__post_init__`;
models/gpt/experimental_attention_variant_module_specs.py): "gdn" (and its deprecated spelling
"gated_delta_net") builds a gated delta net in place of the attention of the layers
--linear-attention-freq marks (an int N: every N-th layer keeps softmax attention; or a 0/1 list
expression, 1 the linear-attention layers), which Megatron asserts is given; in a hybrid stack
the pattern's G layers are gated delta nets and the frequency is unused. The sizes default to
TransformerConfig's (conv width 4, key and value head dims 128, 16 key and 32 value heads).
Megatron-MoE-ModelZoo's scripts (e8650517) run a development branch that spelt the variant
--linear-attention-type gated_delta_net; the reader takes that too, with a note. "gdn2" (GDN-2's
channel-wise gates, a wider in_proj) is refused: planner models the gated delta net of "gdn";
"dsa" is read by `megatron_dsa`; any other value is refused, as Megatron's parser does (its
choices).
"""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line
from planner.inputs.megatron_values import layer_pattern

VARIANT_FLAG = "--experimental-attention-variant"
OLD_FLAG = "--linear-attention-type"
"""The development branch's spelling (not a d98e8a64 flag)."""
GDN_VARIANTS = ("gdn", "gated_delta_net")
VARIANTS = ("gdn", "gdn2", "dsa", "gated_delta_net")
"""TransformerConfig.experimental_attention_variant's choices (d98e8a64)."""
GDN_INT = {
    "--linear-conv-kernel-dim": "linear_conv_kernel_dim",
    "--linear-key-head-dim": "linear_key_head_dim",
    "--linear-value-head-dim": "linear_value_head_dim",
    "--linear-num-key-heads": "linear_num_key_heads",
    "--linear-num-value-heads": "linear_num_value_heads",
}


def _variant(line: Line, notes: list[str]) -> str | None:
    """The attention variant the line asks for (the old flag's value where only it is given)."""
    variant = line.text(VARIANT_FLAG)
    words = line.flags.get(OLD_FLAG)  # not a Megatron-LM d98e8a64 flag: not in READ
    if words is None:
        return variant
    line.used.add(OLD_FLAG)
    old = words[0] if words else ""
    if old not in GDN_VARIANTS:
        raise InputError(
            f"{line.where}: {OLD_FLAG}: {old!r} is not a gated delta net (planner models "
            f"{' and '.join(GDN_VARIANTS)})"
        )
    notes.append(
        f"{OLD_FLAG} {old}: read as {VARIANT_FLAG} gdn (a Megatron-LM development branch's "
        "spelling)"
    )
    return variant or old


def model_fields(line: Line, hybrid: bool, notes: list[str]) -> dict[str, Any]:
    """The gated delta net's model fields of a line (`hybrid`: a hybrid stack, whose G layers
    they size); {} where the line has none."""
    where = line.where
    variant = _variant(line, notes)
    if variant is not None and variant not in VARIANTS:
        raise InputError(
            f"{where}: {VARIANT_FLAG}: expected one of {', '.join(VARIANTS)} (got {variant!r})"
        )
    if variant == "gdn2":
        raise InputError(
            f"{where}: {VARIANT_FLAG} gdn2: GDN-2 (channel-wise decay, erase and write gates) is "
            "not modelled; planner models gdn"
        )
    out: dict[str, Any] = {}
    for flag, field in GDN_INT.items():
        value = line.integer(flag)
        if value is not None:
            out[field] = value
    if variant not in GDN_VARIANTS:
        return out if hybrid else {}
    if hybrid:
        return out
    freq = line.text("--linear-attention-freq")
    if freq is None:
        raise InputError(
            f"{where}: --linear-attention-freq: required with {VARIANT_FLAG} {variant} "
            "(Megatron-LM asserts it: it says which layers are gated delta nets)"
        )
    out["linear_attention_freq"] = layer_pattern(freq, f"{where}: --linear-attention-freq")
    return out
