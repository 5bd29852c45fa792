"""Settings a plan gives that change nothing for its job and layout (`inert`): an FP8 recipe in a
bf16 job, expert settings on a dense model, a context-parallel exchange at cp 1. The plan stays
valid: the training code would ignore them too (or, for `overlap_param_gather` at ZeRO stage 0,
the launch leaves the flag out, which Megatron-LM refuses without a sharded optimizer). `check`,
`explain` and `suggest --write-plan` print each as a warning naming the file, the field and the
value, so that a user who meant it to matter sees that it does not.

A field counts as given when the file (or the command line read into one) sets it to a value
that would do something: a flag set true, a number or name set; a field left at its default is
never named."""

from __future__ import annotations

from collections.abc import Iterator

from planner.inputs.errors import spelled
from planner.inputs.job import Job
from planner.inputs.layout import Layout
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.plan_sections import TrainingSection
from planner.inputs.titan_every_layers import block_ranges

DENSE_TRAINING = (
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_expert_rank_capacity_factor",
    "moe_paged_stash_buffer_size_factor",
    "moe_router_force_load_balancing",
    "moe_router_dtype",
    "moe_grouped_tensor",
    "moe_fused_grouped_mlp",
    "moe_router_padding",
)
"""`[training]` settings of the experts' layers: nothing reads them in a dense model (the fused
grouped MLP is read as off there, `plan.build_job`)."""

DENSE_PARALLEL = (
    "etp",
    "moe_token_dispatcher_type",
    "moe_flex_dispatcher_backend",
    "moe_flex_dispatcher_num_sms",
    "moe_shared_expert_overlap",
)
"""`[parallel]` settings of the experts' layers: nothing reads them in a dense model."""

MUON = (
    "muon_whole_params",
    "muon_ns_steps",
    "muon_tp_mode",
    "muon_split_qkv",
    "muon_matmul_precision",
    "muon_nesterov",
)
"""`[training]` settings only the Muon optimizer reads."""

DSA = ("dsa_kernel_backend", "dsa_indexer_loss_coeff", "dsa_indexer_use_sparse_loss")
"""`[training]` settings only DeepSeek sparse attention reads."""

MEGATRON_TRAINING = (
    "compiled_loss_fusion",
    "tp_userbuffers",
    "moe_router_dtype",
    "dataloader_attention_mask",
    "loss_fusion",
    "moe_grouped_tensor",
    "moe_router_padding",
    "optimizer_instances",
    "outer_dp_sharding_strategy",
    "async_save",
    "gradient_accumulation_fusion",
)
"""`[training]` settings of Megatron-LM's code that a torchtitan job never reads (its loss is
`[torchtitan] loss_chunks`, its data parallelism FSDP2's, its experts its own)."""


def _given(section: TrainingSection | ParallelSection, name: str) -> bool:
    """Whether the section sets `name` away from its default: given, not None, and not its
    default value (a flag given false where it defaults to false changes nothing)."""
    if name not in section.model_fields_set:
        return False
    value = getattr(section, name)
    return value is not None and value != type(section).model_fields[name].default


def _set_true(section: TrainingSection | ParallelSection, name: str) -> bool:
    """Whether the section sets the flag `name` true itself (for flags that default to true)."""
    return name in section.model_fields_set and getattr(section, name) is True


def inert(
    training: TrainingSection, parallel: ParallelSection | None, job: Job, layout: Layout | None
) -> list[tuple[str, str]]:
    """(field, message) for each setting the plan gives that its job and layout never read, in
    the order of the sections' fields."""
    if parallel is None or layout is None:
        return list(_training(training, job))
    return [
        *_training(training, job),
        *_router_padding(training, job, layout),
        *_recompute(training, parallel, layout),
        *_unread_here(training, job, layout),
        *_parallel(parallel, job, layout),
        *_unread_layout(parallel, job, layout),
    ]


