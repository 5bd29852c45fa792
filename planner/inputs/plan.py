"""The plan file (DESIGN.md section 2) resolved into a Job and a Layout, and its loading.

A plan file has `[model]`, `[cluster]`, `[training]` and, for check/explain/launch, `[parallel]`.
`load_plan` validates every table at the boundary (the sections of `plan_sections`: frozen,
extra="forbid"), resolves the model (zoo name, HF config path relative to the plan file, or inline
Megatron fields) and the GPU (catalog name plus the plan's overrides; both `plan_resolve`), and
builds the layout (dp derived when omitted). Whether Megatron-LM accepts that layout is
`planner.search.rules` (`check_plan`), which every command that reads a `[parallel]` table
applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError
from planner.inputs.files import load_toml, validate
from planner.inputs.hardware import ClusterSpec
from planner.inputs.inert import inert
from planner.inputs.job import Job
from planner.inputs.layout import Layout
from planner.inputs.moe_checks import check_fused_grouped_mlp
from planner.inputs.plan_layout import layout_from_section
from planner.inputs.plan_resolve import resolve_cluster, resolve_model_table
from planner.inputs.plan_sections import PlanFile, TrainingSection
from planner.inputs.plan_types import CudaGraphImpl, CudaGraphModule
from planner.inputs.pools import above_catalog, resolve_pools
from planner.inputs.precision_checks import (
    check_precision,
    quantised_params_dtype,
    titan_params,
)
from planner.inputs.torchtitan import (
    Framework,
    TorchtitanSection,
    default_schedule,
    training_defaults,
)


@dataclass(frozen=True)
class Plan:
    """A loaded plan: the job, its layout (None without `[parallel]`), where it came from."""

    job: Job
    layout: Layout | None
    path: Path | None = None
    model_ref: dict[str, Any] | None = None
    inert: tuple[tuple[str, str], ...] = ()
    """(field, message) for the settings the plan gives that change nothing (`inert.inert`),
    and for the memory overrides above the catalog GPU's that its verdicts rest on
    (`pools.above_catalog`): each printed as a warning."""
    launch_notes: tuple[str, ...] = ()
    """What a launch target changed of the plan as written, said in its file's notes (the plan
    as the Megatron-LM targets launch it: `planner.emit.launch_pricing.megatron_lm_launched`)."""
    planned: Job | None = None
    """The job as the plan file writes it, where a launch target launches another (`job`, as
    `planner.emit.launch_pricing.launched` sets it): the figures a launch file's header gives
    beside the launched job's; None for the plan as written."""

    def require_layout(self) -> Layout:
        """The layout; check, explain and launch need one (exit 2 without `[parallel]`)."""
        if self.layout is None:
            raise InputError(f"{self.path}: parallel: the [parallel] table is missing")
        return self.layout


TRAINING_AS_IS = (
    "main_params_dtype",
    "exp_avg_dtype",
    "exp_avg_sq_dtype",
    "use_precision_aware_optimizer",
    "gradient_accumulation_fusion",
    "optimizer_offload_fraction",
    "optimizer_offload_overlap",
    "moe_expert_capacity_factor",
    "moe_expert_rank_capacity_factor",
    "moe_paged_stash",
    "moe_paged_stash_buffer_size_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_router_force_load_balancing",
    "moe_router_dtype",
    "cuda_graphs",
    "compiled_loss_fusion",
    "tp_userbuffers",
    "loss_fusion",
    "log_grad_stats",
    "dataloader_attention_mask",
    "async_save",
    "test_mode",
    "deterministic",
    "weight_hash_interval",
    "optimizer_instances",
    "outer_dp_sharding_strategy",
    "fsdp_grad_comm_dtype",
    "gemm_sm_margin",
    "bf16_layers_at_start",
    "bf16_layers_at_end",
    "fp8_attention",
    "fp8_output_proj",
    "moe_fused_grouped_mlp",
    "moe_grouped_tensor",
    "moe_router_padding",
    "optimizer",
    "muon_whole_params",
    "muon_ns_steps",
    "muon_tp_mode",
    "muon_split_qkv",
    "muon_matmul_precision",
    "muon_nesterov",
    "rl_inference_parallel",
    "vision_encoder",
    "t5_encoder",
    "attention_dropout",
    "hidden_dropout",
    "unfused_attention",
    "masked_softmax_fusion",
    "attention_kernel",
    "frozen_model",
    "dsa_kernel_backend",
    "dsa_indexer_loss_coeff",
    "dsa_indexer_use_sparse_loss",
)
"""`[training]` fields the Job takes as they are, under the same name (`build_job`), and that
`planner.inputs.plan_writer` writes back where they differ from the Job's defaults."""


