"""Megatron-LM `pretrain_gpt.py` arguments for a plan's model: shape, attention (with the gated
delta nets' and DeepSeek sparse attention's flags), positions, activation, MoE (flag names of
Megatron-LM d98e8a64's parser; `planner.emit.megatron` puts them with the layout, batch and
precision flags). A hybrid Mamba stack runs under `pretrain_hybrid.py`
(`training_script`) with --hybrid-layer-pattern in place of --num-layers: the pattern carries the
pipeline split as its '|' segments (`hybrid_pattern`) and the --mamba-* sizes come with it."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby

from planner.inputs import hybrid
from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.plan import Job, Plan

Arg = tuple[str, ...]
"""One flag followed by its values."""


def _activation(job: Job, where: str) -> list[Arg]:
    """The activation's flags, as the reader reads them back (`megatron_model._activation` in
    planner.inputs): --swiglu or --quick-geglu (gpt-oss's GLU, as Megatron-Bridge runs it:
    gpt_oss_bridge.py:82-84 067f987d), each with its offset and clamp. A SwiGLU's nonzero offset
    runs only unfused (transformer_config.py:2440-2444 d98e8a64 raises ValueError under
    bias_activation_fusion), and a fused quick-GEGLU only in routed experts (mlp.py:317-318,
    shared_experts.py:292-293 raise): refused, not launched as another model."""
    arch = job.arch
    offset = (
        [("--glu-linear-offset", str(arch.glu_linear_offset))] if arch.glu_linear_offset else []
    )
    if arch.gated_linear_unit and arch.activation in ("swiglu", "silu"):
        if offset and job.fused_swiglu:
            raise InputError(
                f"{where}.glu_linear_offset: Megatron-LM runs a SwiGLU with a nonzero offset "
                f"({arch.glu_linear_offset:g}) only unfused (transformer_config.py:2440-2444 "
                "raises under bias_activation_fusion): set training.fused_swiglu = false, or "
                'activation = "quick_geglu" where the model is gpt-oss\'s GLU'
            )
        return [("--swiglu",), *offset, *_glu_clamp(arch)]
    if arch.gated_linear_unit and arch.activation == "quick_geglu":
        dense = any(k.ffn == "dense" for k in (*arch.layer_kinds, *arch.mtp_kinds))
        if job.fused_swiglu and (dense or arch.moe_shared_expert_intermediate_size):
            raise InputError(
                f"{where}.activation: Megatron-LM fuses quick_geglu only in routed experts: a "
                "dense MLP or a shared expert raises ValueError with the fused bias-activation "
                "(mlp.py:317-318, shared_experts.py:292-293): set training.fused_swiglu = false"
            )
        return [("--quick-geglu",), *offset, *_glu_clamp(arch)]
    if not arch.gated_linear_unit and arch.activation == "gelu":
        return []  # Megatron's default
    if not arch.gated_linear_unit and arch.activation == "squared_relu":
        return [("--squared-relu",)]
    kind = f"gated {arch.activation}" if arch.gated_linear_unit else arch.activation
    raise InputError(
        f"{where}.activation: Megatron-LM pretrain_gpt.py has no flag for a {kind} MLP "
        f"(it offers gelu, --swiglu, --quick-geglu and --squared-relu)"
    )


def _glu_clamp(arch: ModelArch) -> list[Arg]:
    """--activation-func-clamp-value (gpt-oss: 7.0), `ModelArch.activation_func_clamp_value`."""
    clamp = arch.activation_func_clamp_value
    return [] if clamp is None else [("--activation-func-clamp-value", str(clamp))]


def refuse_alibi(arch: ModelArch, where: str, runtime: str = "Megatron-LM") -> None:
    """ALiBi (BLOOM's) is no position embedding Megatron-Core builds: its GPT embedding takes
    learned_absolute, rope or none (language_model_embedding.py, d98e8a64), so neither
    Megatron-LM nor a Megatron-Bridge recipe can train such a model."""
    if arch.position_embedding_type == "alibi":
        raise InputError(
            f"{where}.position_embedding_type: {runtime} has no ALiBi position embedding "
            f"(got 'alibi'; Megatron-Core offers learned_absolute, rope and none)"
        )


def refuse_local_attention(plan: Plan, runtime: str = "Megatron-LM") -> None:
    """The launch targets write Transformer Engine's layer spec, whose unfused attention is TE's
    (`Job.unfused_attention` "te"); Megatron-Core's own attention needs --transformer-impl local
    or --spec local (arguments.py:436-437 @d98e8a64), the whole layer then without TE, which
    planner does not write: a plan priced on it is refused, not launched as another job."""
    kind = plan.job.unfused_attention
    if kind != "te":
        raise InputError(
            f"{plan.path}: training.unfused_attention: {runtime} is launched with Transformer "
            f"Engine's layers, whose unfused attention is 'te' (got {kind!r}, Megatron-Core's "
            "local attention, --transformer-impl local, which planner does not write)"
        )


def _positions(plan: Plan, where: str) -> list[Arg]:
    arch, seq = plan.job.arch, plan.job.seq_length
    kind = arch.position_embedding_type
    refuse_alibi(arch, where)
    if kind == "learned_absolute":
        table = arch.max_position_embeddings or arch.seq_length
        if table is None or table < seq:
            raise InputError(
                f"{where}.max_position_embeddings: a learned position table of {table} "
                f"positions cannot hold seq_length ({seq})"
            )
    else:
        table = max(arch.max_position_embeddings or 0, seq)
    if arch.mtp_num_layers and kind not in ("rope", "none"):
        raise InputError(
            f"{where}.mtp_num_layers: Megatron supports multi-token prediction only with rope "
            f"or no position embedding (got {kind!r})"
        )
    return [("--position-embedding-type", kind), ("--max-position-embeddings", str(table))]


def moe_layer_freq(freq: int | tuple[int, ...]) -> str:
    """--moe-layer-freq (and --window-attn-skip-freq, the same type): an int N, or a Python list
    expression Megatron evaluates, run-length encoded like its DeepSeek-V3 example:
    "[0]*3+[1]*58"."""
    if isinstance(freq, int):
        return str(freq)
    runs = [(x, len(list(run))) for x, run in groupby(freq)]
    return "+".join(f"[{x}]*{n}" if n > 1 else f"[{x}]" for x, n in runs)


def gdn_args(arch: ModelArch) -> list[Arg]:
    """The gated delta nets' flags (`planner.inputs.megatron_gdn`): a transformer's variant and
    linear-attention layers (a hybrid stack's G layers build one by default), and the sizes."""
    if not arch.has_gdn:
        return []
    out: list[Arg] = []
    if arch.linear_attention_freq is not None:
        out += [
            ("--experimental-attention-variant", "gdn"),
            ("--linear-attention-freq", moe_layer_freq(arch.linear_attention_freq)),
        ]
    return [
        *out,
        ("--linear-conv-kernel-dim", str(arch.linear_conv_kernel_dim)),
        ("--linear-key-head-dim", str(arch.linear_key_head_dim)),
        ("--linear-value-head-dim", str(arch.linear_value_head_dim)),
        ("--linear-num-key-heads", str(arch.linear_num_key_heads)),
        ("--linear-num-value-heads", str(arch.linear_num_value_heads)),
    ]


def dsa_args(plan: Plan) -> list[Arg]:
    """DeepSeek sparse attention's flags (`planner.inputs.megatron_dsa`): the variant, the
    indexer's sizes (Megatron has no defaults for them), the kernel backend always (Megatron's
    default is none, the plan's choice is written out) and the indexer loss where the plan runs
    one. (A gated delta net's variant never comes with it: ModelArch refuses gated delta nets
    beside MLA, which DSA needs.)"""
    arch, job = plan.job.arch, plan.job
    if not arch.has_dsa:
        return []
    out: list[Arg] = [
        ("--experimental-attention-variant", "dsa"),
        ("--dsa-indexer-n-heads", str(arch.dsa_indexer_n_heads)),
        ("--dsa-indexer-head-dim", str(arch.dsa_indexer_head_dim)),
        ("--dsa-indexer-topk", str(arch.dsa_indexer_topk)),
        ("--dsa-kernel-backend", job.dsa_kernel_backend),
    ]
    if job.dsa_indexer_loss_coeff > 0:
        out.append(("--dsa-indexer-loss-coeff", repr(job.dsa_indexer_loss_coeff)))
    if job.dsa_indexer_use_sparse_loss:
        out.append(("--dsa-indexer-use-sparse-loss",))
    return out


def model_args(plan: Plan) -> list[Arg]:
    """Model shape, with the GQA, SwiGLU, MoE, MLA and MTP flags."""
    arch, job = plan.job.arch, plan.job
    where = f"{plan.path}: model"
    depth: list[Arg] = [("--num-layers", str(arch.num_layers))]
    if arch.is_hybrid:
        depth = [
            ("--hybrid-layer-pattern", hybrid_pattern(plan)),
            ("--mamba-num-heads", str(arch.mamba_heads)),
            ("--mamba-head-dim", str(arch.mamba_head_dim)),
            ("--mamba-state-dim", str(arch.mamba_state_dim)),
            ("--mamba-num-groups", str(arch.mamba_num_groups)),
        ]
    a: list[Arg] = [
        *depth,
        ("--hidden-size", str(arch.hidden_size)),
        ("--ffn-hidden-size", str(arch.ffn_hidden_size)),
        ("--num-attention-heads", str(arch.num_attention_heads)),
    ]
    if arch.kv_channels is not None:
        a.append(("--kv-channels", str(arch.kv_channels)))
    if arch.multi_latent_attention:  # cannot be combined with GQA (asserted)
        a.append(("--multi-latent-attention",))
        if arch.q_lora_rank is not None:
            a.append(("--q-lora-rank", str(arch.q_lora_rank)))
        a += [
            ("--kv-lora-rank", str(arch.kv_lora_rank)),
            ("--qk-head-dim", str(arch.qk_head_dim)),
            ("--qk-pos-emb-head-dim", str(arch.qk_pos_emb_head_dim)),
            ("--v-head-dim", str(arch.v_head_dim)),
        ]
    elif arch.query_groups != arch.num_attention_heads:
        a += [("--group-query-attention",), ("--num-query-groups", str(arch.query_groups))]
    a += _activation(job, where)
    a.append(("--normalization", arch.normalization))
    if not arch.add_bias_linear:
        a.append(("--disable-bias-linear",))
        if arch.add_qkv_bias:  # with biases on, Megatron puts them on QKV anyway
            a.append(("--add-qkv-bias",))
    if arch.qk_layernorm:
        a.append(("--qk-layernorm",))
    if arch.qk_l2_norm:  # Megatron norms every layer, RoPE-less too (gpt_layer_specs.py:149)
        a.append(("--qk-l2-norm",))
    if arch.no_rope_freq is not None:
        a.append(("--no-rope-freq", moe_layer_freq(arch.no_rope_freq)))
    if arch.attention_output_gate:
        a.append(("--attention-output-gate",))
    if arch.softmax_type != "vanilla":
        a.append(("--softmax-type", arch.softmax_type))
    if arch.untie_embeddings_and_output_weights:
        a.append(("--untie-embeddings-and-output-weights",))
    a += [
        ("--vocab-size", str(arch.vocab_size)),
        ("--make-vocab-size-divisible-by", str(arch.make_vocab_size_divisible_by)),
        ("--seq-length", str(job.seq_length)),
    ]
    a += _positions(plan, where)
    if arch.window_size is not None:  # causal: no keys after the query (the right window 0)
        a.append(("--window-size", f"{arch.window_size},0"))
        if arch.window_attn_skip_freq is not None:
            a.append(("--window-attn-skip-freq", moe_layer_freq(arch.window_attn_skip_freq)))
    a += gdn_args(arch)
    a += dsa_args(plan)
    if arch.is_moe:
        a += [
            ("--num-experts", str(arch.num_moe_experts)),
            ("--moe-router-topk", str(arch.moe_router_topk)),
            ("--moe-ffn-hidden-size", str(arch.expert_ffn)),
        ]
        if arch.moe_shared_expert_intermediate_size is not None:
            size = arch.moe_shared_expert_intermediate_size
            a.append(("--moe-shared-expert-intermediate-size", str(size)))
        if arch.moe_latent_size is not None:
            a.append(("--moe-latent-size", str(arch.moe_latent_size)))
        if arch.moe_layer_freq != 1:
            a.append(("--moe-layer-freq", moe_layer_freq(arch.moe_layer_freq)))
        if arch.moe_router_score_function != "softmax":
            a.append(("--moe-router-score-function", arch.moe_router_score_function))
        if arch.moe_router_enable_expert_bias:  # the model's aux-loss-free balancing
            a.append(("--moe-router-enable-expert-bias",))
        if arch.moe_apply_probs_on_input:
            a.append(("--moe-apply-probs-on-input",))
        job = plan.job
        if job.moe_router_num_groups is not None:
            a.append(("--moe-router-num-groups", str(job.moe_router_num_groups)))
        if job.moe_router_group_topk is not None:
            a.append(("--moe-router-group-topk", str(job.moe_router_group_topk)))
        if job.moe_expert_capacity_factor is not None:
            a.append(("--moe-expert-capacity-factor", f"{job.moe_expert_capacity_factor:g}"))
        if job.moe_pad_expert_input_to_capacity:
            a.append(("--moe-pad-expert-input-to-capacity",))
        budget = job.moe_expert_rank_capacity_factor
        if budget is not None:
            a.append(("--moe-expert-rank-capacity-factor", f"{budget:g}"))
        if job.moe_paged_stash:
            a.append(("--moe-paged-stash",))
            factor = f"{job.moe_paged_stash_buffer_size_factor:g}"
            a.append(("--moe-paged-stash-buffer-size-factor-cuda", factor))
        if job.moe_router_force_load_balancing:
            a.append(("--moe-router-force-load-balancing",))
    if arch.mtp_num_layers and not arch.is_hybrid:  # a hybrid pattern's '/' parts say it
        a.append(("--mtp-num-layers", str(arch.mtp_num_layers)))
    if arch.mtp_num_layers and arch.mtp_use_repeated_layer:
        # one MTP layer's weights for every depth (Megatron-LM d98e8a64 transformer_config.py:82,
        # gpt_layer_specs.py:779-784); without the flag Megatron builds a layer per depth
        a.append(("--mtp-use-repeated-layer",))
    return a


def training_script(plan: Plan) -> str:
    """Megatron-LM's entry point for the plan's model: pretrain_hybrid.py builds a hybrid Mamba
    stack (HybridModel, from --hybrid-layer-pattern), pretrain_gpt.py a transformer (GPTModel)."""
    return "pretrain_hybrid.py" if plan.job.arch.is_hybrid else "pretrain_gpt.py"


def hybrid_pattern(plan: Plan) -> str:
    """--hybrid-layer-pattern for the plan: the model's pattern with a '|' between consecutive
    virtual stages of the layout where pp > 1, then its MTP depths after '/'. Megatron-LM
    (d98e8a64 validate_args, hybrid_layer_allocation.py `select_pipeline_segment`) takes the
    segments in stage order (stage k on pipeline rank k % pp, chunk k // pp) and derives the
    virtual pipeline size as segments / pp; it refuses the layout string, the account-for flags,
    the virtual-stage flags and (with '|') the first/last stage counts beside the pattern, so
    the pipes carry any split planner's layout has (the embedding and loss sit with the first
    and last segments; a split that counted them as layers moves only the '|'). Without '|',
    pp > 1 is deprecated there and refuses virtual stages."""
    arch, lay = plan.job.arch, plan.require_layout()
    pat = hybrid.parse(arch.hybrid_layer_pattern or "")
    if lay.pp == 1:
        return pat.text
    main = pat.main
    segments = tuple(main[layers.start : layers.stop] for layers in stage_ranges(plan))
    return replace(pat, segments=segments).piped


def stage_ranges(plan: Plan) -> list[range]:
    """The decoder layers of each virtual stage, in stage order (stage k: chunk k // pp of
    rank k % pp), from the layout's split (`Layout.chunk_layers`)."""
    lay = plan.require_layout()
    chunks = lay.chunk_layers(plan.job.arch.num_layers)
    return [chunks[r][c] for c in range(lay.vpp) for r in range(lay.pp)]
