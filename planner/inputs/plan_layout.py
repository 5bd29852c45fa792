"""The `[parallel]` table as a Layout (`layout_from_section`): dp and sequence parallelism
derived, the pipeline split read (Megatron's layout string, or torchtitan's own split), the
stages placed as the schedule places them (`Layout.v_stages`: torchtitan's V schedules), and
torchtitan's activation checkpointing mapped onto Megatron's recompute settings."""

from __future__ import annotations

from pathlib import Path

from planner.inputs import pipeline_layout
from planner.inputs.errors import InputError, spelled
from planner.inputs.job import Job
from planner.inputs.layout import Layout, RecomputeModule
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.titan_every_layers import stand_in
from planner.inputs.torchtitan import SINGLE_STAGE
from planner.inputs.torchtitan_pipeline import v_stages


def _vpp(section: ParallelSection, stages: tuple[str, ...] | None) -> int:
    """The virtual pipeline size: as given; else, with a pipeline layout, its stages per rank
    (Megatron derives it so; a count that does not divide is a rule violation); else 1."""
    if section.vpp is not None:
        return section.vpp
    if stages is not None and len(stages) % section.pp == 0:
        return len(stages) // section.pp
    return 1


def torchtitan_stages(num_layers: int, stages: int, mtp: int = 0) -> tuple[str, ...]:
    """torchtitan's default split over its pp x vpp stages (pipeline_parallel.py
    `generate_llm_fqn_per_model_part`, first / last_stage_less_layers = 1): num_layers + 2
    "effective layers" split evenly, the first stages one more, the embedding and the norm and
    output taking one layer's place in the first and the last stage; in planner's stage strings
    (E embedding, t decoder layer, L loss); `mtp` MTP layers (m) before the loss, where
    torchtitan refuses them (models/deepseek_v3/mtp.py:196-206 at b5bcd76c: rules.mtp says so,
    not the layout)."""
    per, extra = divmod(num_layers + 2, stages)
    out, left = [], num_layers
    for k in range(stages):
        n = per + (k < extra) - (k == 0) - (k == stages - 1)
        take = max(min(n, left), 0)
        left -= take
        last = "m" * mtp + "L" if k == stages - 1 else ""
        out.append(("E" if k == 0 else "") + "t" * take + last)
    return tuple(out)


def too_many_stages(num_layers: int, pp: int, vpp: int) -> str | None:
    """Why pp x vpp virtual stages split without a layout string do not run, None where they
    do: more of them than the model's layers and the embedding and loss beside them, each stage
    holding one of them at least (torchtitan b5bcd76c distributed/pipeline_parallel.py:390-395
    raises "Number of stages (..) cannot be greater than effective layers (..)", the embedding
    and the output weighing a layer each). One check for the plan file (`_stages_fit`) and for
    the layouts the search and `planner check`'s fix list build
    (`rules.torchtitan_shapes.stage_count`)."""
    stages = pp * vpp
    if stages <= num_layers + 2:
        return None
    return (
        f"pp x vpp = {stages} virtual stages, more than the model's {num_layers} layers and its "
        "embedding and loss"
    )


