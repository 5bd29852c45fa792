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
from typing import Any, Literal

from planner.inputs import pipeline_layout
from planner.inputs.arch import ModelArch
from planner.inputs.errors import InputError, spelled
from planner.inputs.files import load_toml, validate
from planner.inputs.hardware import ClusterSpec, LinkTier, Pool
from planner.inputs.layout import Layout, Recompute, RecomputePolicy
from planner.inputs.plan_resolve import resolve_cluster, resolve_model_table
from planner.inputs.plan_sections import (
    CrossEntropy,
    CudaGraphModule,
    Fp8Recipe,
    MuonPrecision,
    MuonTpMode,
    ParallelSection,
    PlanFile,
    Precision,
    SelectivePolicy,
    TrainingSection,
)
from planner.inputs.pools import resolve_pools
from planner.inputs.torchtitan import (
    SINGLE_STAGE,
    Framework,
    TorchtitanSection,
    default_schedule,
    training_defaults,
)
from planner.inputs.userbuffers import TE_DEFAULT, UbSlot


@dataclass(frozen=True)
class Job:
    """What to train and on what: everything but the layout."""

    arch: ModelArch
    cluster: ClusterSpec
    seq_length: int
    global_batch_size: int
    precision: Precision = "bf16"
    main_grad_dtype: Literal["fp32", "bf16"] = "fp32"
    optimizer_state_dtype: Literal["fp32", "bf16"] = "fp32"
    fused_norm: bool = True
    cross_entropy: CrossEntropy = "fused"
    fused_swiglu: bool = True
    sp_keeps_gathered_input: bool = False
    tp_backward_overlap: bool = True
    expandable_segments: bool = False
    """The caching allocator grows expandable segments (PYTORCH_CUDA_ALLOC_CONF)."""
    fp8_param_gather: bool = True
    fp4_param_gather: bool = True
    """NVFP4 weights are the parameters (Megatron --fp4-param-gather; read with precision fp4)."""
    flash_attention: bool = True
    selective_recompute: SelectivePolicy = "core_attn"
    fp8_recipe: Fp8Recipe = "delayed"
    """How FP8 scales are chosen (Megatron --fp8-recipe; read with precision fp8)."""
    moe_router_num_groups: int | None = None
    """Group-limited routing: the experts fall in this many groups (None = no groups). With one
    group per node the routing is node-limited (DeepSeek-V3: 8 groups, 4 per token)."""
    moe_router_group_topk: int | None = None
    """Groups a token's experts may come from."""
    moe_expert_capacity_factor: float | None = None
    """Token dropping: each expert takes at most this x its even share of tokens (None =
    dropless)."""
    moe_pad_expert_input_to_capacity: bool = False
    """Every expert runs exactly its capacity of tokens (padded)."""
    moe_router_force_load_balancing: bool = False
    """Benchmark routing: random router logits, each token's experts drawn uniformly (Megatron
    --moe-router-force-load-balancing; `planner.model.routing_load`)."""
    compiled_loss_fusion: bool = False  # Megatron --cross-entropy-loss-fusion (native impl)
    log_grad_stats: bool = False  # Megatron --log-params-norm / --log-num-zeros-in-grad
    optimizer_instances: int = 1  # Megatron --num-distributed-optimizer-instances
    bf16_layers_at_start: int = 0
    """FP8 / NVFP4: the first decoder layers run in bf16 (Megatron --first-last-layers-bf16)."""
    bf16_layers_at_end: int = 0
    """The same for the last decoder layers."""
    fp8_attention: bool = False
    """FP8 / NVFP4: the fused attention's matmuls run in FP8 (Transformer Engine's FP8
    dot-product attention; `planner.model.attention`)."""
    gemm_sm_margin: int = 0
    """NVTE_EXT_MARGIN_SM: SMs every Transformer Engine GEMM of the decoder leaves free for the
    whole step (`planner.model.layer_time`)."""
    optimizer: Literal["adam", "muon"] = "adam"  # planner.model.optimizer_states
    muon_whole_params: bool = False  # the layer-wise optimizer's whole-parameter sharding
    muon_ns_steps: int = 5  # Megatron --muon-num-ns-steps (planner.model.muon_time)
    muon_tp_mode: MuonTpMode = "duplicated"  # --muon-tp-mode
    muon_split_qkv: bool = True  # --muon-split-qkv (--muon-no-split-qkv: False)
    muon_matmul_precision: MuonPrecision = "medium"  # --muon-fp32-matmul-prec
    rl_kv_cache_bytes: float = 0.0  # planner.model.rl_inference
    rl_inference_parallel: tuple[int, int, int, int] | None = None  # (tp, pp, ep, etp)
    vision_encoder: tuple[int, int, int] | None = None  # planner.model.vision
    attention_dropout: bool = True  # planner.model.scores
    frozen_model: bool = False
    """The model's own parameters are frozen (`[training] frozen_model`): only modules outside it
    train, which planner leaves out (`planner.model.memory`, `layer_time`, `cost`)."""
    tp_overlap_cfg: tuple[tuple[str, UbSlot], ...] = TE_DEFAULT
    """Transformer Engine's userbuffers slots for --tp-comm-overlap (`planner.inputs.userbuffers`:
    its defaults, what Megatron-LM runs without --tp-comm-overlap-cfg; a run's own tuned one,
    e.g. MLPerf's, by `userbuffers.resolve`)."""
    cuda_graphs: bool = False
    """The decoder layers run as captured CUDA graphs (Megatron --cuda-graph-impl): the host
    issues one graph per layer and direction instead of each kernel (`planner.model.host`)."""
    cuda_graph_modules: tuple[CudaGraphModule, ...] = ()
    """With `cuda_graphs`, the regions of each layer captured (Megatron --cuda-graph-modules);
    the rest of the layer runs eagerly. () = the whole layer."""
    pools: tuple[Pool, ...] = ()
    """A heterogeneous cluster's pools in pipeline order (`[[cluster.pools]]`); () = one GPU
    kind, `cluster` alone. With pools, `cluster` is the first pool's GPU counting every GPU."""
    between_pools: LinkTier | None = None
    """The link joining pools (with pools only)."""
    pools_data_parallel: bool = False
    """`[cluster.between_pools] allow_data_parallel`: layouts whose data-parallel replicas span
    the pools (`Layout.dp_pools`) may be used, and suggest considers them."""
    framework: Framework = "megatron"
    """The training code: Megatron-LM, or torchtitan (FSDP2, DTensor TP, torch pipelining)."""
    torchtitan: TorchtitanSection | None = None
    """torchtitan's own settings (`[torchtitan]`; its defaults when the table is left out), with
    framework "torchtitan" only."""

    @property
    def titan(self) -> TorchtitanSection:
        """The torchtitan settings (their defaults where none were given)."""
        return self.torchtitan or TorchtitanSection()

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element: 4 for fp32 main_grad buffers, 2 for bf16."""
        return 4.0 if self.main_grad_dtype == "fp32" else 2.0

    def recompute_policy(self, recompute: Recompute) -> RecomputePolicy:
        """What a layout's recompute setting recomputes in this training code: "selective" is
        the core attention (Megatron) or PyTorch's per-op policy."""
        return self.selective_recompute if recompute == "selective" else recompute

    @property
    def quantised(self) -> bool:
        """The decoder's linear layers run in FP8 or NVFP4 (Transformer Engine quantises their
        operands), not bf16."""
        return self.precision != "bf16"

    @property
    def quant_recipe(self) -> str:
        """How the linear layers' operands are quantised: the FP8 recipe, or "nvfp4"."""
        return "nvfp4" if self.precision == "fp4" else self.fp8_recipe

    @property
    def low_precision_params(self) -> bool:
        """The quantised weights are the parameters (--fp8-param-gather / --fp4-param-gather):
        no bf16 copy, and the distributed optimizer gathers them in their own bytes."""
        if self.precision == "fp8":
            return self.fp8_param_gather
        return self.precision == "fp4" and self.fp4_param_gather

    @property
    def optimizer_bytes(self) -> float:
        """Optimizer bytes per parameter: the fp32 master weight (4) and Adam's two moments
        (4 + 4 in fp32, 2 + 2 in bf16). Megatron's precision-aware optimizer with Transformer
        Engine >= 2.1 keeps only the master's 16-bit remainder (store_param_remainders, on by
        default; OptimizerConfig @d98e8a64), 2 bytes fewer: counting 4 is the safe side."""
        return 4.0 + (8.0 if self.optimizer_state_dtype == "fp32" else 4.0)

    @property
    def tokens_per_step(self) -> int:
        return self.seq_length * self.global_batch_size