def _note(
    section: TrainingSection | ParallelSection, table: str, name: str, why: str
) -> tuple[str, str]:
    value = spelled(getattr(section, name))
    return f"{table}.{name}", f"{name} = {value} has no effect: {why}"


def _training(t: TrainingSection, job: Job) -> Iterator[tuple[str, str]]:
    precision = f'precision is "{job.precision}"'
    if _given(t, "fp8_recipe") and job.precision != "fp8":
        # fp4 quantises with NVFP4 whatever the FP8 recipe (Job.quant_recipe)
        yield _note(t, "training", "fp8_recipe", f'{precision}, not "fp8"')
    if t.fp8_param_gather and job.precision != "fp8":
        yield _note(t, "training", "fp8_param_gather", f'{precision}, not "fp8"')
    if t.fp4_param_gather and job.precision != "fp4":
        yield _note(t, "training", "fp4_param_gather", f'{precision}, not "fp4"')
    if job.framework == "torchtitan":
        for name in MEGATRON_TRAINING:
            if _given(t, name):
                yield _note(t, "training", name, "a Megatron-LM setting torchtitan does not read")
    if not job.arch.is_moe:
        for name in DENSE_TRAINING:
            if _given(t, name) and not (
                job.framework == "torchtitan" and name in MEGATRON_TRAINING
            ):
                yield _note(t, "training", name, "the model has no experts")
    elif _given(t, "moe_paged_stash_buffer_size_factor") and not t.moe_paged_stash:
        yield _note(t, "training", "moe_paged_stash_buffer_size_factor", "moe_paged_stash is off")
    if job.optimizer != "muon":
        for name in MUON:
            if _given(t, name):
                yield _note(t, "training", name, f'the optimizer is "{job.optimizer}", not muon')
    if "optimizer_offload_overlap" in t.model_fields_set and not t.optimizer_offload_fraction:
        yield _note(t, "training", "optimizer_offload_overlap", "optimizer_offload_fraction is 0")
    if not job.arch.has_dsa:
        for name in DSA:
            if _given(t, name):
                yield _note(t, "training", name, "the model has no DeepSeek sparse attention")


def _router_padding(t: TrainingSection, job: Job, lay: Layout) -> Iterator[tuple[str, str]]:
    """Router padding in a Megatron MoE job where nothing pads the routing map: Megatron
    refuses it without FP8 / FP4 and with the allgather dispatcher (transformer_config.py
    d98e8a64 :2649-2659; launch leaves the flag out there), and HybridEP aligns its tokens in
    its own dispatch (`planner.model.moe_padding`)."""
    if not t.moe_router_padding or not job.arch.is_moe or job.framework != "megatron":
        return
    if not job.quantised:
        yield _note(t, "training", "moe_router_padding", f'precision is "{job.precision}"')
    elif lay.moe_token_dispatcher_type == "allgather":
        why = 'moe_token_dispatcher_type is "allgather" (Megatron refuses it there)'
        yield _note(t, "training", "moe_router_padding", why)
    elif lay.moe_token_dispatcher_type == "flex" and lay.moe_flex_dispatcher_backend == "hybridep":
        why = "HybridEP aligns each expert's tokens in its own dispatch"
        yield _note(t, "training", "moe_router_padding", why)


def _recompute(t: TrainingSection, p: ParallelSection, lay: Layout) -> Iterator[tuple[str, str]]:
    """Which modules selective recompute runs, set where the layout recomputes none or whole
    layers: Megatron reads them only with selective recompute (`plan_layout._recompute_modules`,
    which also keeps the one case it refuses)."""
    if lay.recompute == "selective":
        return
    why = f'recompute is "{lay.recompute}", not "selective"'
    if t.selective_recompute is not None:
        yield _note(t, "training", "selective_recompute", why)
    if "recompute_modules" in p.model_fields_set:
        yield _note(p, "parallel", "recompute_modules", why)