def _stages_fit(job: Job, section: ParallelSection, where: str) -> None:
    """pp x vpp virtual stages at most the model's layers and the embedding and loss beside
    them (`too_many_stages`; a layout string's empty stages are counted by the string, which
    `pipeline_layout.parse` bounds): a fuzzer's vpp of 2^31 built as many chunks before any
    rule was asked."""
    vpp = section.vpp or 1
    why = too_many_stages(job.arch.num_layers, section.pp, vpp)
    if section.pipeline_model_parallel_layout is None and why is not None:
        field, value = ("vpp", vpp) if vpp > 1 else ("pp", section.pp)
        raise InputError(f"{where}: parallel.{field}: {value}: {why}")


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
    # Megatron turns sequence parallelism off at tp 1, with a warning (arguments.py:1433-1439
    # d98e8a64), before it asserts it on for TP overlap (:1441): read so (`inert` notes it)
    sp = section.sequence_parallel is not False and section.tp > 1
    _stages_fit(job, section, where)
    if section.recompute_modules == () and section.recompute == "selective":
        raise InputError(
            f'{where}: parallel.recompute_modules: [] with recompute = "selective" recomputes '
            'no module (Megatron runs an empty --recompute-modules so): set recompute = "none", '
            "or name the modules"
        )
    for name in ("recompute_method", "recompute_num_layers"):
        given = getattr(section, name)
        if given is None or job.framework != "megatron" or section.recompute == "full":
            continue
        # the layout's defaults cannot tell a given "uniform" or 1 from none (rules.features;
        # Megatron asserts no method with selective recompute, and reads none without full)
        raise InputError(
            f'{where}: parallel.{name}: {spelled(given)} needs recompute = "full" '
            f'(got "{section.recompute}")'
        )
    stages = None
    titan_split = not (  # an account_for_* flag given false is the default: torchtitan's split
        section.pipeline_layers
        or section.pipeline_model_parallel_layout
        or section.account_for_embedding_in_pipeline_split
        or section.account_for_loss_in_pipeline_split
    )
    if job.framework == "torchtitan" and section.pp > 1 and titan_split:
        # torchtitan's own split, unless the plan gives one
        named = job.titan.pipeline_schedule
        vpp = section.vpp or (2 if named is not None and named not in SINGLE_STAGE else 1)
        stages = torchtitan_stages(job.arch.num_layers, section.pp * vpp, job.arch.mtp_num_layers)
    if section.pipeline_model_parallel_layout is not None:
        text = section.pipeline_model_parallel_layout
        stages = pipeline_layout.parse(text)
        if stages is None:
            raise InputError(
                f"{where}: parallel.pipeline_model_parallel_layout: cannot read {spelled(text)}: "
                "stages of E, t, m, L separated by |, with x*n and (...)*n repeats, "
                f"{pipeline_layout.MAX_CHARS:,} characters at most"
            )
    vpp = _vpp(section, stages)
    layout = Layout(
        tp=section.tp,
        pp=section.pp,
        dp=dp,
        cp=section.cp,
        ep=section.ep,
        etp=_expert_tp(job, section),
        vpp=vpp,
        sequence_parallel=sp,
        micro_batch_size=section.micro_batch_size,
        zero_stage=section.zero_stage,
        recompute=section.recompute,
        recompute_modules=_recompute_modules(section, where),
        recompute_method=section.recompute_method or "uniform",
        recompute_num_layers=section.recompute_num_layers or 1,
        cpu_offloading_num_layers=section.cpu_offloading_num_layers,
        # Megatron only asks whether a module is in the list (transformer_layer.py:1544-1553,
        # attention.py:397-410, experts.py:254-267 d98e8a64): one named twice runs once
        # (`inert` notes it)
        offload_modules=tuple(dict.fromkeys(section.offload_modules)),
        activation_offload_fraction=section.activation_offload_fraction,
        moe_token_dispatcher_type=section.moe_token_dispatcher_type,
        moe_flex_dispatcher_backend=section.moe_flex_dispatcher_backend,
        moe_flex_dispatcher_num_sms=section.moe_flex_dispatcher_num_sms,
        cp_comm_type=section.cp_comm_type,
        microbatch_group_size_per_vp_stage=section.microbatch_group_size_per_vp_stage,
        # as written, also at vpp 1, where nothing reads it (`Layout.overlap_p2p_comm`) but a
        # change to interleaving (check's advice) runs what the file says
        overlap_p2p_comm=section.overlap_p2p_comm,
        pipeline_layers=section.pipeline_layers,
        pipeline_layout=stages,
        account_for_embedding_in_pipeline_split=bool(
            section.account_for_embedding_in_pipeline_split
        ),
        account_for_loss_in_pipeline_split=bool(section.account_for_loss_in_pipeline_split),
        tp_comm_overlap=section.tp_comm_overlap,
        ep_comm_overlap=section.ep_comm_overlap,
        moe_shared_expert_overlap=section.moe_shared_expert_overlap,
        overlap_grad_reduce=section.overlap_grad_reduce,
        overlap_param_gather=section.overlap_param_gather,
        ddp_bucket_size=section.ddp_bucket_size,
        ddp_num_buckets=section.ddp_num_buckets,
        fsdp_double_buffer=section.fsdp_double_buffer,
        fsdp_max_pool=section.fsdp_max_pool,
        suggested_communication_unit_size=section.suggested_communication_unit_size,
        defer_embedding_wgrad_compute=section.defer_embedding_wgrad_compute,
        wgrad_deferral_limit=section.wgrad_deferral_limit,
        dp_pools=section.dp_pools,
        use_tp_pp_dp_mapping=section.use_tp_pp_dp_mapping,
        use_torch_fsdp2=section.use_torch_fsdp2,
        torch_fsdp2_reshard_after_forward=section.torch_fsdp2_reshard_after_forward,
        v_stages=v_stages(job, vpp),  # the stages in stage order, placed by the schedule
    )
    _rank_order(job, layout, where)
    _p2p_overlap(job, section, where)
    _double_buffer(layout, where)
    return _torchtitan_recompute(job, section, layout, where)


def _expert_tp(job: Job, section: ParallelSection) -> int | None:
    """`etp` as written, else the training code's default: Megatron's follows tp (`Layout.etp`
    None); torchtitan's is 1 wherever EP is on: e347b1e5 config/job_config.py:464
    `expert_tensor_parallel_degree: int = 1` (EP then takes the TP ranks: efsdp = dp_shard x cp
    x tp / (etp x ep), distributed/parallel_dims.py:138), and b5bcd76c has no expert TP at all
    (its sparse region is dp_shard x cp x tp, parallel_dims.py:187-192; efsdp = fsdp x tp / ep,
    :282). Without EP torchtitan shards the experts over the whole tp mesh: tp (None) there
    (`rules.torchtitan.experts`)."""
    if section.etp is None and job.framework == "torchtitan" and section.ep > 1:
        return 1
    return section.etp


