"""Llama 4's config.json (Llama4ForConditionalGeneration: Scout, Maverick) as ModelArch fields, for
`planner.inputs.hf_families`: its language model, in text_config (the vision encoder is noted, not
modelled).

transformers' Llama4TextConfig: a layer is a mixture of experts when listed in moe_layers, else
when i % interleave_moe_layer_step == step - 1 (every layer of Scout, every second of
Maverick); a MoE layer routes to num_local_experts experts of intermediate_size, top
num_experts_per_tok, beside one shared expert of the same width (Llama4TextMoe.shared_expert);
the dense layers' MLP is intermediate_size_mlp wide (Megatron-Bridge's Llama 4 mapping sets the
same: ffn_hidden_size the dense MLP's, moe_shared_expert_intermediate_size the experts').
Gated SiLU MLPs, RMSNorm, untied embeddings by default.

The RoPE-less layers: no_rope_layers (1 = RoPE) or every no_rope_layer_interval-th (default 4)
-> no_rope_freq; use_qk_norm's parameter-free L2 norm of q and k runs on the RoPE layers only
(Llama4TextAttention: `use_qk_norm and use_rope`) -> qk_l2_norm, which Megatron, the code planner
launches, runs on every layer (gpt_layer_specs.py:148-153 d98e8a64); the router's sigmoid scores
scale the expert's input (Llama4TextMoe: top-1) -> moe_router_score_function sigmoid,
moe_apply_probs_on_input (top-1 only: Megatron asserts it, its MoE experts.py:918-921).

Noted, not modelled: the chunked attention of the RoPE layers (each token attends within its
attention_chunk_size chunk), timed as full causal attention: the same up to a chunk's length, the
slower side beyond it."""

from __future__ import annotations

from planner.inputs.arch_fields import MAX_LAYERS
from planner.inputs.errors import spelled_json
from planner.inputs.hf_fields import Reader
from planner.inputs.hf_shapes import Fields, llama, moe, text_config


def llama4(r: Reader) -> Fields:
    """Llama 4 (the module docstring). intermediate_size_mlp is required where some layer is
    dense."""
    t = text_config(r)
    expert_ffn = t.req_int("intermediate_size")
    n = t.req_int("num_hidden_layers", maximum=MAX_LAYERS)
    step = t.opt_int("interleave_moe_layer_step", default=1) or 1
    listed = t.cfg.get("moe_layers")
    if listed is None:
        moe_layers = [i % step == step - 1 for i in range(n)]
    else:
        valid = isinstance(listed, list) and all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in listed
        )
        if not valid:
            raise t.error("moe_layers", f"must list layer indices below {n} {spelled_json(listed)}")
        moe_layers = [i in listed for i in range(n)]
    dense = (
        t.opt_int("intermediate_size_mlp", default=expert_ffn)
        if all(moe_layers)
        else t.req_int("intermediate_size_mlp")
    )
    f = llama(t.with_fields(intermediate_size=dense), head_dim_default=128)
    chunk = t.opt_int("attention_chunk_size")
    if chunk is not None:
        r.notes.append(f"chunked attention ({chunk:,} tokens) timed as full causal attention")
    return {
        **f,
        **moe(t, ("num_local_experts",), expert_ffn, moe_layers),
        "moe_shared_expert_intermediate_size": expert_ffn,
        "moe_router_score_function": "sigmoid",
        "moe_apply_probs_on_input": t.opt_int("num_experts_per_tok", default=1) == 1,
        **_no_rope(t, n),
    }


def _no_rope(t: Reader, n: int) -> Fields:
    """no_rope_freq from no_rope_layers (1 = a RoPE layer) or no_rope_layer_interval (transformers'
    Llama4TextConfig default: every 4th layer without RoPE), and the L2 q/k norm of the others."""
    listed = t.cfg.get("no_rope_layers")
    if isinstance(listed, list) and len(listed) == n and set(listed) <= {0, 1}:
        freq: int | tuple[int, ...] = tuple(1 - int(x) for x in listed)
    else:
        freq = t.opt_int("no_rope_layer_interval", default=4) or 4
    norm = t.flag("use_qk_norm", True)
    return {"no_rope_freq": freq, "qk_l2_norm": norm}
