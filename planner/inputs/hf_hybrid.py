"""Hybrid Mamba stacks' config.json (`nemotron_h`: Nemotron-H and Nemotron 3, NemotronHForCausalLM)
as ModelArch fields, for `planner.inputs.hf_families`.

Nemotron-H's configuration (configuration_nemotron_h.py, shipped with each checkpoint and read
through transformers' auto_map) spells the stack as `hybrid_override_pattern`, one character per
layer: M a Mamba-2 mixer, * an attention layer, - an MLP, E a mixture of experts; the same
letters and meaning as Megatron-LM's --hybrid-layer-pattern (hybrid_layer_allocation.py
d98e8a64), which Megatron-Bridge passes through unchanged when it converts these checkpoints.
The other fields map as the bundled models' (model_zoo/nemotronh-56b.toml,
nemotron3-nano-30b-a3b.toml, from Megatron-LM's own configurations of the same checkpoints):
- the Mamba-2 mixer: mamba_num_heads, mamba_head_dim, ssm_state_size -> mamba_state_dim,
  n_groups -> mamba_num_groups (the convolution's width is 4 in every release, as in Megatron:
  another conv_kernel is noted, not modelled);
- the attention layers: num_attention_heads, num_key_value_heads, head_dim (attention_head_dim
  in Nemotron-H 56B's config), no position embedding (Nemotron-H's attention has no rotary
  embedding: the Mamba layers carry position; Megatron's configurations run
  --position-embedding-type none);
- MLP and experts: squared ReLU (mlp_hidden_act relu2), intermediate_size the MLP layers' width,
  moe_intermediate_size the routed experts', n_shared_experts shared experts of
  moe_shared_expert_intermediate_size each; group-limited routing only where n_group > 1;
  moe_latent_size (Nemotron 3 Super / Ultra; null or absent in Nano's) the latent MoE's width,
  as Megatron-Bridge maps it (NVIDIA-NeMo/Megatron-Bridge 067f987d
  src/megatron/bridge/models/nemotronh/nemotron_h_bridge.py:320-321); the router sigmoid (the
  same bridge, :311, with the expert bias, :312: moe_router_enable_expert_bias; a scoring_func
  the config spells is read: `router_score`). The MTP depths such a
  config may declare (num_nextn_predict_layers with mtp_hybrid_override_pattern, which the same
  bridge reads, :276-284) are not read: no released config.json planner could check spells them.
"""

from __future__ import annotations

from planner.inputs.arch_fields import MAX_EXPERTS
from planner.inputs.errors import spelled_json
from planner.inputs.hf_fields import Reader
from planner.inputs.hf_shapes import Fields, dense_shape, mlp, router_score, tied

MAMBA_CONV_WIDTH = 4
"""The Mamba-2 convolution's width planner models (`planner.model.mamba`, Megatron's d_conv)."""


def nemotron_h(r: Reader) -> Fields:
    """Nemotron-H / Nemotron 3 (the module docstring). The pattern's MoE layers (E) need the
    expert fields; a stack without them needs none."""
    pattern = r.text("hybrid_override_pattern", "")
    if not pattern:
        raise r.error("hybrid_override_pattern", f"required field missing for {r.arch}")
    conv = r.opt_int("conv_kernel", default=MAMBA_CONV_WIDTH)
    if conv != MAMBA_CONV_WIDTH:
        r.notes.append(f"conv_kernel {conv} is modelled as {MAMBA_CONV_WIDTH}")
    head_dim = r.opt_int("head_dim", "attention_head_dim")  # the 56B's config spells the latter
    fields: Fields = {
        **dense_shape(r.with_fields(head_dim=head_dim), "intermediate_size"),
        **mlp(r, "mlp_hidden_act", "relu2", gated=False),
        "normalization": "RMSNorm",
        "add_bias_linear": r.flag("attention_bias", False) or r.flag("mlp_bias", False),
        "position_embedding_type": "none",
        **tied(r, False),
        "hybrid_layer_pattern": pattern,
        "mamba_num_heads": r.req_int("mamba_num_heads"),
        "mamba_head_dim": r.req_int("mamba_head_dim"),
        "mamba_state_dim": r.req_int("ssm_state_size"),
        "mamba_num_groups": r.req_int("n_groups"),
    }
    if "E" not in pattern:
        return fields
    shared = r.opt_int("n_shared_experts", default=0, minimum=0) or 0
    width = r.opt_int("moe_shared_expert_intermediate_size") if shared else None
    if shared and width is None:
        raise r.error(
            "moe_shared_expert_intermediate_size",
            f"required with n_shared_experts {spelled_json(shared)} for {r.arch}",
        )
    groups = r.opt_int("n_group", default=1) or 1
    return {
        **fields,
        "num_moe_experts": r.req_int("n_routed_experts", maximum=MAX_EXPERTS),
        "moe_router_topk": r.req_int("num_experts_per_tok"),
        "moe_ffn_hidden_size": r.req_int("moe_intermediate_size"),
        "moe_shared_expert_intermediate_size": shared * width if width else None,
        "moe_router_num_groups": groups if groups > 1 else None,
        "moe_router_group_topk": r.opt_int("topk_group") if groups > 1 else None,
        "moe_latent_size": r.opt_int("moe_latent_size"),
        **router_score(r, "sigmoid", expert_bias=True),
    }
