"""What Megatron-LM asserts of a model description, checked when a `ModelArch` is built
(`planner.inputs.arch.ModelArch`'s validator): head and group divisibility, a hybrid stack's
pattern, sliding windows, gated delta nets, DeepSeek sparse attention, the MoE layer pattern and
group-limited routing, multi-latent attention's sizes. Each rule raises ValueError naming the
field and its value (pydantic reports it against the model's table)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.inputs import hybrid

if TYPE_CHECKING:
    from planner.inputs.arch import ModelArch


def check(arch: ModelArch) -> None:
    """Raise ValueError at the first of Megatron's assertions `arch` fails."""
    if arch.kv_channels is None and arch.hidden_size % arch.num_attention_heads:
        raise ValueError(
            f"hidden_size ({arch.hidden_size}) must be a multiple of num_attention_heads "
            f"({arch.num_attention_heads}) when kv_channels is not given"
        )
    if arch.num_attention_heads % arch.query_groups:
        raise ValueError(
            f"num_attention_heads ({arch.num_attention_heads}) must be a multiple of "
            f"num_query_groups ({arch.query_groups})"
        )
    if arch.hybrid_layer_pattern is not None:
        _check_hybrid(arch, arch.hybrid_layer_pattern)
    elif arch.mtp_use_repeated_layer and not arch.mtp_num_layers:
        raise ValueError("mtp_use_repeated_layer needs mtp_num_layers")
    _check_window(arch)
    _check_linear_attention(arch)
    _check_dsa(arch)
    if isinstance(arch.moe_layer_freq, tuple) and len(arch.moe_layer_freq) != arch.num_layers:
        raise ValueError(
            f"moe_layer_freq has {len(arch.moe_layer_freq)} entries but num_layers is "
            f"{arch.num_layers}"
        )
    if arch.moe_latent_size is not None and arch.num_moe_experts is None:
        raise ValueError("moe_latent_size needs num_moe_experts (a mixture of experts)")
    if arch.num_moe_experts is not None and arch.moe_router_topk > arch.num_moe_experts:
        raise ValueError(
            f"moe_router_topk ({arch.moe_router_topk}) exceeds num_moe_experts "
            f"({arch.num_moe_experts})"
        )
    _check_routing_groups(arch)
    learned = arch.position_embedding_type == "learned_absolute"
    if learned and arch.max_position_embeddings is None and arch.seq_length is None:
        raise ValueError("position_embedding_type 'learned_absolute' needs max_position_embeddings")
    if arch.multi_latent_attention:
        missing = [
            f
            for f in ("kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")
            if getattr(arch, f) is None
        ]
        if missing:
            raise ValueError(f"multi_latent_attention needs {', '.join(missing)}")
        if arch.attention_output_gate:  # TransformerConfig raises NotImplementedError
            raise ValueError("attention_output_gate does not run with multi_latent_attention")


def _check_hybrid(arch: ModelArch, text: str) -> None:
    """What Megatron asserts of a hybrid stack (hybrid_layer_allocation.py, mamba_mixer.py
    `MambaMixer.__init__`), with the pattern held without pipeline separators."""
    if hybrid.PIPE in text:
        raise ValueError(
            "hybrid_layer_pattern holds no pipeline separators ('|'): the split is the "
            "layout's (parallel.pipeline_layers or pipeline_model_parallel_layout)"
        )
    pattern = hybrid.parse(text)
    if len(pattern.main) != arch.num_layers:
        raise ValueError(
            f"hybrid_layer_pattern has {len(pattern.main)} layers but num_layers is "
            f"{arch.num_layers}"
        )
    if pattern.depths != arch.mtp_num_layers:
        raise ValueError(
            f"hybrid_layer_pattern has {pattern.depths} MTP depths after '/' but "
            f"mtp_num_layers is {arch.mtp_num_layers}"
        )
    if "E" in text and arch.num_moe_experts is None:
        raise ValueError("hybrid_layer_pattern has MoE layers (E) but num_moe_experts is unset")
    if arch.moe_layer_freq != 1:
        raise ValueError("moe_layer_freq cannot be combined with hybrid_layer_pattern (E)")
    if "M" not in text:  # the Mamba mixer's asserts run where it is built
        return
    if arch.mamba_num_heads is None and 2 * arch.hidden_size % arch.mamba_head_dim:
        raise ValueError(
            f"2 x hidden_size ({2 * arch.hidden_size}) must be a multiple of mamba_head_dim "
            f"({arch.mamba_head_dim}) when mamba_num_heads is not given"
        )
    if arch.mamba_heads % arch.mamba_num_groups:
        raise ValueError(
            f"the Mamba heads ({arch.mamba_heads}) must be a multiple of mamba_num_groups "
            f"({arch.mamba_num_groups})"
        )


