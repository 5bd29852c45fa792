"""Layer kinds, and Megatron-LM's hybrid layer pattern (Mamba / attention / MLP / MoE stacks).

A decoder layer is a sequence mixer (attention, a Mamba-2 mixer or a gated delta net), a channel
block (a dense MLP or a mixture of experts), or both: a transformer layer is attention and an MLP
(`DENSE`) or attention and experts (`MOE`), its linear-attention layers a gated delta net in place
of the attention (`DENSE_GDN`, `MOE_GDN`: Megatron's --experimental-attention-variant gdn with
--linear-attention-freq, `planner.model.gdn`); the layers of a hybrid stack are one block each.
Everything per-layer in planner (parameters, FLOPs, activations, time) is the sum of a kind's
blocks and their norms, one norm per block.

The hybrid pattern (NVIDIA/Megatron-LM d98e8a64, megatron/core/models/hybrid/
hybrid_layer_allocation.py `Symbols`, `parse_hybrid_pattern`, `select_pipeline_segment`; the
layers themselves: hybrid_layer_specs.py `hybrid_stack_spec`) has one symbol per decoder layer:

    M  MambaLayer: the Mamba-2 mixer (its norm fused into in_proj)       `MAMBA`
    *  TransformerLayer with self-attention only (norm fused into QKV)   `ATTENTION`
    -  MLPLayer: a dense MLP only (norm fused into fc1)                  `MLP`
    E  MoETransformerLayer: a separate pre-MLP norm and the experts      `MOE_MLP`
    G  a gated delta net only (norm fused into in_proj)                  `GDN`

Megatron also knows D (DeepSeek sparse attention) and + (MLA), which planner does not model
(`NOT_MODELLED`). "|" separates pipeline segments of the main pattern (segment
k on pipeline rank k % pp, virtual stage k // pp; without "|" the layers split evenly over the
ranks, which must divide them). "/" starts the multi-token-prediction part: one copy of the same
pattern per MTP depth ("M*M*/*E/*E": main "M*M*", two depths of "*E").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mixer = Literal["attention", "mamba", "gdn"]
Channel = Literal["dense", "moe"]


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer is made of: a sequence mixer, a channel block, or both."""

    name: str
    mixer: Mixer | None
    ffn: Channel | None
    window: bool = False
    """Its attention is a sliding window (`ModelArch.window_size`), not the whole sequence."""

    @property
    def moe(self) -> bool:
        """Whether the channel block is a mixture of experts."""
        return self.ffn == "moe"

    @property
    def blocks(self) -> int:
        """Blocks in the layer (each with its norm and its TP collectives): 1 or 2."""
        return (self.mixer is not None) + (self.ffn is not None)


DENSE = LayerKind("dense", "attention", "dense")
"""A transformer layer: attention and a dense MLP."""
MOE = LayerKind("moe", "attention", "moe")
"""A transformer layer: attention and a mixture of experts."""
DENSE_WINDOW = LayerKind("dense-window", "attention", "dense", window=True)
"""`DENSE` whose attention is a sliding window."""
MOE_WINDOW = LayerKind("moe-window", "attention", "moe", window=True)
"""`MOE` whose attention is a sliding window."""
DENSE_GDN = LayerKind("dense-gdn", "gdn", "dense")
"""A transformer layer whose mixer is a gated delta net (a linear-attention layer), and an MLP."""
MOE_GDN = LayerKind("moe-gdn", "gdn", "moe")
"""A transformer layer whose mixer is a gated delta net, and a mixture of experts."""
MAMBA = LayerKind("M", "mamba", None)
ATTENTION = LayerKind("*", "attention", None)
MLP = LayerKind("-", None, "dense")
MOE_MLP = LayerKind("E", None, "moe")
GDN = LayerKind("G", "gdn", None)

KIND_OF_SYMBOL = {k.name: k for k in (MAMBA, ATTENTION, MLP, MOE_MLP, GDN)}
"""Megatron's hybrid pattern symbols that planner models, and their kinds."""

