"""Megatron-LM's rules on training features: recompute, activation offloading, MoE dispatch,
routing and token dropping, FP8 recipes, the expert all-to-all overlap (what it only warns about:
`planner.search.rules.feature_warnings`). Sources: Megatron-LM d98e8a64
TransformerConfig.__post_init__, validate_args and the MoE token dispatcher
(benchmarks/data/megatron_rules.md lists each with its line). A rule returns a `Violation` where
Megatron asserts.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation
from planner.search.rules.flex_groups import flex_group


def recompute(job: Job, lay: Layout) -> Violation | None:
    """Method and layer count only with full (TransformerConfig asserts it); mla_up_proj needs
    MLA, moe_act an MoE model, gdn_norm_out a gated delta net; moe_act and layernorm cannot be
    recomputed under the delayed FP8 recipe. The modules without selective recompute are not
    refused: Megatron reads them only under it (transformer_config.py:1943 d98e8a64, and each
    module's own check, e.g. attention.py:392-395), and so do planner's model and launch targets
    (a plan reads them as not given: `plan_layout._recompute_modules`)."""
    mods = lay.recompute_modules
    if lay.recompute != "full" and (lay.recompute_method, lay.recompute_num_layers) != (
        "uniform",
        1,
    ):
        # the field the plan set away from its default is the one named
        field = "recompute_method" if lay.recompute_method != "uniform" else "recompute_num_layers"
        return Violation(
            "recompute_method",
            f"parallel.{field}",
            f"recompute_method ({lay.recompute_method}) and recompute_num_layers "
            f'({lay.recompute_num_layers}) need recompute = "full" (got "{lay.recompute}")',
        )
    if (
        lay.recompute == "full"
        and lay.recompute_method == "uniform"
        and lay.recompute_num_layers != 1
        and job.arch.mtp_num_layers
        and job.framework == "megatron"
    ):
        # the MTP layers' own checkpointing asserts it (multi_token_prediction.py d98e8a64
        # :1621-1627, "recompute_num_layers must be 1 for MTP recompute"), at the first forward
        return Violation(
            "recompute_method",
            "parallel.recompute_num_layers",
            f"uniform full recompute of {lay.recompute_num_layers} layers a group with MTP "
            "layers: Megatron's MTP recompute asserts recompute_num_layers = 1",
        )
    if lay.recompute != "selective":
        return None
    if "mla_up_proj" in mods and not job.arch.multi_latent_attention:
        return Violation(
            "recompute_modules",
            "parallel.recompute_modules",
            "recompute module mla_up_proj needs multi-latent attention",
        )
    if "moe_act" in mods and not job.arch.is_moe:
        # TransformerConfig.__post_init__ d98e8a64 :1964-1967: "moe_act in recompute_modules is
        # only supported with moe_grouped_gemm", which a dense model has no experts for
        return Violation(
            "recompute_modules",
            "parallel.recompute_modules",
            "recompute module moe_act needs a mixture of experts (Megatron raises ValueError)",
        )
    if "gdn_norm_out" in mods and not job.arch.has_gdn:
        return Violation(
            "recompute_modules",
            "parallel.recompute_modules",
            "recompute module gdn_norm_out needs gated delta nets (Megatron raises ValueError)",
        )
    delayed = job.precision == "fp8" and job.fp8_recipe == "delayed"
    dropped = [m for m in ("moe_act", "layernorm") if m in mods]
    if delayed and dropped:
        return Violation(
            "recompute_modules",
            "parallel.recompute_modules",
            f"recompute module {dropped[0]} cannot run under the delayed FP8 recipe (Megatron "
            f'asserts); use fp8_recipe = "tensorwise" or drop it',
        )
    return None


def offloading(job: Job, lay: Layout) -> Violation | None:
    """--cpu-offloading-num-layers: fewer than the model's layers, no pipeline parallelism, no
    recompute (TransformerConfig asserts all three)."""
    n = lay.cpu_offloading_num_layers
    if not n:
        return None
    field = "parallel.cpu_offloading_num_layers"
    if n >= job.arch.num_layers:
        return Violation(
            "offload_layers",
            field,
            f"cpu_offloading_num_layers ({n}) must be less than num_layers ({job.arch.num_layers})",
        )
    if lay.pp > 1:
        return Violation(
            "offload_pp",
            field,
            f"cpu_offloading_num_layers ({n}) needs pipeline_model_parallel_size 1 (got {lay.pp})",
        )
    if lay.recompute != "none":
        return Violation(
            "offload_recompute",
            field,
            f"cpu_offloading_num_layers ({n}) cannot be combined with recompute "
            f'(got "{lay.recompute}")',
        )
    return None


MOE_OFFLOAD_MODULES = ("expert_fc1", "moe_act", "fused_group_mlp")
"""Offload modules inside an MoE layer's experts."""


def fine_offloading(job: Job, lay: Layout) -> Violation | None:
    """--offload-modules (with --fine-grained-activation-offloading), as TransformerConfig
    asserts: not with --cpu-offloading-num-layers; attn_proj only with
    core_attn; no module inside the experts while selective recompute checkpoints the whole MoE
    layer; under CUDA graphs what `_graph_conflict` says; fused_group_mlp not with expert_fc1 or
    moe_act (the feature's documentation). The expert modules need an MoE model (documented as
    MoE only). A module named twice is no violation: Megatron only asks whether each is in the
    list, and a plan keeps it once (`plan_layout`)."""
    mods = lay.offload_modules
    if not mods:
        return None
    field = "parallel.offload_modules"
    listed = ", ".join(mods)
    if lay.cpu_offloading_num_layers:
        return Violation(
            "offload_both", field, f"offload_modules ({listed}) cannot be combined with "
            f"cpu_offloading_num_layers ({lay.cpu_offloading_num_layers})",
        )  # fmt: skip
    if "attn_proj" in mods and "core_attn" not in mods:
        return Violation(
            "offload_attn_proj", field, "offload module attn_proj needs core_attn too (its input "
            "is core attention's output, which core_attn's backward needs)",
        )  # fmt: skip
    inside = [m for m in MOE_OFFLOAD_MODULES if m in mods]
    if inside and not job.arch.is_moe:
        return Violation("offload_moe", field, f"offload module {inside[0]} needs an MoE model")
    if inside and lay.recompute == "selective" and "moe" in lay.recompute_modules:
        return Violation(
            "offload_moe", field, f"offload module {inside[0]} cannot be combined with recompute "
            "module moe (the whole MoE layer is checkpointed)",
        )  # fmt: skip
    graphed = _graph_conflict(job, mods)
    if graphed is not None:
        return Violation("offload_graphs", *graphed)
    if "fused_group_mlp" in mods and len(inside) > 1:
        return Violation(
            "offload_fused", field, "offload module fused_group_mlp cannot be combined with "
            "expert_fc1 or moe_act",
        )  # fmt: skip
    return None


def _graph_conflict(job: Job, mods: tuple[str, ...]) -> tuple[str, str] | None:
    """(plan field, why) where Megatron's CUDA graphs refuse fine-grained offloading
    (TransformerConfig.__post_init__ d98e8a64, with graphs on): the local implementation (what
    `cuda_graph_impl` None launches) only the expert modules and only with per-module capture
    (`cuda_graph_modules` given: "not supported with whole-layer CUDA graph capture");
    transformer_engine and full_iteration any module; no implementation beside a captured moe
    region ("Token-drop MoE is temporarily not supported with activation offloading")."""
    if not job.cuda_graphs or job.framework != "megatron":
        return None
    if "moe" in job.cuda_graph_modules:
        return "training.cuda_graph_modules", (
            f"the moe region is not captured beside fine-grained offloading ({', '.join(mods)}; "
            "TransformerConfig asserts it)"
        )
    if (job.cuda_graph_impl or "local") != "local":
        return None
    outside = next((m for m in mods if m not in MOE_OFFLOAD_MODULES), None)
    if outside is not None:
        return "parallel.offload_modules", (
            f"offload module {outside} does not run under Megatron's local CUDA graphs (only "
            "expert_fc1, moe_act and fused_group_mlp; training.cuda_graph_impl = "
            '"transformer_engine" or "full_iteration" runs it)'
        )
    if not job.cuda_graph_modules:
        return "training.cuda_graph_modules", (
            "Megatron's local CUDA graphs capture whole layers here, which fine-grained "
            "offloading does not run beside (TransformerConfig asserts it): list the regions "
            "(e.g. attn), or set training.cuda_graph_impl"
        )
    return None


def flex_runs(job: Job) -> bool:
    """Whether the flex dispatcher runs on the job's GPU: NVIDIA only. Megatron-LM's flex
    backends are DeepEP, HybridEP (both from the deep_ep package, NVSHMEM / NVLink kernels) and
    NCCL-EP (transformer_config.py and fused_a2a.py d98e8a64); ROCm's Megatron-LM fork adds its
    own MORI backend for AMD GPUs (ROCm/Megatron-LM PR #135, "The flex dispatcher previously only
    supported deepep and hybridep"), which planner does not model, and DeepEP has no ROCm build
    (ROCm/aiter issue #421, open)."""
    return job.cluster.gpu.vendor == "nvidia"


def dispatch(job: Job, lay: Layout) -> Violation | None:
    """The flex dispatcher runs on NVIDIA GPUs only (`flex_runs`); its DeepEP backend needs
    expert-TP x EP > 1 and no padding to capacity; padding needs a capacity factor."""
    if not job.arch.is_moe:
        return None
    flex = lay.moe_token_dispatcher_type == "flex"
    if flex and not flex_runs(job):
        return Violation(
            "dispatcher",
            "parallel.moe_token_dispatcher_type",
            f"the flex dispatcher's backends (DeepEP, HybridEP) run on NVIDIA GPUs only (got "
            f"{job.cluster.gpu.name}): use alltoall (ROCm's Megatron-LM fork has its own MORI "
            "backend, which planner does not model)",
        )
    if flex and lay.moe_flex_dispatcher_backend == "deepep":
        if lay.expert_tp * lay.ep == 1:
            return Violation(
                "dispatcher",
                "parallel.moe_token_dispatcher_type",
                "the flex dispatcher with DeepEP needs expert_tensor_parallel_size x "
                f"expert_model_parallel_size > 1 (got {lay.expert_tp} x {lay.ep})",
            )
        if job.moe_pad_expert_input_to_capacity:
            return Violation(
                "dispatcher",
                "training.moe_pad_expert_input_to_capacity",
                "moe_pad_expert_input_to_capacity cannot be used with the flex dispatcher's "
                "DeepEP backend",
            )
    if job.moe_pad_expert_input_to_capacity and job.moe_expert_capacity_factor is None:
        return Violation(
            "capacity",
            "training.moe_pad_expert_input_to_capacity",
            "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor",
        )
    return None


def routing(job: Job, lay: Layout) -> Violation | None:
    """Group-limited routing: group_topk needs groups, groups divide the experts, group_topk at
    most the groups (TransformerConfig asserts; nothing ties them to EP)."""
    groups, topk = job.moe_router_num_groups, job.moe_router_group_topk
    if groups is None and topk is None:
        return None
    experts = job.arch.num_moe_experts
    if experts is None:
        return Violation(
            "routing",
            "training.moe_router_num_groups",
            "moe_router_num_groups / moe_router_group_topk need a mixture-of-experts model",
        )
    if groups is None:
        return Violation(
            "routing",
            "training.moe_router_group_topk",
            f"moe_router_group_topk ({topk}) needs moe_router_num_groups",
        )
    if experts % groups:
        return Violation(
            "routing",
            "training.moe_router_num_groups",
            f"num_moe_experts ({experts}) must be a multiple of moe_router_num_groups ({groups})",
        )
    if topk is not None and topk > groups:
        return Violation(
            "routing",
            "training.moe_router_group_topk",
            f"moe_router_group_topk ({topk}) exceeds moe_router_num_groups ({groups})",
        )
    return None


def fp8_recipe(job: Job, lay: Layout) -> Violation | None:
    """Recipes the GPU's Transformer Engine cannot run; Megatron leaves the check to TE, which
    asserts at run time (`check_recipe_support`): refused here. mxfp8 scales blocks of 32 values
    in hardware only Blackwell and AMD CDNA4 have (`GpuSpec.has_mxfp8`; ROCm/TransformerEngine
    030b7921 transformer_engine/pytorch/quantization.py:74-82, gfx95x only; torchtitan's MX
    converters Blackwell only). blockwise
    (Megatron-LM d98e8a64 fp8_utils.py:781-782: TE's Float8BlockScaling) has no ROCm GEMM: the
    same file :103-107, "FP8 block scaled gemm not yet supported for ROCm", asserted at :127-139."""
    if job.precision != "fp8":
        return None
    gpu = job.cluster.gpu
    if job.fp8_recipe == "blockwise" and gpu.vendor == "amd":
        return Violation(
            "fp8_recipe",
            "training.fp8_recipe",
            f'fp8_recipe "blockwise" (Transformer Engine\'s Float8BlockScaling) has no ROCm GEMM '
            f'(got {gpu.name}); use "tensorwise" or "delayed"'
            + (' or "mxfp8"' if gpu.has_mxfp8 else ""),
        )
    # torchtitan's MX converters need CUDA capability 10 (b5bcd76c components/quantization/mx.py:70)
    cores = gpu.is_blackwell if job.framework == "torchtitan" else gpu.has_mxfp8
    if job.fp8_recipe == "mxfp8" and not cores:
        other = '"tensorwise" or "blockwise"' if gpu.vendor == "nvidia" else '"tensorwise"'
        where = "" if job.framework == "torchtitan" else " or AMD CDNA4 (MI350X, MI355X)"
        return Violation(
            "fp8_recipe",
            "training.fp8_recipe",
            f'fp8_recipe "mxfp8" needs a Blackwell GPU{where} (got {gpu.name}); use {other}',
        )
    return None


def bf16_layers(job: Job, lay: Layout) -> Violation | None:
    """Megatron-Core under FP8 (TransformerConfig d98e8a64): each of num_layers_at_start_in_bf16
    and num_layers_at_end_in_bf16 at most num_layers // pp (no such check under FP4)."""
    most = job.arch.num_layers // lay.pp
    worst = max(job.bf16_layers_at_start, job.bf16_layers_at_end)
    if job.precision == "fp8" and worst > most:
        name = "start" if job.bf16_layers_at_start == worst else "end"
        return Violation(
            "bf16_layers",
            f"training.bf16_layers_at_{name}",
            f"Megatron-Core keeps at most num_layers // pp = {most} layers in bf16 at the {name} "
            f"under FP8 (got {worst})",
        )
    return None


def recompute_allows_overlap(recompute: str, modules: tuple[str, ...]) -> bool:
    """`expert_overlap`'s one condition on recompute: no full recompute and no recompute module
    moe. Its other conditions, and `rules.expert_overlap`'s on hybrid stacks, read the overlap
    flag, the degrees, vpp, the dispatcher and the model alone, none of which a memory-saving rung
    changes: a layout the rules accept without recompute is accepted with exactly the rungs this
    accepts (`space.bases` filters the overlap base's rungs on it)."""
    return not (recompute == "full" or (recompute == "selective" and "moe" in modules))


def expert_overlap(job: Job, lay: Layout) -> Violation | None:
    """TransformerConfig's asserts for --overlap-moe-expert-parallel-comm: ep > 1, vpp when
    pp > 1 (and then no Megatron-FSDP: the combined 1F1B schedule asserts it),
    the alltoall or flex dispatcher, no full recompute and no recompute of the whole MoE
    layer, at most one MTP layer. (TP or CP with it before Blackwell is only a warning:
    `overlap_connections`.)"""
    if not lay.ep_comm_overlap:
        return None
    field, why = "parallel.ep_comm_overlap", "ep_comm_overlap = true"
    if lay.ep == 1:
        return Violation("ep_overlap_ep", field, f"{why} needs expert_model_parallel_size > 1")
    if lay.pp > 1 and lay.vpp == 1:
        return Violation(
            "ep_overlap_vpp",
            field,
            f"{why} needs vpp > 1 when pipeline_model_parallel_size ({lay.pp}) > 1",
        )
    if lay.vpp > 1 and lay.zero_stage >= 2:  # combined_1f1b.py asserts (d98e8a64, 2a75ac12)
        return Violation(
            "ep_overlap_fsdp",
            field,
            f"{why} with Megatron-FSDP (zero_stage {lay.zero_stage}) is not supported for the "
            f"interleaved schedule (vpp {lay.vpp}): use zero_stage 1, or pp 1",
        )
    if lay.moe_token_dispatcher_type == "allgather":
        return Violation(
            "ep_overlap_dispatcher", field, f"{why} needs the alltoall or flex token dispatcher"
        )
    if not recompute_allows_overlap(lay.recompute, lay.recompute_modules):
        return Violation(
            "ep_overlap_recompute",
            field,
            f"{why} needs recompute other than full, and no recompute module moe",
        )
    if job.arch.mtp_num_layers > 1:
        return Violation(
            "ep_overlap_mtp",
            field,
            f"{why} supports at most one MTP layer (model has {job.arch.mtp_num_layers})",
        )
    return None


RULES = (
    recompute,
    offloading,
    fine_offloading,
    dispatch,
    flex_group,
    routing,
    fp8_recipe,
    bf16_layers,
    expert_overlap,
)
"""The feature rules, in the order their messages are listed."""
