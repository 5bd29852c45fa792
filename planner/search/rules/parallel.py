"""Megatron-LM's rules on the parallel layout: degrees and their products, the pipeline split and
layout string, the interleaved schedule's micro-batches, sequence parallelism, the data-parallel
overlap, the batch (context parallelism's are `planner.search.rules.context`). Sources:
Megatron-LM d98e8a64 megatron/core/parallel_state.py, validate_args,
TransformerConfig.__post_init__, pipeline_parallel_layer_layout.py, num_microbatches_calculator.py,
pipeline_parallel/schedules.py (benchmarks/data/megatron_rules.md lists each with its line)."""

from __future__ import annotations

from planner.inputs import pipeline_layout
from planner.inputs.layout import Layout
from planner.inputs.megatron_startup import moe_needs_sequence_parallel
from planner.inputs.plan import Job
from planner.model import sm_count
from planner.search.rules.base import Violation


def world(job: Job, lay: Layout) -> Violation | None:
    n = job.cluster.num_gpus
    if lay.num_gpus != n:
        return Violation(
            "world_size",
            "parallel",
            f"tp x pp x cp x dp ({lay.tp} x {lay.pp} x {lay.cp} x {lay.dp} = {lay.num_gpus}) "
            f"must equal num_gpus ({n})",
        )
    return None


def heads(job: Job, lay: Layout) -> Violation | None:
    a = job.arch.num_attention_heads
    if a % lay.tp:
        return Violation(
            "heads_tp",
            "parallel.tp",
            f"num_attention_heads ({a}) must be a multiple of tensor_model_parallel_size "
            f"({lay.tp})",
        )
    return None


def query_groups(job: Job, lay: Layout) -> Violation | None:
    g = job.arch.query_groups
    if job.arch.multi_latent_attention or g % lay.tp == 0 or lay.tp % g == 0:
        return None
    return Violation(
        "query_groups_tp",
        "parallel.tp",
        f"num_query_groups ({g}) must be a multiple of tensor_model_parallel_size ({lay.tp}) "
        f"or divide it",
    )


def pipeline_split(job: Job, lay: Layout) -> Violation | None:
    L = job.arch.num_layers
    if lay.pipeline_layout is not None:
        return _layout_string(job, lay)
    accounted = lay.account_for_embedding_in_pipeline_split, lay.account_for_loss_in_pipeline_split
    if lay.pipeline_layers is not None:
        pl = lay.pipeline_layers
        field = "parallel.pipeline_layers"
        if any(accounted):
            return Violation(
                "pipeline_layers",
                field,
                "pipeline_layers (uneven first / last stages) cannot be combined with "
                "account_for_embedding_in_pipeline_split or account_for_loss_in_pipeline_split "
                "(TransformerConfig raises)",
            )
        if len(pl) != lay.pp:
            return Violation(
                "pipeline_layers",
                field,
                f"pipeline_layers has {len(pl)} entries but pipeline_model_parallel_size is "
                f"{lay.pp}",
            )
        if sum(pl) != L:
            return Violation(
                "pipeline_layers", field, f"pipeline_layers sum to {sum(pl)} but num_layers is {L}"
            )
        # counts that are not multiples of vpp go out as a layout string, whose virtual stages
        # may be empty (megatron_rules.md section 7); a rank still needs a layer
        if min(pl) < 1:
            return Violation(
                "pipeline_layers", field, f"every pipeline rank needs a layer (got {min(pl)})"
            )
        return None
    extra = sum(accounted)
    if (L + extra) % (lay.pp * lay.vpp):
        counted = f"num_layers ({L})" if not extra else f"num_layers + {extra} ({L + extra})"
        return Violation(
            "layers_pp",
            "parallel.pp",
            f"{counted} must be a multiple of pipeline_model_parallel_size x vpp "
            f"({lay.pp} x {lay.vpp} = {lay.pp * lay.vpp}); or give pipeline_layers or "
            "pipeline_model_parallel_layout",
        )
    return None


