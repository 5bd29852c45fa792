"""The fields of `planner.inputs.arch.ModelArch`, Megatron-Core `TransformerConfig` names
(`foo_bar` is `--foo-bar`), with their types, defaults and caps: `ArchFields`. `ModelArch`
adds what Megatron asserts of them, Megatron's defaults for the ones left unset, and the layer
tables; its fields are these."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from planner.inputs.fields import (
    FiniteFloat,
    Flag,
    Integer,
    Label,
    Name,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Text,
)

MAX_LAYERS = 10_000
"""Decoder layers a model may have. The deepest published decoders have about a hundred (GPT-3 96,
Llama 3.1 405B 126, the 1T-parameter GPT of Narayanan et al. 2021 128); ten thousand leaves room for
experiments and bounds the per-layer tables (MoE pattern, pipeline splits) that a mistyped count
would otherwise make unbounded."""

MAX_WINDOW = 1 << 24
"""Tokens of a sliding attention window: 16,777,216, above any sequence planner plans (published
windows: 128 in gpt-oss, 4,096 in Mistral 7B and Gemma 2)."""

MAX_EXPERTS = 1 << 20
"""Routed experts per MoE layer: 1,048,576, the product-key "million experts" of PEER (He 2024);
production MoEs have 8-384. Bounds the search's walk over the expert-parallel degrees (the
divisors of the expert count)."""


SoftmaxType = Literal["vanilla", "off-by-one", "learnable"]
"""Megatron --softmax-type's choices (TransformerConfig.softmax_type, d98e8a64)."""