@dataclass(frozen=True)
class Plan:
    """A loaded plan: the job, its layout (None without `[parallel]`), where it came from."""

    job: Job
    layout: Layout | None
    path: Path | None = None
    model_ref: dict[str, Any] | None = None

    def require_layout(self) -> Layout:
        """The layout; check, explain and launch need one (exit 2 without `[parallel]`)."""
        if self.layout is None:
            raise InputError(f"{self.path}: parallel: the [parallel] table is missing")
        return self.layout


TRAINING_AS_IS = (
    "moe_expert_capacity_factor",
    "moe_pad_expert_input_to_capacity",
    "moe_router_force_load_balancing",
    "cuda_graphs",
    "compiled_loss_fusion",
    "log_grad_stats",
    "optimizer_instances",
    "gemm_sm_margin",
    "bf16_layers_at_start",
    "bf16_layers_at_end",
    "fp8_attention",
    "optimizer",
    "muon_whole_params",
    "muon_ns_steps",
    "muon_tp_mode",
    "muon_split_qkv",
    "muon_matmul_precision",
    "rl_inference_parallel",
    "vision_encoder",
    "attention_dropout",
    "frozen_model",
)
"""`[training]` fields the Job takes as they are, under the same name (`build_job`), and that
`planner.inputs.plan_writer` writes back where they differ from the Job's defaults."""