def _recompute_modules(section: ParallelSection, where: str) -> tuple[RecomputeModule, ...]:
    """The modules selective recompute runs: as given; Megatron's default ["core_attn"] where
    none are given or the recompute is not selective. Megatron reads the list only with
    --recompute-granularity selective (TransformerConfig's checks sit under it,
    transformer_config.py:1943-2011 d98e8a64, and every module asks for it: attention.py:392-395,
    transformer_layer.py:473-475, experts.py:269-272, moe_layer.py:247-255), so elsewhere it runs
    as not given (`inert` notes it), except that --overlap-moe-expert-parallel-comm asserts "moe"
    absent from it whatever the granularity (transformer_config.py:3030-3032)."""
    given = section.recompute_modules
    if section.recompute == "selective":
        return given or ("core_attn",)
    if given and "moe" in given and section.ep_comm_overlap:
        raise InputError(
            f"{where}: parallel.recompute_modules: {spelled(given)} with ep_comm_overlap = true: "
            "Megatron asserts 'disable moe in recompute_modules when enabling "
            "overlap_moe_expert_parallel_comm' whatever the recompute granularity "
            f'(transformer_config.py:3030-3032 d98e8a64; recompute is "{section.recompute}"): '
            "drop moe from recompute_modules"
        )
    return ("core_attn",)


def _rank_order(job: Job, layout: Layout, where: str) -> None:
    """`use_tp_pp_dp_mapping` where Megatron runs it: not under torchtitan (its device mesh
    order is fixed), nor across pools (planner places a pool's ranks in the default order); the
    degrees it needs are a rule (`planner.search.rules.rank_order`)."""
    if not layout.use_tp_pp_dp_mapping:
        return
    field = f"{where}: parallel.use_tp_pp_dp_mapping"
    if job.framework == "torchtitan":
        raise InputError(
            f"{field}: a Megatron-LM setting; torchtitan's device mesh order is fixed "
            "(pp, dp_replicate, dp_shard, cp, tp from the outermost: b5bcd76c "
            "distributed/parallel_dims.py:309)"
        )
    if job.pools:
        raise InputError(f"{field}: not with [[cluster.pools]] (pools hold whole pipeline stages)")


def _double_buffer(layout: Layout, where: str) -> None:
    """Megatron-FSDP's double buffer where it runs: not beside the EP overlap (Megatron-LM
    d98e8a64 mcore_fsdp_adapter.py:177-181 asserts "1F1B overlap with FSDP does not support
    double buffer"); the max pool is one of its allocators (pgb:2528-2532), nothing without it."""
    if layout.fsdp_max_pool and not layout.fsdp_double_buffer:
        raise InputError(
            f"{where}: parallel.fsdp_max_pool: true without fsdp_double_buffer = true: the max "
            "pool is the double buffer's allocator (param_and_grad_buffer.py:2524-2532 d98e8a64); "
            "set both (Megatron's --megatron-fsdp-max-pool-double-buffer turns the double buffer "
            "on, arguments.py:1179-1181)"
        )
    if layout.fsdp_double_buffer and layout.ep_comm_overlap and layout.zero_stage >= 2:
        raise InputError(
            f"{where}: parallel.fsdp_double_buffer: true with ep_comm_overlap = true: "
            "Megatron-FSDP asserts '1F1B overlap with FSDP does not support double buffer' "
            "(mcore_fsdp_adapter.py:177-181 d98e8a64)"
        )


def _p2p_overlap(job: Job, section: ParallelSection, where: str) -> None:
    """`overlap_p2p_comm` given false under torchtitan: a Megatron-LM setting torchtitan has no
    counterpart of (b5bcd76c config/configs.py:121 ParallelismConfig has none, and
    distributed/pipeline_parallel.py:322-336 builds torch's schedule with no communication
    option: the stages, the micro-batch count, the loss, scale_grads), so its launch could not
    run what the plan was timed with: refused rather than ignored."""
    if job.framework == "torchtitan" and not section.overlap_p2p_comm:
        raise InputError(
            f"{where}: parallel.overlap_p2p_comm: false: a Megatron-LM setting "
            "(--no-overlap-p2p-communication); torchtitan has none (its ParallelismConfig and "
            "torch's pipeline schedules take no such switch: b5bcd76c config/configs.py:121, "
            "distributed/pipeline_parallel.py:322-336)"
        )


def _torchtitan_recompute(job: Job, section: ParallelSection, layout: Layout, where: str) -> Layout:
    """torchtitan's activation checkpointing on the layout. Its modes are recompute "none",
    "full" (every layer), "selective" (per-op SAC) and, with `[torchtitan]
    selective_layer_every = N`, "full" on every N-th layer of a rank: one counter over all the
    rank's chunks in order, not one per chunk (e347b1e5 activation_checkpoint.py:24 and :37-40,
    pipeline_parallel.py:136-142; `titan_every_layers`, which says which layers): block full
    recompute carrying N (`Layout.recompute_every`, `titan_every_layers.stand_in`), or none
    where N is above every rank's layer count. Megatron's method / layer count / modules have
    no torchtitan setting."""
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
            f"{where}: torchtitan.selective_layer_every: {spelled(every)} needs "
            f'parallel.recompute = "full" (got "{layout.recompute}")'
        )
    return stand_in(layout, job.arch.num_layers, every)