class ArchFields(BaseModel):
    """A model architecture's fields as given (`ModelArch` validates and derives)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name = Field(description="catalog name, lower-case and hyphenated")
    source: Text = Field(default="", description="where the figures come from")
    display_name: Label = ""

    # --- dense shape
    num_layers: PositiveInt = Field(
        le=MAX_LAYERS, description="decoder layers (MTP layers not included)"
    )
    hidden_size: PositiveInt
    ffn_hidden_size: PositiveInt = Field(description="dense MLP width (per GLU branch)")
    num_attention_heads: PositiveInt
    num_query_groups: PositiveInt | None = Field(
        default=None, description="KV heads for GQA/MQA; None = num_attention_heads (MHA)"
    )
    kv_channels: PositiveInt | None = Field(
        default=None, description="head dimension; None = hidden_size / num_attention_heads"
    )
    vocab_size: PositiveInt
    make_vocab_size_divisible_by: PositiveInt = 128
    max_position_embeddings: PositiveInt | None = None
    seq_length: PositiveInt | None = Field(
        default=None, le=MAX_WINDOW, description="training length, if fixed"
    )

    gated_linear_unit: Flag = Field(default=False, description="SwiGLU/GeGLU: 3 MLP matrices")
    activation: Literal[
        "gelu", "swiglu", "geglu", "quick_geglu", "squared_relu", "relu", "silu"
    ] = Field(
        default="gelu",
        description="gated (gated_linear_unit): swiglu / silu (SiLU), geglu (erf or tanh "
        "GELU: Gemma), quick_geglu (x sigmoid(1.702 x): Megatron --quick-geglu, gpt-oss)",
    )
    activation_func_clamp_value: PositiveFloat | None = Field(
        default=None,
        description="Megatron --activation-func-clamp-value (HF gpt-oss swiglu_limit): the GLU "
        "clamps its gate half to at most this and its linear half to within +-this before the "
        "activation (gpt-oss: 7.0); None = no clamp",
    )
    glu_linear_offset: FiniteFloat = Field(
        default=0.0,
        description="Megatron --glu-linear-offset: added to the GLU's linear half before the "
        "product (gpt-oss's quick_geglu: 1.0; with bias_activation_fusion Megatron allows it "
        "only for quick_geglu, transformer_config.py:2440 d98e8a64: a swiglu with an offset runs "
        "unfused, training.fused_swiglu = false)",
    )
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    add_bias_linear: Flag = Field(default=True, description="biases on every linear layer")
    add_qkv_bias: Flag = Field(default=False, description="bias on QKV only (Qwen2)")
    qk_layernorm: Flag = False
    attention_output_gate: Flag = Field(
        default=False,
        description="Megatron --attention-output-gate (Qwen3-Next): the QKV projection also "
        "makes a query-sized gate, and sigmoid(gate) scales the attention output",
    )
    softmax_type: SoftmaxType = Field(
        default="vanilla",
        description="Megatron --softmax-type: the attention softmax with an extra logit in its "
        "denominator, 0 (off-by-one) or learned per head (learnable: gpt-oss's attention sinks)",
    )
    position_embedding_type: Literal["learned_absolute", "rope", "alibi", "none"] = "rope"
    no_rope_freq: PositiveInt | tuple[Annotated[Literal[0, 1], Integer], ...] | None = Field(
        default=None,
        description="Megatron --no-rope-freq (Llama 4): int N, every N-th layer applies no RoPE; "
        "or a 1 (no RoPE) / 0 list, one per layer; None = RoPE in every layer",
    )
    qk_l2_norm: Flag = Field(
        default=False,
        description="Megatron --qk-l2-norm (Llama 4): a parameter-free L2 norm of q and k",
    )
    untie_embeddings_and_output_weights: Flag = False

    # --- mixture of experts (Megatron: --num-experts, --moe-*)
    num_moe_experts: PositiveInt | None = Field(
        default=None, le=MAX_EXPERTS, description="None = dense model"
    )
    moe_router_topk: PositiveInt = 2
    moe_router_score_function: Literal["softmax", "sigmoid", "sqrtsoftplus"] = "softmax"
    moe_router_enable_expert_bias: Flag = Field(
        default=False,
        description="Megatron --moe-router-enable-expert-bias (aux-loss-free balancing: "
        "DeepSeek-V3, Kimi K2, GLM-4.5 / 5, Nemotron 3): an fp32 bias per expert added to the "
        "scores that pick the top k, updated from the token counts each step; sigmoid or "
        "sqrtsoftplus routers only",
    )

    @field_validator("moe_router_enable_expert_bias")
    @classmethod
    def _expert_bias_router(cls, bias: bool, info: ValidationInfo) -> bool:
        """As Megatron-LM d98e8a64 refuses it (transformer_config.py:2617-2625, a ValueError for
        any model, dense ones included, whose default router is softmax): the expert bias only
        beside a sigmoid or sqrtsoftplus router, and (planner's) only in a mixture of experts."""
        score = info.data.get("moe_router_score_function", "softmax")
        if bias and info.data.get("num_moe_experts") is None:
            raise ValueError("the expert bias is a router's, and the model has no experts")
        if bias and score not in ("sigmoid", "sqrtsoftplus"):
            raise ValueError(
                f'needs moe_router_score_function "sigmoid" or "sqrtsoftplus" (got "{score}"), as '
                "Megatron-LM asserts"
            )
        return bias

    moe_apply_probs_on_input: Flag = Field(
        default=False,
        description="Megatron --moe-apply-probs-on-input (Llama 4, top-1): the routed tokens "
        "are scaled by their probability before the experts, not their outputs after",
    )
    moe_ffn_hidden_size: PositiveInt | None = Field(
        default=None, description="per-expert MLP width; None = ffn_hidden_size"
    )
    moe_shared_expert_intermediate_size: PositiveInt | None = Field(
        default=None, description="total width of the shared experts; None = no shared expert"
    )
    moe_layer_freq: PositiveInt | tuple[Annotated[Literal[0, 1], Integer], ...] = Field(
        default=1, description="int N: every N-th layer is MoE; or a 0/1 list, one per layer"
    )
    moe_router_num_groups: PositiveInt | None = Field(
        default=None, description="group-limited routing: expert groups (HF n_group)"
    )
    moe_router_group_topk: PositiveInt | None = Field(
        default=None, description="groups one token's experts may come from (HF topk_group)"
    )
    moe_latent_size: PositiveInt | None = Field(
        default=None,
        description="latent MoE (Nemotron 3 Super / Ultra): the routed experts, their dispatch "
        "and combine run at this width between a down- and an up-projection; None = hidden_size",
    )

    # --- multi-latent attention (DeepSeek)
    multi_latent_attention: Flag = False
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_head_dim: PositiveInt | None = None
    qk_pos_emb_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None

    # --- DeepSeek sparse attention (Megatron --experimental-attention-variant dsa,
    # --dsa-indexer-*: TransformerConfig's fields, d98e8a64; planner.model.dsa)
    dsa_indexer_n_heads: PositiveInt | None = Field(
        default=None, description="DSA: the lightning indexer's heads (HF index_n_heads)"
    )
    dsa_indexer_head_dim: PositiveInt | None = Field(
        default=None, description="DSA: the indexer's head dim (HF index_head_dim)"
    )
    dsa_indexer_topk: PositiveInt | None = Field(
        default=None,
        description="DSA: the keys each query attends to, chosen by the indexer (HF index_topk); "
        "None = dense attention",
    )

    # --- sliding-window attention (Megatron --window-size, --window-attn-skip-freq)
    window_size: NonNegativeInt | None = Field(
        default=None,
        le=MAX_WINDOW,
        description="sliding-window attention: each query attends to itself and this many tokens "
        "before it (Megatron --window-size W,0; HF sliding_window); None = the whole sequence",
    )
    window_attn_skip_freq: PositiveInt | tuple[Annotated[Literal[0, 1], Integer], ...] | None = (
        Field(
            default=None,
            description="with window_size: int N, every N-th layer attends to the whole "
            "sequence (the others windowed); or a 1 (window) / 0 (whole) list, one per layer; "
            "None = every layer windowed",
        )
    )

    mtp_num_layers: NonNegativeInt = Field(
        default=0, le=MAX_LAYERS, description="multi-token-prediction layers (hybrid: depths)"
    )
    mtp_use_repeated_layer: Flag = Field(
        default=False, description="one set of MTP weights serves every depth"
    )

    # --- hybrid Mamba stacks (Megatron --hybrid-layer-pattern, --mamba-*; planner.inputs.hybrid)
    hybrid_layer_pattern: str | None = Field(
        default=None,
        max_length=2 * MAX_LAYERS,
        description="one symbol per decoder layer (M Mamba, * attention, - MLP, E MoE), then "
        "'/' and one MTP depth's symbols per depth; None = a transformer",
    )
    mamba_state_dim: PositiveInt = 128
    mamba_head_dim: PositiveInt = 64
    mamba_num_groups: PositiveInt = 8
    mamba_num_heads: PositiveInt | None = Field(
        default=None, description="None = 2 x hidden_size / mamba_head_dim (expand 2)"
    )

    # --- gated delta net (Megatron --experimental-attention-variant gdn, --linear-attention-freq,
    # --linear-*: TransformerConfig's fields and defaults, d98e8a64; planner.model.gdn)
    linear_attention_freq: PositiveInt | tuple[Annotated[Literal[0, 1], Integer], ...] | None = (
        Field(
            default=None,
            description="a transformer's linear-attention layers: int N, every N-th layer "
            "softmax attention and the others a gated delta net; or a 1 (gated delta net) / 0 "
            "(attention) list, one per layer; None = attention in every layer",
        )
    )
    linear_conv_kernel_dim: PositiveInt = Field(default=4, description="GDN causal conv width")
    linear_key_head_dim: PositiveInt = Field(default=128, description="GDN query / key head dim")
    linear_value_head_dim: PositiveInt = Field(default=128, description="GDN value head dim")
    linear_num_key_heads: PositiveInt = Field(default=16, description="GDN query / key heads")
    linear_num_value_heads: PositiveInt = Field(default=32, description="GDN value heads")
