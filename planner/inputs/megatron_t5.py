"""Megatron-LM's T5 line (its example pretrain_t5.py, in examples, t5; Megatron-LM d98e8a64),
read into the plan's `[model]` num_layers and `[training]` seq_length and t5_encoder
(`planner.model.t5`).

validate_args (arguments.py): --num-layers and --encoder-num-layers cannot both be given; either
sets both num_layers and encoder_num_layers; --seq-length and --encoder-seq-length likewise.
pretrain_t5.py builds the encoder with encoder_num_layers layers and the decoder with num_layers,
so the two stacks are equally deep; --decoder-num-layers reaches neither (read, and said so).
The decoder runs on --decoder-seq-length tokens, the plan's seq_length. A LLaVA line (--img-h)
uses --encoder-num-layers for its vision transformer (`megatron_args_memory.vision`) and is not
T5."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line


def is_t5(line: Line) -> bool:
    """A T5 line: --encoder-num-layers or --decoder-num-layers without LLaVA's --img-h."""
    if line.has("--img-h"):
        return False
    return line.has("--encoder-num-layers") or line.has("--decoder-num-layers")


def t5_layers(line: Line) -> int:
    """Layers of each stack (validate_args: --num-layers or --encoder-num-layers, not both)."""
    where = line.where
    num, enc = line.integer("--num-layers"), line.integer("--encoder-num-layers")
    if num is not None and enc is not None:
        raise InputError(
            f"{where}: --encoder-num-layers: cannot be given with --num-layers (Megatron-LM "
            "asserts 'cannot have both num-layers and encoder-num-layers specified')"
        )
    layers = num if num is not None else enc
    if layers is None:
        raise InputError(f"{where}: --encoder-num-layers: required to size the T5 model")
    return layers


def t5_fields(
    line: Line, model: dict[str, Any], training: dict[str, Any], notes: list[str]
) -> None:
    """The T5 encoder (layers, encoder tokens) and the decoder's sequence, where the line is T5."""
    if not is_t5(line):
        return
    dec = line.integer("--decoder-seq-length")
    if dec is None:
        raise InputError(
            f"{line.where}: --decoder-seq-length: required for T5 (pretrain_t5.py sizes the "
            "decoder's samples with it)"
        )
    training["t5_encoder"] = [model["num_layers"], training["seq_length"]]
    training["seq_length"] = dec
    if line.integer("--decoder-num-layers") is not None:
        notes.append(
            "--decoder-num-layers: pretrain_t5.py builds the decoder with num_layers "
            f"({model['num_layers']}) layers, as deep as the encoder; the flag reaches neither"
        )