def build_job(
    arch: ModelArch,
    cluster: ClusterSpec,
    training: TrainingSection,
    path: Path | None,
    titan: TorchtitanSection | None = None,
) -> Job:
    """The job: the training-code knobs the plan leaves out take its framework's defaults
    (`planner.inputs.torchtitan.training_defaults`)."""
    where = str(path) if path else "<plan>"
    missing = cluster.gpu.missing_cores(training.precision)
    if missing:
        raise InputError(f'{where}: training.precision: "{training.precision}" but {missing}')
    _check_bf16_layers(training, arch, where)
    _check_fp8_attention(training, where)
    framework = training.framework
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
    knobs.update({k: given[k] for k in knobs if k in given})
    if framework == "torchtitan" and "tp_backward_overlap" not in given and titan is not None:
        knobs["tp_backward_overlap"] = titan.async_tp
    return Job(
        arch=arch,
        cluster=cluster,
        seq_length=training.seq_length,
        global_batch_size=training.global_batch_size,
        precision=training.precision,
        main_grad_dtype=training.main_grad_dtype,
        optimizer_state_dtype=training.optimizer_state_dtype,
        flash_attention=given.get("flash_attention", True),
        moe_router_num_groups=_or(training.moe_router_num_groups, arch.moe_router_num_groups),
        moe_router_group_topk=_or(training.moe_router_group_topk, arch.moe_router_group_topk),
        rl_kv_cache_bytes=training.rl_kv_cache_gib * 2**30,
        cuda_graph_modules=_graph_modules(training, where),
        framework=framework,
        torchtitan=titan,
        **{name: getattr(training, name) for name in TRAINING_AS_IS},
        **knobs,  # type: ignore[arg-type]
    )


def _check_bf16_layers(training: TrainingSection, arch: ModelArch, where: str) -> None:
    """bf16 layers only where the rest is FP8 / NVFP4, never all of them, and not under delayed
    scaling (Megatron-Core TransformerConfig d98e8a64: "Delayed scaling does not support first /
    last layer in BF16"); the per-stage bound is a layout rule (`planner.search.rules`)."""
    start, end = training.bf16_layers_at_start, training.bf16_layers_at_end
    if not start and not end:
        return
    name = "bf16_layers_at_start" if start else "bf16_layers_at_end"
    if training.precision == "bf16":
        raise InputError(
            f'{where}: training.{name}: layers kept in bf16 need precision "fp8" or "fp4" '
            "(the whole model is bf16 already)"
        )
    if training.framework != "megatron":
        raise InputError(
            f"{where}: training.{name}: bf16 first / last layers are Megatron-LM's "
            "(--first-last-layers-bf16); torchtitan's float8 filters modules by name"
        )
    if start + end >= arch.num_layers:
        raise InputError(
            f"{where}: training.{name}: {start} + {end} bf16 layers leave none of the "
            f"{arch.num_layers} in {training.precision}"
        )
    if training.precision == "fp8" and (training.fp8_recipe or "delayed") == "delayed":
        raise InputError(
            f"{where}: training.{name}: Megatron's delayed FP8 scaling does not support bf16 "
            'first / last layers; set fp8_recipe = "tensorwise" (or another) or drop them'
        )