def _layout_string(job: Job, lay: Layout) -> Violation | None:
    """Megatron's checks of --pipeline-model-parallel-layout (PipelineParallelLayerLayout and
    TransformerConfig.__post_init__)."""
    field = "parallel.pipeline_model_parallel_layout"
    stages = lay.pipeline_layout or ()
    clash = [
        name
        for name, given in (
            ("pipeline_layers", lay.pipeline_layers is not None),
            (
                "account_for_embedding_in_pipeline_split",
                lay.account_for_embedding_in_pipeline_split,
            ),
            ("account_for_loss_in_pipeline_split", lay.account_for_loss_in_pipeline_split),
        )
        if given
    ]
    if clash:
        return Violation(
            "pipeline_layout",
            field,
            f"pipeline_model_parallel_layout cannot be combined with {' or '.join(clash)} "
            "(TransformerConfig raises)",
        )
    arch = job.arch
    why = pipeline_layout.problems(stages, lay.pp, arch.num_layers, arch.mtp_num_layers)
    if why is not None:
        return Violation("pipeline_layout", field, f"the layout {why}")
    if len(stages) != lay.pp * lay.vpp:
        return Violation(
            "pipeline_layout",
            "parallel.vpp",
            f"the layout has {len(stages)} stages, so vpp is {len(stages) // lay.pp} with "
            f"pipeline_model_parallel_size {lay.pp} (got vpp {lay.vpp})",
        )
    return None


def vpp(job: Job, lay: Layout) -> Violation | None:
    if lay.vpp > 1 and lay.pp == 1:
        return Violation(
            "vpp_pp",
            "parallel.vpp",
            f"virtual pipeline size ({lay.vpp}) needs pipeline_model_parallel_size > 1 (got 1)",
        )
    if lay.vpp > 1 and lay.dp * lay.micro_batch_size and job.framework != "torchtitan":
        # torch's schedules take other counts (rules.torchtitan.schedule)
        return interleaved_microbatches(lay, lay.num_microbatches(job.global_batch_size))
    return None


def interleaved_microbatches(lay: Layout, m: int) -> Violation | None:
    """The interleaved schedule runs micro-batches in groups of g per virtual stage
    (--microbatch-group-size-per-virtual-pipeline-stage, default pp): it needs pp <= g <= m, and
    the last group either full or of at least pp (m mod g in {0} or [pp, g); schedules.py)."""
    g = lay.microbatch_group_size_per_vp_stage or lay.pp
    if not lay.pp <= g <= m:
        return Violation(
            "vpp_microbatches",
            "parallel.vpp",
            f"the interleaved schedule needs pipeline_model_parallel_size ({lay.pp}) <= "
            f"microbatch_group_size_per_vp_stage ({g}) <= the number of micro-batches ({m})",
        )
    rest = m % g
    if rest and rest < lay.pp:
        return Violation(
            "vpp_microbatches",
            "parallel.vpp",
            f"the interleaved schedule needs the number of micro-batches ({m}) to be a multiple "
            f"of microbatch_group_size_per_vp_stage ({g}), or to leave at least "
            f"pipeline_model_parallel_size ({lay.pp}) over (it leaves {rest})",
        )
    return None


def least_group(pp: int, m: int) -> int | None:
    """The smallest group `interleaved_microbatches` takes at m micro-batches (None: m < pp)."""
    return next((g for g in range(pp, m + 1) if m % g == 0 or m % g >= pp), None)


def experts(job: Job, lay: Layout) -> Violation | None:
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
    return None


def sm_margin(job: Job, lay: Layout) -> Violation | None:
    """Transformer Engine's GEMM SM margin (NVTE_EXT_MARGIN_SM, `Job.gemm_sm_margin`) must leave
    the GEMMs an SM of the GPU's (`sm_count.gpu_sms`)."""
    sms = sm_count.gpu_sms(job.cluster)
    if job.gemm_sm_margin < sms:
        return None
    return Violation(
        "sm_margin",
        "training.gemm_sm_margin",
        f"{job.gemm_sm_margin} SMs held back from the GEMMs, but {job.cluster.gpu.name} has "
        f"{sms}: the GEMMs would have none",
    )


