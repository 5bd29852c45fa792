"""The layer tables of `planner.inputs.arch.ModelArch` (`ArchLayers`, the class it extends): the
kind of each decoder layer and of the MTP layers (`planner.inputs.hybrid.LayerKind`: a hybrid
pattern's, or a transformer's dense and MoE layers with their sliding-window and gated-delta-net
variants, as Megatron-Core picks them per layer), the kinds the model has, and counts of each kind
and of MoE layers over ranges of decoder layers (a pipeline rank's chunks), from prefix sums
computed once per model."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

from planner.inputs import hybrid
from planner.inputs.arch_fields import ArchFields
from planner.inputs.hybrid import DENSE, KIND_ORDER, MOE, LayerKind


class ArchLayers(ArchFields):
    """A model architecture's fields and its layer tables (`ModelArch` adds the checks and
    Megatron's defaults)."""

    @property
    def is_moe(self) -> bool:
        return self.num_moe_experts is not None

    @property
    def is_hybrid(self) -> bool:
        """A hybrid stack (`hybrid_layer_pattern`), not a transformer."""
        return self.hybrid_layer_pattern is not None

    def is_linear_attention(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-indexed) is a gated delta net, as Megatron-Core's
        `get_linear_attention_pattern` (experimental_attention_variant_module_specs.py
        d98e8a64): with an int N every layer but each N-th, with a list its 1s."""
        freq = self.linear_attention_freq
        return freq is not None and _marked(freq, layer)

    @property
    def has_gdn(self) -> bool:
        """Whether any layer (decoder or MTP) is a gated delta net."""
        return any(k.mixer == "gdn" for k in self.kinds)

    def is_windowed(self, layer: int) -> bool:
        """Whether decoder layer `layer` (0-indexed) attends over the sliding window, as
        Megatron-Core's `is_layer_window_attention` (transformer/utils.py @d98e8a64, 1-indexed
        layer numbers): every layer without window_attn_skip_freq, all but every N-th with an
        int N, the list's 1s."""
        freq = self.window_attn_skip_freq
        if self.window_size is None:
            return False
        return freq is None or _marked(freq, layer)

    @cached_property
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """The kind of each decoder layer: the hybrid pattern's, or a transformer's dense and MoE
        layers (moe_layer_freq), those with sliding-window attention their windowed kinds."""
        if self.hybrid_layer_pattern is not None:
            return hybrid.kinds_of(hybrid.parse(self.hybrid_layer_pattern).main)
        if not self.is_moe:
            base: tuple[LayerKind, ...] = (DENSE,) * self.num_layers
        elif isinstance(self.moe_layer_freq, tuple):
            base = tuple(MOE if x else DENSE for x in self.moe_layer_freq)
        else:
            base = tuple(
                MOE if i % self.moe_layer_freq == 0 else DENSE for i in range(self.num_layers)
            )
        if self.linear_attention_freq is not None:
            return tuple(
                hybrid.linear_attention(k) if self.is_linear_attention(i) else k
                for i, k in enumerate(base)
            )
        if self.window_size is None:
            return base
        return tuple(hybrid.windowed(k) if self.is_windowed(i) else k for i, k in enumerate(base))

    @cached_property
    def mtp_kinds(self) -> tuple[LayerKind, ...]:
        """The layers of one MTP depth: the hybrid pattern's MTP part, or one layer of the last
        decoder layer's kind (Megatron's GPT MTP, multi_token_prediction.py, builds it from the
        last layer's spec, gpt_layer_specs.py `get_gpt_mtp_block_spec_for_backend`), attending
        to the whole sequence where that layer's attention is windowed (the safe side where its
        window is not known)."""
        if self.hybrid_layer_pattern is not None:
            return hybrid.kinds_of(hybrid.parse(self.hybrid_layer_pattern).mtp)
        if not self.mtp_num_layers:
            return ()
        last = self.layer_kinds[-1]
        return (last if last.mixer == "gdn" else hybrid.whole_attention(last),)

    @cached_property
    def kinds(self) -> tuple[LayerKind, ...]:
        """The kinds of layer the model has (decoder and MTP layers), in `KIND_ORDER`; a
        transformer lists DENSE always and MOE with experts."""
        present = set(self.layer_kinds) | set(self.mtp_kinds)
        if not self.is_hybrid:
            present |= {DENSE} | ({MOE} if self.is_moe else set())
        return tuple(k for k in KIND_ORDER if k in present)

    @cached_property
    def kind_prefix(self) -> tuple[tuple[int, ...], ...]:
        """kind_prefix[i][j] = layers of kinds[j] among the first i decoder layers."""
        index = {k: j for j, k in enumerate(self.kinds)}
        row = [0] * len(self.kinds)
        out = [tuple(row)]
        for kind in self.layer_kinds:
            row[index[kind]] += 1
            out.append(tuple(row))
        return tuple(out)

    @cached_property
    def _kind_counts_memo(self) -> dict[tuple[range, ...], tuple[int, ...]]:
        return {}

    def kind_counts(self, chunks: Sequence[range]) -> tuple[int, ...]:
        """Layers of each of `kinds` in some ranges of decoder layers (a rank's chunks),
        remembered per ranges (the search asks for the same ranks' chunks again and again)."""
        key = tuple(chunks)
        got = self._kind_counts_memo.get(key)
        if got is None:
            out = [0] * len(self.kinds)
            prefix = self.kind_prefix
            for r in key:
                lo, hi = prefix[r.start], prefix[r.stop]
                for j in range(len(out)):
                    out[j] += hi[j] - lo[j]
            got = self._kind_counts_memo[key] = tuple(out)
        return got

    def mtp_counts(self) -> tuple[int, ...]:
        """Layers of each of `kinds` in all the MTP depths together."""
        return tuple(self.mtp_num_layers * self.mtp_kinds.count(k) for k in self.kinds)

    @cached_property
    def moe_layers(self) -> list[bool]:
        """One flag per decoder layer: True where the layer has a mixture of experts."""
        return [k.moe for k in self.layer_kinds]

    @cached_property
    def moe_prefix(self) -> tuple[int, ...]:
        """moe_prefix[i] = MoE layers among the first i decoder layers (num_layers + 1 entries)."""
        out = [0]
        for flag in self.moe_layers:
            out.append(out[-1] + flag)
        return tuple(out)

    def moe_count(self, layers: range) -> int:
        """MoE layers in a contiguous range of decoder layers."""
        return self.moe_prefix[layers.stop] - self.moe_prefix[layers.start]

    def moe_in(self, chunks: Sequence[range]) -> int:
        """MoE layers in some ranges of decoder layers (a pipeline rank's chunks)."""
        return sum(self.moe_count(r) for r in chunks)

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layers)


def _marked(freq: int | tuple[int, ...], layer: int) -> bool:
    """Whether Megatron's per-layer frequency flags (--window-attn-skip-freq,
    --linear-attention-freq) mark decoder layer `layer` (0-indexed): an int N every layer but each
    N-th (1-indexed layer numbers), a list its 1s."""
    if isinstance(freq, tuple):
        return bool(freq[layer])
    return (layer + 1) % freq != 0