def _check_fp8_attention(training: TrainingSection, where: str) -> None:
    """FP8 attention only inside an FP8 / NVFP4 autocast whose recipe carries it: Megatron-Core
    (d98e8a64) passes fp8_dpa to Transformer Engine's delayed (TEDelayedScaling), tensorwise,
    mxfp8 and nvfp4 recipes, not to blockwise; and only for the fused attention kernel."""
    if not training.fp8_attention:
        return
    field = f"{where}: training.fp8_attention"
    if training.precision == "bf16":
        raise InputError(f'{field}: FP8 attention needs precision "fp8" or "fp4" (got "bf16")')
    if training.framework != "megatron":
        raise InputError(
            f"{field}: FP8 attention is Transformer Engine's (Megatron); torchtitan's float8 "
            "converts only linear layers"
        )
    if training.precision == "fp8" and training.fp8_recipe == "blockwise":
        raise InputError(
            f'{field}: Megatron does not pass FP8 attention to the "blockwise" recipe (only '
            "delayed, tensorwise, mxfp8 and NVFP4 take it); set fp8_attention = false"
        )
    if training.flash_attention is False:
        raise InputError(
            f"{field}: FP8 attention is the fused attention kernel's; it needs "
            "flash_attention = true"
        )


def _graph_modules(training: TrainingSection, where: str) -> tuple[CudaGraphModule, ...]:
    """`training.cuda_graph_modules` as the job keeps it, checked as Megatron-Core checks it
    (TransformerConfig, d98e8a64): only with CUDA graphs, and moe_preprocess with moe_router."""
    mods = training.cuda_graph_modules
    if not mods:
        return ()
    if not training.cuda_graphs:
        raise InputError(
            f"{where}: training.cuda_graph_modules: {mods} needs training.cuda_graphs = true"
        )
    if "moe_preprocess" in mods and "moe_router" not in mods:
        raise InputError(
            f"{where}: training.cuda_graph_modules: moe_preprocess needs moe_router (Megatron-Core "
            f"asserts it; got {mods})"
        )
    return tuple(dict.fromkeys(mods))


def _or(given: int | None, default: int | None) -> int | None:
    return given if given is not None else default


def _vpp(section: ParallelSection, stages: tuple[str, ...] | None) -> int:
    """The virtual pipeline size: as given; else, with a pipeline layout, its stages per rank
    (Megatron derives it so; a count that does not divide is a rule violation); else 1."""
    if section.vpp is not None:
        return section.vpp
    if stages is not None and len(stages) % section.pp == 0:
        return len(stages) // section.pp
    return 1


def torchtitan_stages(num_layers: int, stages: int) -> tuple[str, ...]:
    """torchtitan's default split over its pp x vpp stages (pipeline_parallel.py
    `generate_llm_fqn_per_model_part`, first / last_stage_less_layers = 1): num_layers + 2
    "effective layers" split evenly, the first stages one more, the embedding and the norm and
    output taking one layer's place in the first and the last stage; in planner's stage strings
    (E embedding, t decoder layer, L loss)."""
    per, extra = divmod(num_layers + 2, stages)
    out, left = [], num_layers
    for k in range(stages):
        n = per + (k < extra) - (k == 0) - (k == stages - 1)
        take = max(min(n, left), 0)
        left -= take
        out.append(("E" if k == 0 else "") + "t" * take + ("L" if k == stages - 1 else ""))
    return tuple(out)


