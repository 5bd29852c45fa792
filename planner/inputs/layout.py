"""Layout: one parallel layout (the `[parallel]` table, with dp resolved), a frozen value.

Degree names follow torchtitan's ParallelDims; each says what 1 means. Megatron's rank order is
tp-cp-ep-dp-pp: TP varies fastest (consecutive ranks, inside a node), PP slowest; tp-cp-ep-pp-dp
under `use_tp_pp_dp_mapping` (DP slowest).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

from planner.inputs.layout_split import (
    SplitKey,
    split_chunk_layers,
    split_mtp_rank,
    split_stages,
)

Recompute = Literal["none", "selective", "full"]
RecomputePolicy = Literal["none", "core_attn", "per_op", "full"]
"""What is recomputed: "selective" resolved by the training code (`Job.recompute_policy`)."""
RecomputeModule = Literal[
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
    "gdn_norm_out",
]
"""Megatron's --recompute-modules (TransformerConfig.recompute_modules): the parts of a layer
selective recompute re-runs. core_attn, mlp, moe and shared_experts are checkpointed (their inputs
kept, their insides recomputed); moe_act, layernorm, mla_up_proj and gdn_norm_out (a gated delta
net's gated output norm) discard their outputs and recompute them from their inputs."""
OffloadModule = Literal[
    "attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
    "fused_group_mlp",
]  # fmt: skip
"""Megatron's --offload-modules with --fine-grained-activation-offloading
(TransformerConfig.offload_modules, Megatron-LM d98e8a64): the submodules whose saved inputs go to
host memory in the forward and come back before their backward (`planner.model.fine_offload`)."""
MIN_OFFLOADED_ELEMENTS = 1024 * 1024
"""TransformerConfig.min_offloaded_tensor_size's default (Megatron-LM d98e8a64
transformer_config.py:1343): smaller tensors are not offloaded; the threshold fine-grained
offloading is counted with (`planner.model.fine_offload`) and the most a line may set
(`planner.inputs.megatron_startup`)."""
RecomputeMethod = Literal["uniform", "block"]
Dispatcher = Literal["alltoall", "allgather", "flex"]
FlexBackend = Literal["deepep", "hybridep"]
CpCommType = Literal["p2p", "a2a", "all_gather"]
"""How attention's context-parallel ranks exchange the sequence (Megatron --cp-comm-type, passed
to Transformer Engine as is; TransformerEngine context_parallel.py): p2p, a ring passing K/V
chunks under the attention kernel; a2a, DeepSpeed-Ulysses all-to-alls that trade sequence shards
for head shards before the attention and back after it; all_gather, every rank gathers the whole
K/V before the attention (Llama 3's, arXiv:2407.21783 sec. 3.3.2), neither overlapped. TE's
hierarchical a2a+p2p is not represented."""
ZeroStage = Literal[0, 1, 2, 3]

FSDP_STRATEGY = {0: "no_shard", 1: "optim", 2: "optim_grads", 3: "optim_grads_params"}
"""ZeRO stage -> Megatron-FSDP `--data-parallel-sharding-strategy` (ecosystem.md 3.2)."""


@dataclass(frozen=True)
class Layout:
    """A resolved parallel layout, built from a plan's `[parallel]` table
    (`planner.inputs.plan_layout.layout_from_section`) or by the search."""

    tp: int = 1
    """Tensor-parallel degree (1 = weights not split inside a layer)."""
    pp: int = 1
    """Pipeline stages (1 = no pipeline)."""
    dp: int = 1
    """Data-parallel replicas of the dense part (1 = no data parallelism)."""
    cp: int = 1
    """Context-parallel degree: the sequence is split across cp ranks (1 = not split)."""
    ep: int = 1
    """Expert-parallel degree: experts spread over ep ranks (1 = every rank holds every expert)."""
    etp: int | None = None
    """Expert tensor-parallel degree (None = tp, Megatron's default)."""
    vpp: int = 1
    """Virtual pipeline chunks per rank (1 = plain 1F1B, >1 = interleaved)."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism inside the TP group (only meaningful with tp > 1)."""
    micro_batch_size: int = 1
    """Sequences per micro-batch."""
    zero_stage: ZeroStage = 1
    """0 replicated; 1 optimizer sharded (distributed optimizer); 2 + grads; 3 + params (FSDP)."""
    recompute: Recompute = "none"
    """Activation recomputation: none; selective (the `recompute_modules`); full (whole layers, as
    `recompute_method` and `recompute_num_layers` say)."""
    recompute_modules: tuple[RecomputeModule, ...] = ("core_attn",)
    """What selective recompute re-runs (Megatron --recompute-modules; its default core_attn)."""
    recompute_method: RecomputeMethod = "uniform"
    """Full recompute: uniform (every layer, checkpointed in groups of recompute_num_layers) or
    block (only the first recompute_num_layers layers of each virtual stage)."""
    recompute_num_layers: int = 1
    """Full recompute's group size (uniform) or recomputed layers per virtual stage (block)."""
    recompute_every: int = 0
    """torchtitan's every-N-th-layer checkpointing (`[torchtitan] selective_layer_every`, with
    block full recompute): every N-th decoder layer of a rank, counted over its chunks in order,
    recomputed whole, in place of block's first recompute_num_layers of each chunk
    (`planner.inputs.titan_every_layers`); 0 none."""
    cpu_offloading_num_layers: int = 0
    """Decoder layers whose activations are offloaded to host memory (Megatron
    --cpu-offloading-num-layers; 0 = none)."""
    offload_modules: tuple[OffloadModule, ...] = ()
    """Fine-grained activation offloading (Megatron --fine-grained-activation-offloading
    --offload-modules): the submodules of every layer whose saved inputs live in host memory
    between their forward and backward; () = off."""
    activation_offload_fraction: float = 1.0
    """With `offload_modules`: the share of the eligible groups, first in forward order, that
    go to the host (Megatron --activation-offload-fraction; docs/user-guide/features/
    fine_grained_activation_offloading.md: the later groups stay on the GPU)."""
    moe_token_dispatcher_type: Dispatcher = "alltoall"
    """How MoE tokens reach their experts: alltoall (NCCL all-to-all), allgather (every rank
    gathers every token), flex (a fused dispatcher, `moe_flex_dispatcher_backend`)."""
    moe_flex_dispatcher_backend: FlexBackend = "deepep"
    """The flex dispatcher's kernels: DeepEP or HybridEP (only read with flex)."""
    moe_flex_dispatcher_num_sms: int | None = None
    """SMs the flex dispatcher's dispatch and combine kernels run on (Megatron
    --moe-flex-dispatcher-num-sms; None = Megatron's default, 20: `comms.ep_sm_share`; only
    read with flex). They hold them while the all-to-all hides under compute, and DeepEP sizes
    its buffers by them (`buffers.dispatcher_bytes`)."""
    cp_comm_type: CpCommType = "p2p"
    """Context parallelism's attention exchange (`CpCommType`; only read with cp > 1)."""
    pipeline_layers: tuple[int, ...] | None = field(default=None)
    """Decoder layers per pipeline rank (pp entries); None = even split."""
    pipeline_layout: tuple[str, ...] | None = None
    """Megatron's --pipeline-model-parallel-layout, expanded (`planner.inputs.pipeline_layout`):
    what each of the pp x vpp virtual stages holds; None = `pipeline_layers` or the even split."""
    account_for_embedding_in_pipeline_split: bool = False
    """Count the embedding as a layer in the even split: the first stage builds one decoder layer
    fewer (Megatron --account-for-embedding-in-pipeline-split)."""
    account_for_loss_in_pipeline_split: bool = False
    """Count the output layer and loss as a layer: the last stage builds one decoder layer fewer
    (Megatron --account-for-loss-in-pipeline-split)."""
    tp_comm_overlap: bool = False
    """Overlap TP communication with GEMMs (Megatron --tp-comm-overlap; needs SP)."""
    ep_comm_overlap: bool = False
    """Hide the expert all-to-all under another micro-batch's compute by running the forward of one
    micro-batch and the backward of another as one merged op (Megatron
    --overlap-moe-expert-parallel-comm --delay-wgrad-compute; needs ep > 1, and vpp > 1 when
    pp > 1)."""
    moe_shared_expert_overlap: bool = False
    """Run the shared experts on a side stream under the token dispatcher's all-to-alls (Megatron
    --moe-shared-expert-overlap: fc1 beside the dispatch, fc2 beside the combine; the alltoall or
    flex dispatcher, not with `ep_comm_overlap`): `dispatch.shared_overlap` hides what they can."""
    overlap_grad_reduce: bool = True
    """Reduce gradients in buckets during the backward (Megatron --overlap-grad-reduce). False:
    the whole reduction runs after the last micro-batch's backward, exposed."""
    microbatch_group_size_per_vp_stage: int | None = None
    """Micro-batches the interleaved schedule runs per virtual stage in a row (Megatron
    --microbatch-group-size-per-virtual-pipeline-stage; None = pp)."""
    overlap_p2p_comm: bool = True
    """With vpp > 1: the interleaved schedule's pipeline sends and receives overlap its compute
    (Megatron's default; --no-overlap-p2p-communication turns it off, arguments.py:3118-3120 at
    d98e8a64). False: each iteration's exchange is one batched, blocking call after its forward
    and backward (batch_p2p_comm = not overlap_p2p_comm, training/argument_utils.py:307), which
    needs pp > 2. Read only with vpp > 1: without interleaving Megatron turns it off anyway
    (arguments.py:1010-1012), so a plan's False at vpp 1 is priced as this default, and kept
    as written for a change to interleaving (check's advice)."""
    overlap_param_gather: bool = True
    """All-gather ZeRO-sharded parameters in buckets during the next forward (Megatron
    --overlap-param-gather; needs overlap_grad_reduce). False: after the optimizer step, exposed."""
    ddp_bucket_size: int | None = None
    """Parameters per data-parallel bucket (Megatron --ddp-bucket-size; NeMo's
    ddp.bucket_size). None: Megatron's default, max(40M, 1M x the data-parallel size)
    (distributed_data_parallel.py). Each bucket is one collective that starts when its last
    gradient is ready, so the last bucket of the backward (and the first of the forward's
    parameter gathers) shows whatever the overlap (`planner.model.dp_sync`)."""
    defer_embedding_wgrad_compute: bool = False
    """Defer the output layer's weight-gradient GEMMs to the pipeline flush (Megatron
    --defer-embedding-wgrad-compute; needs pp > 1): the last stage keeps each deferred call's
    output-layer input and logits gradient until then (`loss_activations.deferred_wgrad_bytes`)."""
    wgrad_deferral_limit: int = 0
    """With `defer_embedding_wgrad_compute`: how many of the output layer's calls per step defer
    their weight gradient (Megatron --wgrad-deferral-limit); 0 = every one."""
    ddp_num_buckets: int | None = None
    """Data-parallel buckets per model chunk (Megatron --ddp-num-buckets; NeMo's
    ddp.num_buckets): each bucket holds the chunk's parameters // this many (Megatron
    training.py resolve_ddp_bucket_size). Megatron rejects it together with ddp_bucket_size."""
    fsdp_double_buffer: bool = False
    """Megatron-FSDP (ZeRO 2, 3) takes its units' unsharded buffers from pools of two for the
    parameters and two for the gradients (Megatron --fsdp-double-buffer, implied by --use-nccl-ub
    and the max pool's flag, arguments.py:1172-1181 d98e8a64; Bridge ddp.fsdp_double_buffer)."""
    fsdp_max_pool: bool = False
    """With `fsdp_double_buffer`: the MaxPoolAllocator, every unit pooled, in place of the fixed
    pool (--megatron-fsdp-max-pool-double-buffer): `planner.model.megatron_fsdp_pool`."""
    suggested_communication_unit_size: int | None = None
    """Megatron-FSDP's communication unit in elements (Megatron
    --suggested-communication-unit-size; Bridge ddp.suggested_communication_unit_size): the
    gradient queue's capacity, half of it the all-gather prefetch. None: Megatron-FSDP's own
    (`planner.model.megatron_fsdp.unit_size`)."""
    dp_pools: int = 1
    """With pools: how many pools the data-parallel replicas are split over. 1 = the pipeline
    crosses pools (each pool holds whole stages); the pools' count = each pool holds dp / dp_pools
    whole pipeline replicas, one distributed-optimizer instance per pool (Megatron
    --num-distributed-optimizer-instances), and only the gradient all-reduce between instances
    crosses the link between pools (`planner.model.pools`)."""
    use_tp_pp_dp_mapping: bool = False
    """Megatron --use-tp-pp-dp-mapping (Bridge dist.use_tp_pp_dp_mapping): rank order
    tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp (Megatron-LM d98e8a64 initialize.py:395), so PP
    ranks lie tp x cp apart and DP ranks tp x cp x pp apart (`planner.model.dp_sync.strides`).
    Time only: no memory changes with it."""
    use_torch_fsdp2: bool = False
    """Megatron --use-torch-fsdp2 (Bridge dist.use_torch_fsdp2), at zero_stage 3: PyTorch's
    `fully_shard` per decoder layer, embedding and output layer in place of Megatron-FSDP
    (`planner.model.torch_fsdp2`); pp 1, ep 1 (`planner.search.rules.torch_fsdp2`)."""
    torch_fsdp2_reshard_after_forward: bool = True
    """With `use_torch_fsdp2`: each unit's gathered parameters freed after its forward, gathered
    again for its backward; False (--torch-fsdp2-no-reshard-after-forward) kept in between."""
    v_stages: bool = False
    """torchtitan's V placement (ZBVZeroBubble, DualPipeV at vpp 2; e347b1e5 distributed/
    pipeline_parallel.py:447-469): rank r holds stages r and 2 pp - 1 - r, rank 0 the first and
    the last (embedding, output layer, loss); False: stage k on rank k % pp (`stage_of`). Set
    from the schedule where a layout is built (`torchtitan_pipeline.v_stages`), any other
    refused (`rules.torchtitan_shapes.placement`)."""

    @property
    def cp_exchange(self) -> CpCommType | None:
        """The context-parallel exchange where it is not Megatron's default ring (cp > 1 and
        `cp_comm_type` a2a or all_gather): what a plan, a launch or a table has to name."""
        return self.cp_comm_type if self.cp > 1 and self.cp_comm_type != "p2p" else None

    @property
    def gathers_overlapped(self) -> bool:
        """Whether the parameter all-gather overlaps the forward: `overlap_param_gather` where
        something is gathered (the distributed optimizer or Megatron-FSDP, ZeRO >= 1); what a
        launch writes (Megatron-LM refuses the flag at ZeRO 0 and under torch FSDP2, which
        prefetches itself: arguments.py:1025-1027)."""
        return self.overlap_param_gather and self.zero_stage >= 1 and not self.use_torch_fsdp2

    @property
    def expert_tp(self) -> int:
        return self.etp if self.etp is not None else self.tp

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.cp * self.dp

    @property
    def dense_dp(self) -> int:
        """The group dense gradients are reduced and the optimizer is sharded over: dp x cp
        (Megatron shards the distributed optimizer over the data-parallel x context group)."""
        return self.dp * self.cp

    @property
    def expert_dp(self) -> int:
        """Expert data-parallel size: world / (etp x ep x pp) (Megatron's MoE folding)."""
        return self.num_gpus // (self.expert_tp * self.ep * self.pp)

    def num_microbatches(self, global_batch_size: int) -> int:
        """Micro-batches per pipeline per step: global_batch / (dp x micro_batch_size)."""
        return global_batch_size // (self.dp * self.micro_batch_size)

    def stages(self, num_layers: int, mtp_layers: int = 0) -> tuple[str, ...]:
        """What each of the pp x vpp virtual stages holds, in layer order (stage k on the rank
        `stage_of` says, chunk k // pp; E embedding, t decoder layer, m MTP layer, L loss): the
        `pipeline_layout`; else each rank's layers (`pipeline_layers` or the even split,
        counting the embedding and loss as a layer where the account_for flags say) in vpp
        chunks, the first chunks taking one more where they do not divide, the MTP layers in
        the last stage."""
        return split_stages(self.split_key(), num_layers, mtp_layers)

    @property
    def even_split(self) -> bool:
        """Megatron's even split: no pipeline_layers, layout string or layer accounting."""
        return self.split_key()[2:6] == (None, None, False, False)

    def split_key(self) -> SplitKey:
        """The fields that decide the stages (`layout_split`'s caches are keyed on these alone: the
        search asks for the stages of thousands of layouts that share a split)."""
        return (
            self.pp,
            self.vpp,
            self.pipeline_layers,
            self.pipeline_layout,
            self.account_for_embedding_in_pipeline_split,
            self.account_for_loss_in_pipeline_split,
            self.v_stages,
        )

    @property
    def output_rank(self) -> int:
        """The pipeline rank of the last stage (the output layer and the loss): pp - 1, or 0
        under the V placement (`v_stages`): `stage_of` of stage pp x vpp - 1, chunk vpp - 1 of
        rank pp - 1, which the V places back on rank 0 where that chunk is odd (asked of
        every rank of every layout the search estimates: without the call)."""
        return 0 if self.v_stages and (self.vpp - 1) % 2 else self.pp - 1

    def chunk_layers(self, num_layers: int) -> tuple[tuple[range, ...], ...]:
        """The decoder layers of each rank's chunks, as index ranges: per rank, one range per
        chunk (layers are numbered in stage order, each stage where `stage_of` places it)."""
        return split_chunk_layers(self.split_key(), num_layers)

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers on each pipeline rank."""
        return tuple(sum(map(len, chunks)) for chunks in self.chunk_layers(num_layers))

    def split_as_stages(self, num_layers: int, mtp_layers: int = 0) -> Layout:
        """The same layout with its pipeline split spelled as its stages (`pipeline_layout`),
        however it was given: two layouts split alike compare equal this way."""
        return self.with_(
            pipeline_layers=None,
            pipeline_layout=self.stages(num_layers, mtp_layers),
            account_for_embedding_in_pipeline_split=False,
            account_for_loss_in_pipeline_split=False,
        )

    def deferred_wgrad_calls(self, calls: int) -> int:
        """Of a step's `calls` output-layer calls, those whose weight gradient waits for the
        pipeline flush (`defer_embedding_wgrad_compute`): every one up to `wgrad_deferral_limit`
        (0: no limit), none without the deferral (Megatron-LM d98e8a64 tensor_parallel/layers.py
        appends to its buffers while fewer than the limit are held)."""
        if not self.defer_embedding_wgrad_compute:
            return 0
        return min(self.wgrad_deferral_limit or calls, calls)

    def mtp_rank(self, num_layers: int, mtp_layers: int) -> int | None:
        """The pipeline rank whose last chunk holds the MTP layers (None without them)."""
        if not mtp_layers:
            return None
        return split_mtp_rank(self.split_key(), num_layers, mtp_layers)

    def with_(self, **changes: object) -> Layout:
        """A copy with some fields changed (`dataclasses.replace` without its per-call field
        walk: the search makes hundreds of thousands of these; Layout has no __post_init__)."""
        if not _FIELD_NAMES.issuperset(changes):
            unknown = sorted(changes.keys() - _FIELD_NAMES)
            raise TypeError(f"Layout has no field {unknown[0]!r}")
        fields_ = self.__dict__.copy()
        fields_.update(changes)
        new = object.__new__(Layout)
        object.__setattr__(new, "__dict__", fields_)  # one dict, built whole (half the time)
        return new

    def describe(self) -> str:
        """Short human form, e.g. 'tp8 pp16 dp128 mbs1 zero1 recompute=none' ('vpp5 g6': five
        chunks a rank, run in groups of six micro-batches, where the layout sets the group)."""
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
            if self.cp_exchange:
                parts.append(f"cp-{self.cp_exchange.replace('_', '')}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.etp is not None and self.etp != self.tp:
            parts.append(f"etp{self.etp}")
        if self.vpp > 1:
            parts.append(f"vpp{self.vpp}")
            if self.microbatch_group_size_per_vp_stage is not None:  # else Megatron's pp
                parts.append(f"g{self.microbatch_group_size_per_vp_stage}")
        if self.dp_pools > 1:
            parts.append(f"dp-over-{self.dp_pools}-pools")
        switches = (
            (self.sequence_parallel, "sp"),
            (self.tp_comm_overlap, "tpov"),
            (self.ep_comm_overlap, "epov"),
            (self.moe_shared_expert_overlap, "shov"),
            (not self.overlap_grad_reduce, "grad-sync-exposed"),
            (self.zero_stage >= 1 and not self.overlap_param_gather, "param-gather-exposed"),
            (self.use_tp_pp_dp_mapping, "tp-pp-dp-order"),
            (self.use_torch_fsdp2, "torch-fsdp2"),
            (self.vpp > 1 and not self.overlap_p2p_comm, "p2p-blocking"),
        )
        parts += [name for on, name in switches if on]
        if self.moe_token_dispatcher_type != "alltoall":
            backend = self.moe_token_dispatcher_type == "flex"
            parts.append(self.moe_flex_dispatcher_backend if backend else "allgather")
            if backend and self.moe_flex_dispatcher_num_sms is not None:
                parts[-1] += f"-{self.moe_flex_dispatcher_num_sms}sm"
        if self.cpu_offloading_num_layers:
            parts.append(f"offload{self.cpu_offloading_num_layers}")
        if self.offload_modules:
            parts.append(f"offload({','.join(self.offload_modules)})")
        parts += [f"mbs{self.micro_batch_size}", f"zero{self.zero_stage}"]
        parts.append(f"recompute={self.recompute_text()}")
        return " ".join(parts)

    def recompute_text(self) -> str:
        """'none', 'selective(core_attn,mlp)', 'full', 'full(block 4)', 'full(uniform 2)',
        'full(every 3)' (torchtitan's every N-th layer)."""
        if self.recompute == "selective" and self.recompute_modules != ("core_attn",):
            return f"selective({','.join(self.recompute_modules)})"
        if self.recompute == "full" and self.recompute_every:
            return f"full(every {self.recompute_every})"
        if self.recompute == "full" and (self.recompute_method, self.recompute_num_layers) != (
            "uniform",
            1,
        ):
            return f"full({self.recompute_method} {self.recompute_num_layers})"
        return self.recompute


_FIELD_NAMES = frozenset(f.name for f in fields(Layout))