def sequence_split(job: Job, lay: Layout) -> Violation | None:
    """Sequence parallelism splits each context-parallel rank's tokens (the first dimension of
    its [s, b, h] activations) over the TP group, which must divide them (Megatron-Core
    mappings.py d98e8a64 `_split_along_first_dim` asserts it). Degrees alone: a structural
    rule."""
    local = job.seq_length // lay.cp
    if not lay.sequence_parallel or lay.tp == 1 or local % lay.tp == 0:
        return None
    return Violation(
        "sp_seq",
        "training.seq_length",
        f"sequence parallelism splits each context-parallel rank's {local} tokens over "
        f"tensor_model_parallel_size {lay.tp}, which must divide them (Megatron-Core "
        "_split_along_first_dim asserts it)",
    )


def sequence_parallel(job: Job, lay: Layout) -> Violation | None:
    """Megatron's MoE layer needs sequence parallelism at tp > 1 (`moe_needs_sequence_parallel`;
    torchtitan's: `rules.torchtitan`), TP overlap too (arguments.py:1441-1442 d98e8a64), which
    it turns off at tp 1 (:1433-1439: a plan is read so, `plan_layout`, `inert` notes it)."""
    moe, megatron = job.arch.is_moe, job.framework == "megatron"
    if megatron and moe_needs_sequence_parallel(moe, lay.tp, lay.sequence_parallel):
        return Violation(
            "moe_tp_sp",
            "parallel.sequence_parallel",
            f"experts at tensor_model_parallel_size {lay.tp} need sequence_parallel = true "
            "(Megatron's MoE layer raises ValueError in training: moe_layer.py:636-640)",
        )
    if lay.tp_comm_overlap and not (lay.sequence_parallel and lay.tp > 1):
        return Violation(
            "tp_overlap_sp",
            "parallel.tp_comm_overlap",
            "tp_comm_overlap = true needs sequence_parallel = true (Megatron validate_args; it "
            "turns it off at tensor_model_parallel_size 1)",
        )
    return None


def overlap(job: Job, lay: Layout) -> Violation | None:
    if lay.zero_stage >= 1 and lay.overlap_param_gather and not lay.overlap_grad_reduce:
        return Violation(
            "param_gather_overlap",
            "parallel.overlap_param_gather",
            "overlap_param_gather = true needs overlap_grad_reduce = true (Megatron "
            "validate_args); set both, or overlap_param_gather = false",
        )
    if lay.defer_embedding_wgrad_compute and lay.pp == 1:
        return Violation(
            "defer_embedding_wgrad",
            "parallel.defer_embedding_wgrad_compute",
            "defer_embedding_wgrad_compute = true needs pipeline_model_parallel_size > 1 "
            "(Megatron's ModelParallelConfig raises: the weight gradients wait for a pipeline "
            "flush)",
        )
    if lay.defer_embedding_wgrad_compute and job.fp8_output_proj:
        return Violation(
            "defer_embedding_wgrad",
            "parallel.defer_embedding_wgrad_compute",
            "defer_embedding_wgrad_compute = true with training.fp8_output_proj: Transformer "
            "Engine's MXFP8 output projection does not support it (Megatron raises)",
        )
    if lay.ddp_bucket_size is not None and lay.ddp_num_buckets is not None:
        return Violation(
            "ddp_buckets",
            "parallel.ddp_num_buckets",
            "set ddp_bucket_size or ddp_num_buckets, not both (Megatron's "
            "DistributedDataParallelConfig: 'Cannot specify both num_buckets and bucket_size')",
        )
    return None