def layout_from_section(job: Job, section: ParallelSection, path: Path | None) -> Layout:
    """Build a Layout from `[parallel]`, deriving dp (which must then be a whole number) and
    sequence parallelism (on when tp > 1 unless the table says otherwise)."""
    where = str(path) if path else "<plan>"
    model_size = section.tp * section.pp * section.cp
    n = job.cluster.num_gpus
    if section.dp is None:
        if n % model_size:
            raise InputError(
                f"{where}: parallel: num_gpus ({n}) must be a multiple of tp x pp x cp "
                f"({section.tp} x {section.pp} x {section.cp} = {model_size})"
            )
        dp = n // model_size
    else:
        dp = section.dp
    sp = section.sequence_parallel if section.sequence_parallel is not None else section.tp > 1
    stages = None
    titan_split = not (
        section.pipeline_layers
        or section.pipeline_model_parallel_layout
        or section.account_for_embedding_in_pipeline_split is not None
        or section.account_for_loss_in_pipeline_split is not None
    )
    if job.framework == "torchtitan" and section.pp > 1 and titan_split:
        # torchtitan's own split, unless the plan gives one
        named = job.titan.pipeline_schedule
        vpp = section.vpp or (2 if named is not None and named not in SINGLE_STAGE else 1)
        stages = torchtitan_stages(job.arch.num_layers, section.pp * vpp)
    if section.pipeline_model_parallel_layout is not None:
        text = section.pipeline_model_parallel_layout
        stages = pipeline_layout.parse(text)
        if stages is None:
            raise InputError(
                f"{where}: parallel.pipeline_model_parallel_layout: cannot read {spelled(text)}: "
                "stages of E, t, m, L separated by |, with x*n and (...)*n repeats"
            )
    layout = Layout(
        tp=section.tp,
        pp=section.pp,
        dp=dp,
        cp=section.cp,
        ep=section.ep,
        etp=section.etp,
        vpp=_vpp(section, stages),
        sequence_parallel=sp,
        micro_batch_size=section.micro_batch_size,
        zero_stage=section.zero_stage,
        recompute=section.recompute,
        recompute_modules=section.recompute_modules or ("core_attn",),
        recompute_method=section.recompute_method or "uniform",
        recompute_num_layers=section.recompute_num_layers or 1,
        cpu_offloading_num_layers=section.cpu_offloading_num_layers,
        offload_modules=section.offload_modules,
        moe_token_dispatcher_type=section.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=section.moe_flex_dispatcher_backend,
        microbatch_group_size_per_vp_stage=section.microbatch_group_size_per_vp_stage,
        pipeline_layers=section.pipeline_layers,
        pipeline_layout=stages,
        account_for_embedding_in_pipeline_split=bool(
            section.account_for_embedding_in_pipeline_split
        ),
        account_for_loss_in_pipeline_split=bool(section.account_for_loss_in_pipeline_split),
        tp_comm_overlap=section.tp_comm_overlap,
        ep_comm_overlap=section.ep_comm_overlap,
        overlap_grad_reduce=section.overlap_grad_reduce,
        overlap_param_gather=section.overlap_param_gather,
        ddp_bucket_size=section.ddp_bucket_size,
        ddp_num_buckets=section.ddp_num_buckets,
        dp_pools=section.dp_pools,
    )
    return _torchtitan_recompute(job, section, layout, where)


def _torchtitan_recompute(job: Job, section: ParallelSection, layout: Layout, where: str) -> Layout:
    """torchtitan's activation checkpointing on the layout. Its modes are recompute "none",
    "full" (every layer), "selective" (per-op SAC) and, with `[torchtitan]
    selective_layer_every = N`, "full" on every N-th layer of a rank (a counter over the rank's
    layers, torchtitan activation_checkpoint.py `_apply_layer_sac`): Megatron's block method with
    that many layers per virtual stage, in memory and time. Megatron's method / layer count /
    modules have no torchtitan setting."""
    if job.framework != "torchtitan":
        return layout
    for name in ("recompute_method", "recompute_num_layers", "recompute_modules"):
        if getattr(section, name) is not None:
            raise InputError(
                f"{where}: parallel.{name}: a Megatron-LM setting torchtitan does not have "
                f"(got {spelled(getattr(section, name))}); torchtitan recomputes none, full, "
                "selective (per-op) or, with torchtitan.selective_layer_every = N, every N-th layer"
            )
    every = job.titan.selective_layer_every
    if every is None:
        return layout
    if layout.recompute != "full":
        raise InputError(
            f"{where}: torchtitan.selective_layer_every: {every} needs parallel.recompute = "
            f'"full" (got "{layout.recompute}")'
        )
    most = max(len(c) for chunks in layout.chunk_layers(job.arch.num_layers) for c in chunks)
    return layout.with_(recompute_method="block", recompute_num_layers=max(most // every, 1))


def parse_plan(data: dict[str, Any], path: Path | None = None) -> Plan:
    """Validate a parsed plan document and resolve it. The layout is as written: check it
    against Megatron-LM's rules with `planner.search.rules.check_plan`."""
    doc = validate(PlanFile, data, path)
    arch = resolve_model_table(doc.model, path)
    if doc.cluster.pools is not None:
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
    return Plan(job=job, layout=layout, path=path, model_ref=dict(doc.model))


def reframe(job: Job, framework: Framework) -> Job:
    """The job as trained by `framework` (suggest --framework): its training-code knobs that
    framework's defaults, torchtitan's settings their defaults."""
    if framework == job.framework:
        return job
    titan = TorchtitanSection() if framework == "torchtitan" else None
    knobs = training_defaults(framework, False)
    return replace(job, framework=framework, torchtitan=titan, **knobs)  # type: ignore[arg-type]


def load_plan(path: Path, framework: Framework | None = None) -> Plan:
    """Read, validate and resolve a plan file (its layout not yet checked by the rules); with
    `framework`, as if its `[training] framework` said so (check / suggest --framework)."""
    data = load_toml(path)
    if framework is not None and isinstance(data.get("training"), dict):
        data["training"]["framework"] = framework
    return parse_plan(data, path)
