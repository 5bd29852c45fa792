"""Feasibility rules: what Megatron-LM validates, as pure predicates over (job, layout).

Each rule returns a `Violation` (the plan field it concerns and a Megatron-style message printing
both values) or nothing. `violations` runs them all; the search uses it to prune and to count
rejections per rule, `check_plan` turns a plan's into one InputError. Sources: Megatron-LM's
megatron/core/parallel_state.py, validate_args, TransformerConfig.__post_init__ and
num_microbatches_calculator.py (ecosystem.md section 1.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan


@dataclass(frozen=True)
class Violation:
    rule: str
    field: str
    message: str


Rule = Callable[[Job, Layout], Violation | None]


def _world(job: Job, lay: Layout) -> Violation | None:
    n = job.cluster.num_gpus
    if lay.num_gpus != n:
        return Violation(
            "world_size",
            "parallel",
            f"tp x pp x cp x dp ({lay.tp} x {lay.pp} x {lay.cp} x {lay.dp} = {lay.num_gpus}) "
            f"must equal num_gpus ({n})",
        )
    return None


def _heads(job: Job, lay: Layout) -> Violation | None:
    a = job.arch.num_attention_heads
    if a % lay.tp:
        return Violation(
            "heads_tp",
            "parallel.tp",
            f"num_attention_heads ({a}) must be a multiple of tensor_model_parallel_size "
            f"({lay.tp})",
        )
    return None


def _query_groups(job: Job, lay: Layout) -> Violation | None:
    g = job.arch.query_groups
    if job.arch.multi_latent_attention or g % lay.tp == 0 or lay.tp % g == 0:
        return None
    return Violation(
        "query_groups_tp",
        "parallel.tp",
        f"num_query_groups ({g}) must be a multiple of tensor_model_parallel_size ({lay.tp}) "
        f"or divide it",
    )


def _pipeline_split(job: Job, lay: Layout) -> Violation | None:
    L = job.arch.num_layers
    if lay.pipeline_layers is not None:
        pl = lay.pipeline_layers
        if len(pl) != lay.pp:
            return Violation(
                "pipeline_layers",
                "parallel.pipeline_layers",
                f"pipeline_layers has {len(pl)} entries but pipeline_model_parallel_size is "
                f"{lay.pp}",
            )
        if sum(pl) != L:
            return Violation(
                "pipeline_layers",
                "parallel.pipeline_layers",
                f"pipeline_layers sum to {sum(pl)} but num_layers is {L}",
            )
        short = [n for n in pl if n < lay.vpp]
        if short:
            return Violation(
                "pipeline_layers",
                "parallel.pipeline_layers",
                f"every pipeline rank needs at least vpp ({lay.vpp}) layers (got {short[0]})",
            )
        return None
    if L % (lay.pp * lay.vpp):
        return Violation(
            "layers_pp",
            "parallel.pp",
            f"num_layers ({L}) must be a multiple of pipeline_model_parallel_size x vpp "
            f"({lay.pp} x {lay.vpp} = {lay.pp * lay.vpp}); or give pipeline_layers",
        )
    return None


def _vpp(job: Job, lay: Layout) -> Violation | None:
    if lay.vpp > 1 and lay.pp == 1:
        return Violation(
            "vpp_pp",
            "parallel.vpp",
            f"virtual pipeline size ({lay.vpp}) needs pipeline_model_parallel_size > 1 (got 1)",
        )
    if lay.vpp > 1 and lay.dp * lay.micro_batch_size:
        m = lay.num_microbatches(job.global_batch_size)
        if m % lay.pp or m < lay.pp:
            return Violation(
                "vpp_microbatches",
                "parallel.vpp",
                f"the interleaved schedule needs the number of micro-batches ({m}) to be a "
                f"multiple of pipeline_model_parallel_size ({lay.pp})",
            )
    return None


def _experts(job: Job, lay: Layout) -> Violation | None:
    E = job.arch.num_moe_experts
    if E is None:
        if lay.ep > 1:
            return Violation(
                "ep_dense",
                "parallel.ep",
                f"expert_model_parallel_size ({lay.ep}) needs a mixture-of-experts model",
            )
        return None
    if E % lay.ep:
        return Violation(
            "experts_ep",
            "parallel.ep",
            f"num_moe_experts ({E}) must be a multiple of expert_model_parallel_size ({lay.ep})",
        )
    grid = lay.expert_tp * lay.ep * lay.pp
    if lay.num_gpus % grid:
        return Violation(
            "expert_grid",
            # an etp of its own is the likelier slip; otherwise the ep that etp (= tp) multiplies
            "parallel.etp" if lay.expert_tp != lay.tp else "parallel.ep",
            f"num_gpus ({lay.num_gpus}) must be a multiple of expert_tensor_parallel_size x "
            f"expert_model_parallel_size x pipeline_model_parallel_size "
            f"({lay.expert_tp} x {lay.ep} x {lay.pp} = {grid})",
        )
    if lay.tp > 1 and not lay.sequence_parallel:
        return Violation(
            "moe_sp",
            "parallel.sequence_parallel",
            f"mixture-of-experts training with tensor_model_parallel_size ({lay.tp}) > 1 needs "
            f"sequence_parallel = true",
        )
    return None


def _context(job: Job, lay: Layout) -> Violation | None:
    s = job.seq_length
    if lay.cp > 1 and s % (2 * lay.cp):
        return Violation(
            "seq_cp",
            "parallel.cp",
            f"seq_length ({s}) must be a multiple of 2 x context_parallel_size "
            f"(2 x {lay.cp} = {2 * lay.cp})",
        )
    return None


def _context_attention(job: Job, lay: Layout) -> Violation | None:
    # Megatron's own DotProductAttention asserts "Context parallelism is only supported by
    # TEDotProductAttention!", and Transformer Engine disables its unfused backend under CP
    # (get_attention_backend): CP runs only on the flash / cuDNN fused attention kernels
    if lay.cp > 1 and not job.flash_attention:
        return Violation(
            "cp_attention",
            "parallel.cp",
            f"context_parallel_size {lay.cp} needs flash attention (Transformer Engine's flash "
            "or fused backend); training.flash_attention is false",
        )
    return None


def _sequence_parallel(job: Job, lay: Layout) -> Violation | None:
    if lay.sequence_parallel and lay.tp == 1:
        return Violation(
            "sp_tp1",
            "parallel.sequence_parallel",
            "sequence_parallel = true needs tensor_model_parallel_size > 1 (got 1)",
        )
    if lay.tp_comm_overlap and not lay.sequence_parallel:
        return Violation(
            "tp_overlap_sp",
            "parallel.tp_comm_overlap",
            "tp_comm_overlap = true needs sequence_parallel = true (Megatron validate_args)",
        )
    return None


def _overlap(job: Job, lay: Layout) -> Violation | None:
    if lay.zero_stage >= 1 and lay.overlap_param_gather and not lay.overlap_grad_reduce:
        return Violation(
            "param_gather_overlap",
            "parallel.overlap_param_gather",
            "overlap_param_gather = true needs overlap_grad_reduce = true (Megatron "
            "validate_args); set both, or overlap_param_gather = false",
        )
    return None


def expert_overlap(job: Job, lay: Layout) -> Violation | None:
    """TransformerConfig's asserts for --overlap-moe-expert-parallel-comm, and validate_args'
    warning against TP or CP with it before Blackwell (they want CUDA_DEVICE_MAX_CONNECTIONS=1,
    the overlap more): the planner does not plan what Megatron warns against."""
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
    if lay.recompute == "full":
        return Violation("ep_overlap_recompute", field, f"{why} needs recompute other than full")
    if job.arch.mtp_num_layers > 1:
        return Violation(
            "ep_overlap_mtp",
            field,
            f"{why} supports at most one MTP layer (model has {job.arch.mtp_num_layers})",
        )
    gpu = job.cluster.gpu
    if (lay.tp > 1 or lay.cp > 1) and gpu.needs_one_device_connection:
        return Violation(
            "ep_overlap_connections",
            field,
            f"{why} needs CUDA_DEVICE_MAX_CONNECTIONS > 1, and tp ({lay.tp}) or cp ({lay.cp}) "
            f"> 1 needs it at 1 on {gpu.name}: use tp = cp = 1 with it",
        )
    return None


def _batch(job: Job, lay: Layout) -> Violation | None:
    gbs = job.global_batch_size
    unit = lay.micro_batch_size * lay.dp
    if gbs % unit:
        return Violation(
            "batch",
            "training.global_batch_size",
            f"global_batch_size ({gbs}) must be a multiple of micro_batch_size x dp "
            f"({lay.micro_batch_size} x {lay.dp} = {unit})",
        )
    return None


def _positions(job: Job, lay: Layout) -> Violation | None:
    arch = job.arch
    mp = arch.max_position_embeddings
    learned = arch.position_embedding_type == "learned_absolute"
    if learned and mp is not None and job.seq_length > mp:
        return Violation(
            "max_positions",
            "training.seq_length",
            f"seq_length ({job.seq_length}) exceeds max_position_embeddings ({mp}) of a "
            f"model with learned absolute positions",
        )
    return None


RULES: tuple[Rule, ...] = (
    _world,
    _heads,
    _query_groups,
    _pipeline_split,
    _vpp,
    _experts,
    _context,
    _context_attention,
    _sequence_parallel,
    _overlap,
    expert_overlap,
    _batch,
    _positions,
)


STRUCTURAL_RULES: tuple[Rule, ...] = (
    _heads,
    _query_groups,
    _experts,
    _context,
    _context_attention,
    _batch,
)
"""The rules that depend only on the parallel degrees (with micro_batch_size 1): the search
applies them to whole structures before it chooses micro-batches, vpp and splits."""


def violations(job: Job, layout: Layout) -> list[Violation]:
    """Every rule the layout breaks (empty = Megatron would accept it)."""
    found = []
    for rule in RULES:
        v = rule(job, layout)
        if v is not None:
            found.append(v)
    return found


def check_plan(plan: Plan) -> Plan:
    """The plan, once its layout passes every rule; the broken ones raise one InputError naming
    the file and each field. A plan without `[parallel]` passes unchanged."""
    if plan.layout is None:
        return plan
    found = violations(plan.job, plan.layout)
    if found:
        where = str(plan.path) if plan.path else "<plan>"
        raise InputError("\n".join(f"{where}: {v.field}: {v.message}" for v in found))
    return plan