TITAN_DROPOUT: dict[str, object] = {"attention_dropout": False, "hidden_dropout": False}
"""torchtitan's models have no dropout: no dropout module or call in e347b1e5's models/llama3,
qwen3, deepseek_v3 and moe, nor in b5bcd76c's models/common (`git grep -i dropout` finds none),
so its jobs keep no dropout masks unless the plan's `[training]` says otherwise."""


def build_job(
    arch: ModelArch,
    cluster: ClusterSpec,
    training: TrainingSection,
    path: Path | None,
    titan: TorchtitanSection | None = None,
) -> Job:
    """The job: the training-code knobs the plan leaves out take its framework's defaults
    (`planner.inputs.torchtitan.training_defaults`; Megatron's RoPE unfused under DeepSeek sparse
    attention, which refuses the fusion)."""
    where = str(path) if path else "<plan>"
    missing = cluster.gpu.missing_cores(training.precision)
    if missing:
        raise InputError(f'{where}: training.precision: "{training.precision}" but {missing}')
    check_precision(training, arch, where)
    check_fused_grouped_mlp(training, arch, where)
    check_t5(training, arch, where)
    framework = training.framework
    arch = trained_by(arch, framework, titan.num_mtp_layers if titan else 0)
    if training.framework == "megatron" and titan is not None:
        raise InputError(
            f'{where}: torchtitan: the [torchtitan] table needs training.framework = "torchtitan" '
            f'(got "megatron")'
        )
    if framework == "torchtitan":
        titan = titan or TorchtitanSection()
        if training.cuda_graphs:
            raise InputError(
                f'{where}: training.cuda_graphs: true, but framework = "torchtitan" does not '
                "capture its training steps in CUDA graphs; set cuda_graphs = false"
            )
    knobs = training_defaults(framework, titan.compile if titan else False)
    given = training.model_dump(exclude_none=True)
    if arch.has_dsa and framework == "megatron":
        knobs["fused_rope"] = False  # Megatron asserts no RoPE fusion with DSA (rules.dsa)
    knobs.update({k: given[k] for k in knobs if k in given})
    if framework == "torchtitan" and "tp_backward_overlap" not in given and titan is not None:
        knobs["tp_backward_overlap"] = titan.async_tp
    as_is = {name: getattr(training, name) for name in TRAINING_AS_IS}
    as_is["moe_fused_grouped_mlp"] = training.moe_fused_grouped_mlp and arch.is_moe  # moe_checks
    if framework == "torchtitan":  # its models have no dropout (`TITAN_DROPOUT`)
        as_is.update({k: v for k, v in TITAN_DROPOUT.items() if k not in training.model_fields_set})
    return Job(
        arch=arch,
        cluster=cluster,
        seq_length=training.seq_length,
        global_batch_size=training.global_batch_size,
        precision=training.precision,
        quantised_params_dtype=quantised_params_dtype(training),
        main_grad_dtype=training.main_grad_dtype,
        optimizer_state_dtype=training.optimizer_state_dtype,
        flash_attention=given.get("flash_attention", True),
        moe_router_num_groups=_or(training.moe_router_num_groups, arch.moe_router_num_groups),
        moe_router_group_topk=_or(training.moe_router_group_topk, arch.moe_router_group_topk),
        rl_kv_cache_bytes=training.rl_kv_cache_gib * 2**30,
        cuda_graph_modules=_graph_modules(training, where),
        cuda_graph_impl=_graph_impl(training, where),
        framework=framework,
        torchtitan=titan,
        **as_is,
        **knobs,  # type: ignore[arg-type]
    )


