"""ModelArch: a decoder-only transformer described with Megatron-LM's field names.

Field names are Megatron-Core `TransformerConfig` names (so `foo_bar` becomes `--foo-bar`), which is
what `model_zoo/*.toml`, inline `[model]` tables and the HF importer produce. Optional fields left
unset take Megatron's defaults (`num_query_groups` = heads, `kv_channels` = hidden / heads,
`moe_ffn_hidden_size` = `ffn_hidden_size`). What Megatron asserts of the fields is checked here;
the per-layer tables (each layer's kind, counts over a pipeline rank's layers) come from the class
ModelArch extends, `planner.inputs.arch_layers.ArchLayers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Self

from pydantic import model_validator

from planner.inputs import hybrid
from planner.inputs.arch_layers import ArchLayers
from planner.inputs.errors import abbreviated, spelled

MAX_SIZE = 1 << 53
"""The largest integer any field takes: 2^53, the last integer a float holds exactly (the model's
arithmetic is in floats). Real sizes stop far below it; a 400-digit hidden size is refused here,
not met as an overflow in the model (fields with a cap of their own, num_layers, say, meet it
first)."""


class ModelArch(ArchLayers):
    """One model architecture (its fields: `ArchFields`; its layer tables: `ArchLayers`).
    Validated on construction; frozen afterwards."""

    @model_validator(mode="after")
    def _check(self) -> ModelArch:
        for name, value in self:
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_SIZE:
                shown = abbreviated(str(value))
                raise ValueError(f"{name} ({shown}) must be at most 2^53 = {MAX_SIZE:,}")
        if self.kv_channels is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads}) when kv_channels is not given"
            )
        if self.num_attention_heads % self.query_groups:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_query_groups ({self.query_groups})"
            )
        if self.hybrid_layer_pattern is not None:
            self._check_hybrid(self.hybrid_layer_pattern)
        elif self.mtp_use_repeated_layer and not self.mtp_num_layers:
            raise ValueError("mtp_use_repeated_layer needs mtp_num_layers")
        # before the checks below, which read the layer kinds it gives
        if isinstance(self.moe_layer_freq, tuple) and len(self.moe_layer_freq) != self.num_layers:
            raise ValueError(
                f"moe_layer_freq has {len(self.moe_layer_freq)} entries but num_layers is "
                f"{self.num_layers}"
            )
        self._check_no_rope()
        self._check_window()
        self._check_linear_attention()
        self._check_dsa()
        if self.moe_latent_size is not None and self.num_moe_experts is None:
            raise ValueError("moe_latent_size needs num_moe_experts (a mixture of experts)")
        if self.num_moe_experts is not None and self.moe_router_topk > self.num_moe_experts:
            raise ValueError(
                f"moe_router_topk ({self.moe_router_topk}) exceeds num_moe_experts "
                f"({self.num_moe_experts})"
            )
        self._check_routing_groups()
        self._check_megatron_pairs()
        learned = self.position_embedding_type == "learned_absolute"
        if learned and self.max_position_embeddings is None and self.seq_length is None:
            raise ValueError(
                "position_embedding_type 'learned_absolute' needs max_position_embeddings"
            )
        if self.multi_latent_attention:
            missing = [
                f
                for f in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
                if getattr(self, f) is None
            ]
            if missing:
                raise ValueError(f"multi_latent_attention needs {', '.join(missing)}")
            if self.attention_output_gate:  # TransformerConfig raises NotImplementedError
                raise ValueError("attention_output_gate does not run with multi_latent_attention")
        return self

    def _check_megatron_pairs(self) -> None:
        """Settings Megatron-LM d98e8a64 refuses together: probabilities on the expert input only
        with top-1 routing (its MoE experts.py:918-921, :1475-1478); the L2 q/k norm not with
        multi-latent attention (gpt_layer_specs.py:105, :245); a SwiGLU's clamp only with MoE
        (transformer_config.py:2471-2486; gpt-oss's clamped GLU, with its offset, is a quick
        GEGLU, not a SwiGLU)."""
        if self.moe_apply_probs_on_input and self.moe_router_topk != 1:
            raise ValueError(
                f"moe_apply_probs_on_input needs moe_router_topk 1 (got {self.moe_router_topk})"
            )
        if self.qk_l2_norm and self.multi_latent_attention:
            raise ValueError("qk_l2_norm does not run with multi_latent_attention")
        swiglu = self.gated_linear_unit and self.activation in ("swiglu", "silu")
        if (
            self.activation_func_clamp_value is not None
            and swiglu
            and not self.glu_linear_offset
            and self.num_moe_experts is None
        ):
            raise ValueError(
                f"activation_func_clamp_value ({self.activation_func_clamp_value}) for a SwiGLU "
                "needs a mixture of experts (num_moe_experts)"
            )

    def _check_hybrid(self, text: str) -> None:
        """What Megatron asserts of a hybrid stack (hybrid_layer_allocation.py, mamba_mixer.py
        `MambaMixer.__init__`), with the pattern held without pipeline separators."""
        if hybrid.PIPE in text:
            raise ValueError(
                "hybrid_layer_pattern holds no pipeline separators ('|'): the split is the "
                "layout's (parallel.pipeline_layers or pipeline_model_parallel_layout)"
            )
        try:
            pattern = hybrid.parse(text)
        except ValueError as e:  # name the field and the value, not the parser's words alone
            raise ValueError(f"hybrid_layer_pattern {spelled(text)}: {e}") from None
        if len(pattern.main) != self.num_layers:
            raise ValueError(
                f"hybrid_layer_pattern has {len(pattern.main)} layers but num_layers is "
                f"{self.num_layers}"
            )
        if pattern.depths != self.mtp_num_layers:
            raise ValueError(
                f"hybrid_layer_pattern has {pattern.depths} MTP depths after '/' but "
                f"mtp_num_layers is {self.mtp_num_layers}"
            )
        if "E" in text and self.num_moe_experts is None:
            raise ValueError("hybrid_layer_pattern has MoE layers (E) but num_moe_experts is unset")
        if self.moe_layer_freq != 1:
            raise ValueError("moe_layer_freq cannot be combined with hybrid_layer_pattern (E)")
        if "M" not in text:  # the Mamba mixer's asserts run where it is built
            return
        if self.mamba_num_heads is None and 2 * self.hidden_size % self.mamba_head_dim:
            raise ValueError(
                f"2 x hidden_size ({2 * self.hidden_size}) must be a multiple of mamba_head_dim "
                f"({self.mamba_head_dim}) when mamba_num_heads is not given"
            )
        if self.mamba_heads % self.mamba_num_groups:
            raise ValueError(
                f"the Mamba heads ({self.mamba_heads}) must be a multiple of mamba_num_groups "
                f"({self.mamba_num_groups})"
            )

    # --- derived shape (Megatron's defaults applied)
    @property
    def query_groups(self) -> int:
        """KV heads: num_query_groups, or num_attention_heads for plain multi-head attention."""
        return self.num_query_groups or self.num_attention_heads

    @property
    def head_dim(self) -> int:
        """kv_channels, or hidden_size / num_attention_heads."""
        return self.kv_channels or self.hidden_size // self.num_attention_heads

    @property
    def expert_ffn(self) -> int:
        """Per-expert MLP width (moe_ffn_hidden_size, default ffn_hidden_size)."""
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    @property
    def expert_hidden(self) -> int:
        """Width of the tokens the routed experts read and write, and the dispatcher moves:
        moe_latent_size for a latent MoE, else hidden_size."""
        return self.moe_latent_size or self.hidden_size

    @property
    def mamba_heads(self) -> int:
        """Mamba-2 heads: mamba_num_heads, or d_inner / head dim with d_inner = 2 x hidden
        (MambaMixer's expand = 2, mamba_mixer.py)."""
        return self.mamba_num_heads or 2 * self.hidden_size // self.mamba_head_dim

    @property
    def mamba_inner(self) -> int:
        """d_inner, the Mamba-2 mixer's width: heads x head dim."""
        return self.mamba_heads * self.mamba_head_dim

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` applied, whose derived tables (`layer_kinds`, `kind_prefix`, the
        other cached properties) are computed afresh: pydantic copies the instance's __dict__,
        where functools.cached_property keeps them, so a copy with fewer layers would otherwise
        carry the original's."""
        copy = super().model_copy(update=update, deep=deep)
        for cls in (ArchLayers, ModelArch):
            for name, attr in vars(cls).items():
                if isinstance(attr, cached_property):
                    copy.__dict__.pop(name, None)
        return copy

    def _check_routing_groups(self) -> None:
        """Group-limited routing as TransformerConfig asserts it (the same rule as a plan's
        training overrides, `planner.search.rules.features.routing`)."""
        groups, topk = self.moe_router_num_groups, self.moe_router_group_topk
        if groups is None:
            if topk is not None:
                raise ValueError(f"moe_router_group_topk ({topk}) needs moe_router_num_groups")
            return
        if self.num_moe_experts is None:
            raise ValueError("moe_router_num_groups needs num_moe_experts (a mixture of experts)")
        if self.num_moe_experts % groups:
            raise ValueError(
                f"num_moe_experts ({self.num_moe_experts}) must be a multiple of "
                f"moe_router_num_groups ({groups})"
            )
        if topk is not None and topk > groups:
            raise ValueError(
                f"moe_router_group_topk ({topk}) exceeds moe_router_num_groups ({groups})"
            )

    def _check_no_rope(self) -> None:
        """Megatron-LM d98e8a64 transformer_config.py:3140-3152 asserts an integer no_rope_freq
        divides num_layers and a list of them is num_layers long."""
        freq, n = self.no_rope_freq, self.num_layers
        if isinstance(freq, int) and n % freq:
            raise ValueError(f"no_rope_freq ({freq}) must divide num_layers ({n})")
        if isinstance(freq, tuple) and len(freq) != n:
            raise ValueError(f"no_rope_freq has {len(freq)} entries but num_layers is {n}")

    def _check_window(self) -> None:
        if self.window_size is None:
            if self.window_attn_skip_freq is not None:
                raise ValueError("window_attn_skip_freq needs window_size")
            return
        if self.hybrid_layer_pattern is not None:
            raise ValueError("window_size in a hybrid stack is not modelled")
        freq = self.window_attn_skip_freq
        if isinstance(freq, tuple) and len(freq) != self.num_layers:
            raise ValueError(
                f"window_attn_skip_freq has {len(freq)} entries but num_layers is {self.num_layers}"
            )

    def _check_dsa(self) -> None:
        """What Megatron asserts of DeepSeek sparse attention (experimental_attention_variant
        "dsa": the indexer's sizes have no defaults; the absorbed MLA it runs on)."""
        given = [
            self.dsa_indexer_n_heads is not None,
            self.dsa_indexer_head_dim is not None,
            self.dsa_indexer_topk is not None,
        ]
        if not any(given):
            return
        if not all(given):
            raise ValueError(
                "DeepSeek sparse attention needs dsa_indexer_n_heads, dsa_indexer_head_dim and "
                "dsa_indexer_topk together"
            )
        if not self.multi_latent_attention:
            raise ValueError(
                "DeepSeek sparse attention (dsa_indexer_*) needs multi_latent_attention"
            )
        if self.hybrid_layer_pattern is not None:
            raise ValueError(
                "DeepSeek sparse attention in a hybrid stack (D layers) is not modelled"
            )
        if self.add_bias_linear:  # AbsorbedMLASelfAttention asserts it
            raise ValueError("DeepSeek sparse attention needs add_bias_linear = false")

    def _check_linear_attention(self) -> None:
        """What Megatron asserts of a gated delta net (TransformerConfig.__post_init__; the
        divisibility by tp x cp is the layout's, `planner.search.rules`)."""
        freq = self.linear_attention_freq
        if freq is not None:
            if self.hybrid_layer_pattern is not None:
                raise ValueError(
                    "linear_attention_freq does not combine with hybrid_layer_pattern (its "
                    "gated delta net layers are the pattern's G)"
                )
            if self.window_size is not None:
                raise ValueError("window_size with linear_attention_freq is not modelled")
            if self.multi_latent_attention:
                raise ValueError(
                    "linear_attention_freq with multi_latent_attention is not modelled"
                )
            if isinstance(freq, tuple) and len(freq) != self.num_layers:
                raise ValueError(
                    f"linear_attention_freq has {len(freq)} entries but num_layers is "
                    f"{self.num_layers}"
                )
        if self.has_gdn and self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError(
                f"linear_num_value_heads ({self.linear_num_value_heads}) must be a multiple of "
                f"linear_num_key_heads ({self.linear_num_key_heads})"
            )

    @cached_property
    def has_dsa(self) -> bool:
        """Whether the attention layers run DeepSeek sparse attention (`planner.model.dsa`)."""
        return self.dsa_indexer_topk is not None

    def padded_vocab(self, tp: int = 1) -> int:
        """Megatron's padded vocabulary: a multiple of make_vocab_size_divisible_by x tp."""
        m = self.make_vocab_size_divisible_by * tp
        return -(-self.vocab_size // m) * m
