"""The plan file's `[parallel]` table as a pydantic model (frozen, extra="forbid"): the layout's
degrees, micro-batch, ZeRO stage, recompute, offloading, dispatcher and overlap switches, as
`planner.inputs.plan_layout` resolves them into a Layout. Its neighbours are in
`planner.inputs.plan_sections` (`[training]`, the whole file)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs.fields import Flag, Integer, NonNegativeFloat, PositiveInt
from planner.inputs.layout import (
    CpCommType,
    Dispatcher,
    FlexBackend,
    OffloadModule,
    Recompute,
    RecomputeMethod,
    RecomputeModule,
    ZeroStage,
)
from planner.inputs.plan_counts import (
    MAX_BUCKET_PARAMS,
    Batch,
    BatchCount,
    Degree,
    LayerCount,
    Layers,
    Sms,
)


class ParallelSection(BaseModel):
    """`[parallel]`: the layout. dp is derived from num_gpus when omitted."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tp: Degree = 1
    pp: Degree = 1
    cp: Degree = 1
    ep: Degree = 1
    etp: Degree | None = None
    vpp: Layers | None = Field(default=None, description="None = the layout's stages / pp, else 1")
    dp: Degree | None = None
    sequence_parallel: Flag | None = Field(default=None, description="None = on when tp > 1")
    micro_batch_size: Batch = 1
    zero_stage: Annotated[ZeroStage, Integer] = 1
    recompute: Recompute = "none"
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        default=None, description="selective recompute's modules (None = Megatron's core_attn)"
    )
    recompute_method: RecomputeMethod | None = Field(
        default=None, description="full recompute: uniform or block (None = uniform)"
    )
    recompute_num_layers: Layers | None = Field(
        default=None, description="full recompute: group size or layers per stage (None = 1)"
    )
    cpu_offloading_num_layers: LayerCount = 0
    offload_modules: tuple[OffloadModule, ...] = Field(
        default=(), description="fine-grained activation offloading's modules (() = off)"
    )
    activation_offload_fraction: NonNegativeFloat = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Megatron --activation-offload-fraction: the first this share of the "
        "offload groups, in forward order, go to the host (the rest stay on the GPU)",
    )
    moe_token_dispatcher_type: Dispatcher = "alltoall"
    moe_flex_dispatcher_backend: FlexBackend = "deepep"
    moe_flex_dispatcher_num_sms: Sms | None = Field(
        default=None,
        description="Megatron --moe-flex-dispatcher-num-sms: SMs of the flex dispatcher's "
        "dispatch / combine kernels (None = Megatron's default, 20; only read with flex)",
    )
    cp_comm_type: CpCommType = Field(
        default="p2p", description="context parallelism's exchange: p2p, a2a or all_gather"
    )
    microbatch_group_size_per_vp_stage: Batch | None = None
    overlap_p2p_comm: Flag = Field(
        default=True,
        description="with vpp > 1, the interleaved schedule's pipeline sends overlap compute "
        "(Megatron's default; false: --no-overlap-p2p-communication, blocking batched "
        "exchanges, needs pp > 2); no effect at vpp 1; Megatron-LM and Megatron-Bridge only",
    )
    pipeline_layers: tuple[Layers, ...] | None = None
    pipeline_model_parallel_layout: str | None = Field(
        default=None,
        min_length=1,
        max_length=65536,
        description="Megatron --pipeline-model-parallel-layout, e.g. 'Et*3|(tt|)*29,m|L'",
    )
    account_for_embedding_in_pipeline_split: Flag | None = Field(
        default=None, description="None = false (torchtitan: its own split, as given)"
    )
    account_for_loss_in_pipeline_split: Flag | None = Field(
        default=None, description="None = false (torchtitan: its own split, as given)"
    )
    tp_comm_overlap: Flag = False
    ep_comm_overlap: Flag = Field(
        default=False,
        description="Megatron --overlap-moe-expert-parallel-comm --delay-wgrad-compute",
    )
    moe_shared_expert_overlap: Flag = Field(
        default=False,
        description="Megatron --moe-shared-expert-overlap: the shared experts run beside the "
        "token dispatcher's all-to-alls",
    )
    overlap_grad_reduce: Flag = Field(
        default=True, description="Megatron --overlap-grad-reduce (planner launches with it)"
    )
    dp_pools: Degree = Field(
        default=1,
        description="pools the data-parallel replicas are split over (with pools: 1 = the "
        "pipeline crosses pools; their count = each pool runs dp / dp_pools whole replicas, "
        "Megatron --num-distributed-optimizer-instances; needs between_pools.allow_data_parallel)",
    )
    overlap_param_gather: Flag = Field(
        default=True, description="Megatron --overlap-param-gather (planner launches with it)"
    )
    ddp_bucket_size: PositiveInt | None = Field(
        default=None,
        le=MAX_BUCKET_PARAMS,
        description="parameters per data-parallel bucket (Megatron --ddp-bucket-size); unset: "
        "Megatron's default, max(40M, 1M x the data-parallel size)",
    )
    defer_embedding_wgrad_compute: Flag = Field(
        default=False,
        description="Megatron --defer-embedding-wgrad-compute: the output layer's weight "
        "gradients run at the pipeline flush (needs pp > 1); the last stage holds their inputs",
    )
    wgrad_deferral_limit: BatchCount = Field(
        default=0,
        description="Megatron --wgrad-deferral-limit: output-layer calls per step whose weight "
        "gradient is deferred (0 = all)",
    )
    use_tp_pp_dp_mapping: Flag = Field(
        default=False,
        description="Megatron --use-tp-pp-dp-mapping: rank order tp-cp-ep-pp-dp (pipeline "
        "ranks tp x cp apart, data-parallel ranks tp x cp x pp apart) instead of tp-cp-ep-dp-pp; "
        "Megatron-LM and Megatron-Bridge only",
    )
    use_torch_fsdp2: Flag = Field(
        default=False,
        description="Megatron --use-torch-fsdp2: PyTorch FSDP2 (fully_shard per decoder layer, "
        "embedding and output layer) in place of Megatron-FSDP; zero_stage 3, pp 1, ep 1; "
        "Megatron-LM and Megatron-Bridge only",
    )
    torch_fsdp2_reshard_after_forward: Flag = Field(
        default=True,
        description="with use_torch_fsdp2: free each unit's gathered parameters after its "
        "forward (false: Megatron --torch-fsdp2-no-reshard-after-forward, kept to its backward)",
    )
    ddp_num_buckets: PositiveInt | None = Field(
        default=None,
        le=MAX_BUCKET_PARAMS,
        description="data-parallel buckets per model chunk (Megatron --ddp-num-buckets: each "
        "holds the chunk's parameters // this many); not with ddp_bucket_size",
    )
    fsdp_double_buffer: Flag = Field(
        default=False,
        description="Megatron --fsdp-double-buffer (implied by --use-nccl-ub and "
        "--megatron-fsdp-max-pool-double-buffer): Megatron-FSDP's unit buffers from a fixed pool "
        "of two; zero_stage 2 / 3 only",
    )
    fsdp_max_pool: Flag = Field(
        default=False,
        description="with fsdp_double_buffer: Megatron --megatron-fsdp-max-pool-double-buffer, "
        "the MaxPoolAllocator: every unit pooled, each bucket offset sized to the largest unit's "
        "(false: the fixed pool of the most numerous unit shape)",
    )
    suggested_communication_unit_size: PositiveInt | None = Field(
        default=None,
        le=MAX_BUCKET_PARAMS,
        description="Megatron --suggested-communication-unit-size: Megatron-FSDP's gradient "
        "queue capacity in elements (half of it the all-gather prefetch); unset: Megatron-FSDP's "
        "own (at least 1e9)",
    )