def _parallel(p: ParallelSection, job: Job, lay: Layout) -> Iterator[tuple[str, str]]:
    if not job.arch.is_moe:
        for name in DENSE_PARALLEL:
            # an expert TP equal to tp is what leaving it out means (Layout.expert_tp)
            if _given(p, name) and not (name == "etp" and p.etp == lay.tp):
                yield _note(p, "parallel", name, "the model has no experts")
    elif lay.moe_token_dispatcher_type != "flex":
        for name in ("moe_flex_dispatcher_backend", "moe_flex_dispatcher_num_sms"):
            if _given(p, name):
                why = f'moe_token_dispatcher_type is "{lay.moe_token_dispatcher_type}", not "flex"'
                yield _note(p, "parallel", name, why)
    if p.sequence_parallel and lay.tp == 1:  # arguments.py:1433-1439 d98e8a64
        yield _note(p, "parallel", "sequence_parallel", "tp is 1 (Megatron turns it off there)")
    if job.framework == "torchtitan" and job.titan.async_tp and lay.tp == 1:
        # b5bcd76c distributed/compile.py:49-52 and :80 (no TP mesh: returns), e347b1e5
        # llama3/infra/parallelize.py:76-96 (only under tp_enabled): ignored, without a word
        why = (
            "async_tp = true has no effect: tp is 1 (torchtitan enables async TP on the TP "
            "mesh only, and runs without one: distributed/compile.py:49-52, :80 at b5bcd76c)"
        )
        yield "torchtitan.async_tp", why
    if _given(p, "cp_comm_type") and lay.cp == 1:
        yield _note(p, "parallel", "cp_comm_type", "cp is 1")
    if _given(p, "microbatch_group_size_per_vp_stage") and lay.vpp == 1:
        why = "vpp is 1 (only the interleaved schedule groups micro-batches)"
        yield _note(p, "parallel", "microbatch_group_size_per_vp_stage", why)
    if _given(p, "overlap_p2p_comm") and lay.vpp == 1:  # arguments.py:1010-1012 d98e8a64
        why = "vpp is 1 (without interleaving Megatron turns the p2p overlap off itself)"
        yield _note(p, "parallel", "overlap_p2p_comm", why)
    if _given(p, "wgrad_deferral_limit") and not lay.defer_embedding_wgrad_compute:
        yield _note(p, "parallel", "wgrad_deferral_limit", "defer_embedding_wgrad_compute is off")
    twice = next((m for k, m in enumerate(p.offload_modules) if m in p.offload_modules[:k]), None)
    if twice is not None:  # read once (`plan_layout`)
        why = (
            f"offload_modules = {spelled(p.offload_modules)} names {twice} more than once: "
            "Megatron only asks whether a module is in the list (transformer_layer.py:"
            "1544-1553 d98e8a64), so it is offloaded once"
        )
        yield "parallel.offload_modules", why
    if _given(p, "activation_offload_fraction") and not lay.offload_modules:
        yield _note(p, "parallel", "activation_offload_fraction", "offload_modules is empty")
    if lay.offload_modules and lay.recompute == "full" and not _leaves_whole(lay, job):
        why = (
            'recompute is "full" on every layer: a layer keeps only its input, which no module '
            "offloads"
        )
        yield _note(p, "parallel", "offload_modules", why)
    if lay.pp == 1:
        for name in (
            "account_for_embedding_in_pipeline_split",
            "account_for_loss_in_pipeline_split",
        ):
            if _given(p, name):
                yield _note(p, "parallel", name, "pp is 1 (there is no pipeline split)")
    if job.framework == "megatron" and _set_true(p, "overlap_param_gather") and lay.zero_stage == 0:
        why = (
            "zero_stage is 0 (Megatron overlaps the sharded optimizer's parameter all-gather; "
            "launch leaves the flag out, which Megatron-LM refuses without one)"
        )
        yield _note(p, "parallel", "overlap_param_gather", why)


