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

Not ModelArch fields, noted: the chunked attention of three layers in four (each token attends
within its attention_chunk_size chunk, timed as full causal attention: the same up to a chunk's
length, the slower side beyond it), and use_qk_norm's parameter-free L2 norm of q and k on
those layers (no parameters, a few elementwise passes)."""

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
    }