def _check_routing_groups(arch: ModelArch) -> None:
    """Group-limited routing as TransformerConfig asserts it (the same rule as a plan's
    training overrides, `planner.search.rules.features.routing`)."""
    groups, topk = arch.moe_router_num_groups, arch.moe_router_group_topk
    if groups is None:
        if topk is not None:
            raise ValueError(f"moe_router_group_topk ({topk}) needs moe_router_num_groups")
        return
    if arch.num_moe_experts is None:
        raise ValueError("moe_router_num_groups needs num_moe_experts (a mixture of experts)")
    if arch.num_moe_experts % groups:
        raise ValueError(
            f"num_moe_experts ({arch.num_moe_experts}) must be a multiple of "
            f"moe_router_num_groups ({groups})"
        )
    if topk is not None and topk > groups:
        raise ValueError(f"moe_router_group_topk ({topk}) exceeds moe_router_num_groups ({groups})")


def _check_window(arch: ModelArch) -> None:
    if arch.window_size is None:
        if arch.window_attn_skip_freq is not None:
            raise ValueError("window_attn_skip_freq needs window_size")
        return
    if arch.hybrid_layer_pattern is not None:
        raise ValueError("window_size in a hybrid stack is not modelled")
    freq = arch.window_attn_skip_freq
    if isinstance(freq, tuple) and len(freq) != arch.num_layers:
        raise ValueError(
            f"window_attn_skip_freq has {len(freq)} entries but num_layers is {arch.num_layers}"
        )


def _check_dsa(arch: ModelArch) -> None:
    """What Megatron asserts of DeepSeek sparse attention (experimental_attention_variant
    "dsa": the indexer's sizes have no defaults; the absorbed MLA it runs on)."""
    given = [
        arch.dsa_indexer_n_heads is not None,
        arch.dsa_indexer_head_dim is not None,
        arch.dsa_indexer_topk is not None,
    ]
    if not any(given):
        return
    if not all(given):
        raise ValueError(
            "DeepSeek sparse attention needs dsa_indexer_n_heads, dsa_indexer_head_dim and "
            "dsa_indexer_topk together"
        )
    if not arch.multi_latent_attention:
        raise ValueError("DeepSeek sparse attention (dsa_indexer_*) needs multi_latent_attention")
    if arch.hybrid_layer_pattern is not None:
        raise ValueError("DeepSeek sparse attention in a hybrid stack (D layers) is not modelled")
    if arch.add_bias_linear:  # AbsorbedMLASelfAttention asserts it
        raise ValueError("DeepSeek sparse attention needs add_bias_linear = false")


def _check_linear_attention(arch: ModelArch) -> None:
    """What Megatron asserts of a gated delta net (TransformerConfig.__post_init__; the
    divisibility by tp x cp is the layout's, `planner.search.rules`)."""
    freq = arch.linear_attention_freq
    if freq is not None:
        if arch.hybrid_layer_pattern is not None:
            raise ValueError(
                "linear_attention_freq does not combine with hybrid_layer_pattern (its "
                "gated delta net layers are the pattern's G)"
            )
        if arch.window_size is not None:
            raise ValueError("window_size with linear_attention_freq is not modelled")
        if arch.multi_latent_attention:
            raise ValueError("linear_attention_freq with multi_latent_attention is not modelled")
        if isinstance(freq, tuple) and len(freq) != arch.num_layers:
            raise ValueError(
                f"linear_attention_freq has {len(freq)} entries but num_layers is {arch.num_layers}"
            )
    if arch.has_gdn and arch.linear_num_value_heads % arch.linear_num_key_heads:
        raise ValueError(
            f"linear_num_value_heads ({arch.linear_num_value_heads}) must be a multiple of "
            f"linear_num_key_heads ({arch.linear_num_key_heads})"
        )