def _leaves_whole(lay: Layout, job: Job) -> bool:
    """Whether full recompute leaves some decoder layer whole, to run as without recompute (and
    so offload its modules' inputs, planner.model.offload_chunks.offloading_layers): a rank holding
    more layers than block recompute runs recomputed (`titan_every_layers.block_ranges`:
    Megatron's first N of each chunk, megatron/core/recompute.py d98e8a64, or torchtitan's every
    N-th); uniform recompute checkpoints every layer."""
    if lay.recompute_method != "block":
        return False
    ranks = lay.chunk_layers(job.arch.num_layers)
    return any(sum(map(len, block_ranges(lay, r))) < sum(map(len, r)) for r in ranks)


TP_ONLY = ("tp_userbuffers", "sp_keeps_gathered_input", "tp_backward_overlap")
"""`[training]` settings of the TP collectives and their buffers: nothing reads them at tp 1
(`planner.model.buffers.userbuffers` asks tp > 1; sequence parallelism, whose gathered input
the second keeps, is off at tp 1; the third times TP collectives, of which tp 1 has none)."""


def _unread_here(t: TrainingSection, job: Job, lay: Layout) -> Iterator[tuple[str, str]]:
    """`[training]` settings that the job's model or layout never reads (each checked against
    planner's estimates: memory and step time are the same with and without it)."""
    arch = job.arch
    if t.test_mode and not (arch.qk_layernorm and not arch.multi_latent_attention):
        why = (
            "the model has no QK layernorm outside MLA, the only weights Megatron's realtime "
            "test compares (attention.py:1765-1766 d98e8a64: it returns without them)"
        )
        yield _note(t, "training", "test_mode", why)
    if _given(t, "masked_softmax_fusion") and job.flash_attention:
        why = "flash_attention is on (only the unfused attention's softmax reads it)"
        yield _note(t, "training", "masked_softmax_fusion", why)
    if lay.tp == 1:
        for name in TP_ONLY:
            megatron_only = name == "tp_userbuffers" and job.framework == "torchtitan"
            if _given(t, name) and not megatron_only:  # (said above under torchtitan)
                yield _note(t, "training", name, "tp is 1 (no TP collectives or buffers)")
    if lay.zero_stage < 2 and _given(t, "fsdp_grad_comm_dtype"):
        why = f"zero_stage is {lay.zero_stage} (Megatron-FSDP's setting, ZeRO 2 and 3 only)"
        yield _note(t, "training", "fsdp_grad_comm_dtype", why)
    if arch.is_moe and _given(t, "moe_router_num_groups") and not job.moe_router_group_topk:
        why = (
            "moe_router_group_topk is not set (Megatron routes by group only with a group "
            "top-k: moe_utils.py:868 d98e8a64)"
        )
        yield _note(t, "training", "moe_router_num_groups", why)


def _unread_layout(p: ParallelSection, job: Job, lay: Layout) -> Iterator[tuple[str, str]]:
    """`[parallel]` settings that the job's model or layout never reads (checked as
    `_unread_here`'s)."""
    if lay.zero_stage < 2:
        why = f"zero_stage is {lay.zero_stage} (Megatron-FSDP's setting, ZeRO 2 and 3 only)"
        for name in ("fsdp_double_buffer", "fsdp_max_pool", "suggested_communication_unit_size"):
            if _given(p, name):
                yield _note(p, "parallel", name, why)
    no_shared = job.arch.is_moe and not job.arch.moe_shared_expert_intermediate_size
    if no_shared and _given(p, "moe_shared_expert_overlap"):
        why = (
            "the model has no shared experts (Megatron hands the dispatcher shared experts to "
            "overlap only where it builds them: moe_layer.py:345-353 d98e8a64)"
        )
        yield _note(p, "parallel", "moe_shared_expert_overlap", why)