def check_t5(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """Raise InputError where a T5 encoder (`planner.model.t5`) meets what planner does not
    model with it: another encoder, experts, Mamba layers, torchtitan."""
    if training.t5_encoder is None:
        return
    field = f"{where}: training.t5_encoder"
    if training.vision_encoder is not None:
        raise InputError(f"{field}: a T5 encoder and a vision_encoder cannot both be given")
    if arch.is_moe or any(k.mixer != "attention" for k in arch.kinds):
        raise InputError(
            f"{field}: planner models T5 with dense transformer layers; model {arch.name!r} "
            "has experts or Mamba layers"
        )
    if training.framework != "megatron":
        raise InputError(f'{field}: T5 is Megatron-LM\'s (framework = "{training.framework}")')


def _graph_modules(training: TrainingSection, where: str) -> tuple[CudaGraphModule, ...]:
    """`training.cuda_graph_modules` as the job keeps it, checked and completed as Megatron-Core
    does (TransformerConfig, d98e8a64): only with CUDA graphs; the local implementation (None's,
    which `planner launch` writes, too) appends moe_router where moe_preprocess is named
    (transformer_config.py:2806-2816), so its later checks (moe with moe_router, a region of
    experts on a dense model: `rules.graphs.module_conflict`) see the router; Transformer
    Engine's asserts moe_preprocess with moe_router (transformer_config.py:2821-2824)."""
    mods = training.cuda_graph_modules
    if not mods:
        return ()
    if not training.cuda_graphs:
        raise InputError(
            f"{where}: training.cuda_graph_modules: {mods} needs training.cuda_graphs = true"
        )
    if "moe_preprocess" in mods and "moe_router" not in mods:
        if training.cuda_graph_impl in (None, "local"):
            return (*dict.fromkeys(mods), "moe_router")
        raise InputError(
            f"{where}: training.cuda_graph_modules: moe_preprocess needs moe_router under "
            f'cuda_graph_impl "{training.cuda_graph_impl}" (Megatron-Core asserts it; got {mods})'
        )
    return tuple(dict.fromkeys(mods))


def _graph_impl(training: TrainingSection, where: str) -> CudaGraphImpl | None:
    """`training.cuda_graph_impl`, checked as Megatron checks it (d98e8a64): only with CUDA graphs,
    and full_iteration without per-layer regions (TransformerConfig asserts
    "cuda_graph_modules must be empty when cuda_graph_impl="full_iteration"")."""
    impl = training.cuda_graph_impl
    if impl is None:
        return None
    if not training.cuda_graphs:
        raise InputError(
            f"{where}: training.cuda_graph_impl: {impl!r} needs training.cuda_graphs = true"
        )
    if impl == "full_iteration" and training.cuda_graph_modules:
        raise InputError(
            f"{where}: training.cuda_graph_modules: {training.cuda_graph_modules} with "
            'cuda_graph_impl "full_iteration" (the whole step is one graph; Megatron-Core '
            "asserts the regions empty)"
        )
    return impl


def _or(given: int | None, default: int | None) -> int | None:
    return given if given is not None else default


def parse_plan(data: dict[str, Any], path: Path | None = None) -> Plan:
    """Validate a parsed plan document and resolve it. The layout is as written: check it
    against Megatron-LM's rules with `planner.search.rules.check_plan`."""
    doc = validate(PlanFile, data, path)
    arch = resolve_model_table(doc.model, path)
    if doc.cluster.pools is not None:
        if doc.training.framework == "torchtitan":
            raise InputError(
                _TITAN_POOLS.format(where=path or "<plan>", given="training.framework")
            )
        cluster, pools, between = resolve_pools(doc.cluster, path, arch, doc.training.precision)
        job = build_job(arch, cluster, doc.training, path, doc.torchtitan)
        link = doc.cluster.between_pools
        allow = link is not None and link.allow_data_parallel
        job = replace(job, pools=pools, between_pools=between, pools_data_parallel=allow)
    else:
        cluster = resolve_cluster(doc.cluster, path)
        job = build_job(arch, cluster, doc.training, path, doc.torchtitan)
    layout = layout_from_section(job, doc.parallel, path) if doc.parallel is not None else None
    titan = job.torchtitan
    if titan and layout and titan.pipeline_schedule == default_schedule(layout.vpp):
        # one spelling of one plan: the schedule a plan would run anyway is left unnamed
        job = replace(job, torchtitan=titan.model_copy(update={"pipeline_schedule": None}))
    unread = (*inert(doc.training, doc.parallel, job, layout), *above_catalog(doc.cluster))
    return Plan(job=job, layout=layout, path=path, model_ref=dict(doc.model), inert=unread)


def trained_by(arch: ModelArch, framework: Framework, mtp: int = 0) -> ModelArch:
    """The model as `framework` builds it: torchtitan builds DeepSeek-V3's multi-token prediction
    only when asked (b5bcd76c models/deepseek_v3/__init__.py:616-628, num_mtp_layers = 0 unless
    given; e347b1e5 has no MTP module), so a torchtitan plan's model has `mtp` MTP depths
    (`[torchtitan] num_mtp_layers`), whatever the zoo model's: each its own copy (no repeated
    layer, __init__.py:291-316)."""
    titan = framework == "torchtitan" and arch.hybrid_layer_pattern is None
    if titan and (arch.mtp_num_layers, arch.mtp_use_repeated_layer) != (mtp, False):
        return arch.model_copy(update={"mtp_num_layers": mtp, "mtp_use_repeated_layer": False})
    return arch


_TITAN_POOLS = (
    "{where}: {given}: torchtitan trains on one kind of GPU: a cluster of pools "
    "(cluster.pools) is planned for Megatron-LM only (torch's pipelining places no stage on a "
    "pool, and no launch target runs torchtitan on pools)"
)


def reframe(job: Job, framework: Framework) -> Job:
    """The job as trained by `framework` (suggest --framework): its training-code knobs that
    framework's defaults, torchtitan's settings their defaults."""
    if framework == job.framework:
        return job
    if job.pools and framework == "torchtitan":
        raise InputError(_TITAN_POOLS.format(where="--framework", given="torchtitan"))
    if job.cuda_graphs and framework == "torchtitan":  # as `build_job` refuses it in a file
        raise InputError(
            "--framework: torchtitan, but the job sets training.cuda_graphs = true, and "
            "torchtitan does not capture its training steps in CUDA graphs; set cuda_graphs = "
            "false"
        )
    why = titan_params(job.params_dtype) if framework == "torchtitan" else None
    if why is not None:  # as a plan file's check (precision_checks) refuses it
        raise InputError(
            f"--framework: torchtitan, but the job trains with {job.params_dtype} parameters "
            f"(precision {job.precision}): {why}"
        )
    # torchtitan's default: no MTP layers (num_mtp_layers 0), whatever the model was trained
    # with; MTP would hold the search to pp 1 and cp 1 (rules.torchtitan_mtp), so a job asks
    # for it with [torchtitan] num_mtp_layers
    titan = TorchtitanSection() if framework == "torchtitan" else None
    knobs = training_defaults(framework, False)
    if framework == "torchtitan":
        knobs.update(TITAN_DROPOUT)
    arch = trained_by(job.arch, framework)
    return replace(job, arch=arch, framework=framework, torchtitan=titan, **knobs)  # type: ignore[arg-type]


def load_plan(path: Path, framework: Framework | None = None) -> Plan:
    """Read, validate and resolve a plan file (its layout not yet checked by the rules); with
    `framework`, as if its `[training] framework` said so (check / suggest --framework)."""
    data = load_toml(path)
    if framework is not None and isinstance(data.get("training"), dict):
        data["training"]["framework"] = framework
    return parse_plan(data, path)