KIND_ORDER = (
    DENSE,
    MOE,
    DENSE_WINDOW,
    MOE_WINDOW,
    DENSE_GDN,
    MOE_GDN,
    MAMBA,
    ATTENTION,
    MLP,
    MOE_MLP,
    GDN,
)
"""The order kinds are listed in (`ModelArch.kinds`)."""

NOT_MODELLED = {
    "D": "DeepSeek sparse attention",
    "+": "multi-latent attention",
}
"""Megatron's other layer symbols (`Symbols.GDN`, `DS_ATTENTION`, `MLA`)."""

PIPE = "|"
MTP_SEPARATOR = "/"


def windowed(kind: LayerKind) -> LayerKind:
    """A transformer layer's kind with sliding-window attention."""
    return MOE_WINDOW if kind.moe else DENSE_WINDOW


def linear_attention(kind: LayerKind) -> LayerKind:
    """A transformer layer's kind with a gated delta net in place of its attention."""
    return MOE_GDN if kind.moe else DENSE_GDN


def whole_attention(kind: LayerKind) -> LayerKind:
    """A transformer layer's kind with softmax attention over the whole sequence."""
    return MOE if kind.moe else DENSE


def layer_kind(kind: bool | LayerKind) -> LayerKind:
    """A kind, or a transformer layer's MoE flag (False: `DENSE`, True: `MOE`) as its kind."""
    if isinstance(kind, LayerKind):
        return kind
    return MOE if kind else DENSE


@dataclass(frozen=True)
class Pattern:
    """A hybrid layer pattern, read."""

    segments: tuple[str, ...]
    """The main pattern's pipeline segments ("|"-separated; one when there is no "|")."""
    mtp: str
    """One MTP depth's pattern ("" without MTP)."""
    depths: int
    """MTP depths (copies of `mtp`)."""

    @property
    def main(self) -> str:
        """The main decoder's symbols, one per layer, without the separators."""
        return "".join(self.segments)

    @property
    def text(self) -> str:
        """The pattern without pipeline separators, as `ModelArch.hybrid_layer_pattern` holds it."""
        return MTP_SEPARATOR.join([self.main] + [self.mtp] * self.depths)

    @property
    def piped(self) -> str:
        """The pattern with its pipeline separators, as Megatron's --hybrid-layer-pattern."""
        return MTP_SEPARATOR.join([PIPE.join(self.segments)] + [self.mtp] * self.depths)


def parse(text: str) -> Pattern:
    """Read a pattern as Megatron does (`parse_hybrid_pattern`, `_validate_pattern`): the main
    part may hold "|", every MTP part must be the same and hold none. Raises ValueError saying
    what is wrong (a symbol planner does not model is refused by name)."""
    main, *mtp_parts = text.split(MTP_SEPARATOR)
    if mtp_parts and all(p == "" for p in mtp_parts):
        mtp_parts = []
    for what, part, pipes in [("main", main, True)] + [("MTP", p, False) for p in mtp_parts]:
        for c in part:
            if c in NOT_MODELLED:
                raise ValueError(
                    f"'{c}' ({NOT_MODELLED[c]}) layers are not modelled; planner models "
                    f"{', '.join(KIND_OF_SYMBOL)}"
                )
            if c not in KIND_OF_SYMBOL and not (pipes and c == PIPE):
                raise ValueError(
                    f"{c!r} in the {what} pattern is not a layer symbol (Megatron-LM's are M * - E "
                    f"G D +{' and the pipeline separator |' if pipes else ''})"
                )
    if mtp_parts:
        first = mtp_parts[0]
        if any(p != first for p in mtp_parts) or not first:
            raise ValueError(f"every MTP pattern after '/' must be the same (got {mtp_parts})")
    segments = tuple(main.split(PIPE))
    if not "".join(segments):
        raise ValueError("the main pattern has no layers")
    return Pattern(segments, mtp_parts[0] if mtp_parts else "", len(mtp_parts))


def kinds_of(symbols: str) -> tuple[LayerKind, ...]:
    """The kinds of a run of pattern symbols (validated by `parse`)."""
    return tuple(KIND_OF_SYMBOL[c] for c in symbols)