def optimizer_instances(job: Job, lay: Layout) -> Violation | None:
    """--num-distributed-optimizer-instances N (`Job.optimizer_instances`): Megatron's
    parallel_state asserts that N divides the data-parallel size with CP and the expert
    data-parallel size (Megatron-LM d98e8a64 parallel_state.py, initialize_model_parallel): on
    the degrees alone, so the search applies it to whole structures (`STRUCTURAL_RULES`)."""
    n = job.optimizer_instances
    if n > 1 and ((lay.dp * lay.cp) % n or lay.expert_dp % n):
        return Violation(
            "optimizer_instances",
            "training.optimizer_instances",
            f"optimizer_instances = {n} must divide dp x cp = {lay.dp * lay.cp} and the expert "
            f"data-parallel size {lay.expert_dp} (Megatron's parallel_state asserts)",
        )
    return None


def outer_dp_sharding(job: Job, lay: Layout) -> Violation | None:
    """The optimizer instances' outer sharding (--outer-dp-sharding-strategy optim) needs
    Megatron-FSDP's full sharding."""
    if job.outer_dp_sharding_strategy == "optim" and lay.zero_stage != 3:
        # megatron_fsdp fully_shard.py: "Sharding with Hybrid (Fully) Sharded Data Parallel
        # (HSDP) requires zero_dp_strategy to use FSDP ('optim_grads_params', 3)"
        return Violation(
            "outer_dp_sharding",
            "training.outer_dp_sharding_strategy",
            f"outer_dp_sharding_strategy optim needs Megatron-FSDP's optim_grads_params "
            f"(zero_stage 3; got {lay.zero_stage}): outer sharding builds on inner sharding",
        )
    return None


def weight_hash(job: Job, lay: Layout) -> Violation | None:
    """Megatron's weight-hash check (`Job.weight_hash_interval`): validate_args asserts it runs
    without Megatron-FSDP's full sharding (optim_grads_params: zero_stage 3; Megatron-LM d98e8a64
    arguments.py); torchtitan has no such check."""
    if job.weight_hash_interval <= 0:
        return None
    if job.framework == "torchtitan":
        return Violation(
            "weight_hash",
            "training.weight_hash_interval",
            "weight_hash_interval is Megatron-LM's check (--check-weight-hash-across-dp-replicas-"
            "interval); torchtitan has none: leave it 0",
        )
    if lay.zero_stage == 3:
        return Violation(
            "weight_hash",
            "parallel.zero_stage",
            f"weight_hash_interval = {job.weight_hash_interval} does not run with Megatron-FSDP's "
            "optim_grads_params (zero_stage 3; Megatron's validate_args asserts): use zero_stage "
            "0, 1 or 2, or weight_hash_interval 0",
        )
    return None


def deterministic(job: Job, lay: Layout) -> Violation | None:
    """Megatron's --deterministic-mode (`Job.deterministic`) asserts the fused cross entropy and
    TP communication overlap off (Megatron-LM d98e8a64 determinism.py,
    ARG_VALUES_REQUIRED_FOR_DETERMINISM: neither has a bit-reproducible path). The loss part
    depends on the job alone, so the rule is also one of the JOB_RULES; torchtitan's
    debug.deterministic has no such asserts."""
    if not job.deterministic or job.framework == "torchtitan":
        return None
    if job.megatron_loss in ("native", "te"):
        return Violation(
            "deterministic_loss",
            "training.loss_fusion",
            "deterministic = true runs Megatron's unfused cross entropy (its determinism.py "
            "asserts --cross-entropy-loss-fusion off): set loss_fusion = false",
        )
    if lay.tp_comm_overlap:
        return Violation(
            "deterministic_tp_overlap",
            "parallel.tp_comm_overlap",
            "deterministic = true does not run with tp_comm_overlap (Megatron's determinism.py "
            "asserts --tp-comm-overlap off): set tp_comm_overlap = false",
        )
    return None


def batch(job: Job, lay: Layout) -> Violation | None:
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


def positions(job: Job, lay: Layout) -> Violation | None:
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
