"""The Job: what to train and on what, everything a plan says but the layout (`planner.inputs.plan`
builds it from the plan file's tables; `planner.inputs.plan` re-exports it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.inputs.arch import ModelArch
from planner.inputs.hardware import ClusterSpec, LinkTier, Pool
from planner.inputs.layout import Recompute, RecomputePolicy
from planner.inputs.plan_types import (
    MOMENT_BYTES,
    QUANTISED,
    AttentionKernel,
    CrossEntropy,
    CudaGraphImpl,
    CudaGraphModule,
    DsaKernelBackend,
    Fp8Recipe,
    MomentDtype,
    MuonPrecision,
    MuonTpMode,
    ParamsDtype,
    Precision,
    SelectivePolicy,
    UnfusedAttention,
    params_dtype_of,
)
from planner.inputs.torchtitan import Framework, TorchtitanSection
from planner.inputs.userbuffers import TE_DEFAULT, UbSlot

OFFLOAD_GPU_PART_BYTES = 12.0
"""Per parameter the CPU-offloaded optimizer keeps on the GPU (the 1 - fraction share): Megatron-LM
d98e8a64's HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py,
built with param_update_in_fp32 in optimizer/__init__.py) updates a fp32 clone of each
parameter shard (4) with a GPU Adam given no moment dtypes (4 + 4 in fp32): Megatron's
--exp-avg-dtype does not reach it. The offloaded share keeps nothing on the GPU (its clone,
moments and gradient copy are pinned host tensors)."""


@dataclass(frozen=True)
class Job:
    """What to train and on what: everything but the layout."""

    arch: ModelArch
    cluster: ClusterSpec
    seq_length: int
    global_batch_size: int
    precision: Precision = "bf16"
    quantised_params_dtype: ParamsDtype = "bf16"
    """The parameters' dtype under an FP8 / NVFP4 precision (plan `training.params_dtype`);
    `params_dtype` gives it for every precision."""
    main_grad_dtype: Literal["fp32", "bf16"] = "fp32"
    optimizer_state_dtype: Literal["fp32", "bf16"] = "fp32"
    exp_avg_dtype: MomentDtype | None = None
    exp_avg_sq_dtype: MomentDtype | None = None
    """Megatron --exp-avg-dtype / --exp-avg-sq-dtype where a moment's differs from
    `optimizer_state_dtype` (`moment_dtypes`)."""
    main_params_dtype: Literal["fp32", "fp16"] = "fp32"
    """Megatron --main-params-dtype: the master weights Transformer Engine's FusedAdam keeps under
    the precision-aware optimizer, which fp16 implies (2 bytes, unscaled to fp32 at each step:
    `planner.model.adam_step`)."""
    use_precision_aware_optimizer: bool = False
    """Megatron --use-precision-aware-optimizer where nothing else here asks for it (fp32 moments
    and master on the GPU): Transformer Engine's FusedAdam keeps the master's 16-bit remainder and
    reads 16-bit gradients in place (`planner.model.adam_step`); `precision_aware_optimizer`
    says whether the run has it at all."""
    optimizer_offload_fraction: float = 0.0
    """Megatron --optimizer-cpu-offload: the share of the updated parameters whose optimizer state
    lives in host memory (`optimizer_bytes`, `planner.model.optimizer_offload`); 0 = off."""
    optimizer_offload_overlap: bool = True
    """Megatron --overlap-cpu-optimizer-d2h-h2d: the offloaded step's copies and CPU update
    pipeline over parameters (`planner.model.optimizer_offload.host_step_time`)."""
    gradient_accumulation_fusion: bool = True
    """Megatron's TE linears accumulate their weight gradients into the main gradients in the
    wgrad GEMM (false: --no-gradient-accumulation-fusion, `planner.model.wgrad_accumulation`)."""
    fused_norm: bool = True
    cross_entropy: CrossEntropy = "fused"
    fused_swiglu: bool = True
    fused_rope: bool = True
    """Rotary embeddings in one fused kernel (Megatron's apply_rope_fusion, torch.compile); false:
    Megatron --no-rope-fusion or eager torchtitan, their separate elementwise ops
    (`attention_time.UNFUSED_ROPE_BYTES`)."""
    sp_keeps_gathered_input: bool = False
    tp_backward_overlap: bool = True
    expandable_segments: bool = False
    """The caching allocator grows expandable segments (PYTORCH_CUDA_ALLOC_CONF)."""
    fp8_param_gather: bool = True
    fp4_param_gather: bool = True
    """NVFP4 weights are the parameters (Megatron --fp4-param-gather; read with precision fp4)."""
    flash_attention: bool = True
    attention_kernel: AttentionKernel = "fused"
    """Which flash-attention kernel runs it (`AttentionKernel`, `planner.model.attention`)."""
    selective_recompute: SelectivePolicy = "core_attn"
    fp8_recipe: Fp8Recipe = "delayed"
    """How FP8 scales are chosen (Megatron --fp8-recipe; read with precision fp8)."""
    optimizer_fp8_recipe: Fp8Recipe | None = None
    """The fp8_recipe Megatron-Core's OptimizerConfig sees where a launcher sets one apart from
    the job's (not a plan field: Megatron-Bridge's bf16 presets, "tensorwise",
    `planner.emit.launch_pricing.bridge_launched`); None: the job's own under FP8, Megatron-LM's
    default "delayed" otherwise. It decides the precision-aware optimizer's path
    (`planner.model.adam_step.decoupled`)."""
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
    moe_expert_rank_capacity_factor: float | None = None
    """HybridEP's static per-rank token budget over the rank's routed copies (Megatron
    --moe-expert-rank-capacity-factor; `routing_load.memory_loads`); None = dropless."""
    moe_paged_stash: bool = False
    """The routed experts' saved activations live in Megatron's paged stash (--moe-paged-stash)."""
    moe_paged_stash_buffer_size_factor: float = 1.10
    """The stash's CUDA buffer over the even share (--moe-paged-stash-buffer-size-factor-cuda;
    negative: over the actual maxima)."""
    moe_router_force_load_balancing: bool = False
    """Benchmark routing: random router logits, each token's experts drawn uniformly (Megatron
    --moe-router-force-load-balancing; `planner.model.routing_load`); under torchtitan its
    debug.moe_force_load_balance, a round robin (`planner.model.round_robin`)."""
    least_routing_load: bool = False
    """The search's bounds only, never a plan's: torchtitan's round robin priced at its least
    load, 1 (`planner.model.routing_load.least_load_job`)."""
    moe_router_dtype: Literal["fp32", "fp64"] | None = None
    """The router's dtype (Megatron --moe-router-dtype; None: the hidden states'): its
    probabilities take it, and the allgather and alltoall dispatchers cast the expert output to
    it for the reduce-scatter before the combine (`planner.model.router_dtype`)."""
    compiled_loss_fusion: bool = False  # Megatron --cross-entropy-loss-fusion (native impl)
    tp_userbuffers: bool = False
    """Transformer Engine's TP-overlap userbuffers are allocated whatever the layout's
    `tp_comm_overlap` (Megatron --tp-comm-overlap with its overlaps turned off: it still
    initialises the communicators, initialize.py:164; `planner.inputs.megatron_tp_overlap`)."""
    loss_fusion: bool = True
    """A fused vocab-parallel cross entropy (Megatron --cross-entropy-loss-fusion, Transformer
    Engine's or the compiled native kernel; NeMo's and Megatron-Bridge's default); False:
    Megatron-LM's default unfused loss (`output_time.UNFUSED_LOSS_BYTES_PER_LOGIT`)."""
    log_grad_stats: bool = False  # Megatron --log-params-norm / --log-num-zeros-in-grad
    dataloader_attention_mask: bool = False
    """Megatron-LM's dataloader builds each sample's causal mask and get_batch moves it to the
    first and the last pipeline stage (its default; --no-create-attention-mask-in-dataloader
    off, which planner launch writes): `planner.model.buffers.dataloader_mask_bytes`."""
    async_save: bool = False
    """Megatron --async-save with its persistent checkpoint worker: one more process per GPU,
    holding a CUDA context there all run (`planner.model.buffers.async_save_worker_bytes`)."""
    test_mode: bool = False  # Megatron --test-mode (planner.model.host.REALTIME_TEST_OPS)
    deterministic: bool = False  # Megatron --deterministic-mode (planner.model.determinism)
    weight_hash_interval: int = 0  # Megatron --check-weight-hash-across-dp-replicas-interval
    optimizer_instances: int = 1  # Megatron --num-distributed-optimizer-instances
    outer_dp_sharding_strategy: Literal["no_shard", "optim"] = "no_shard"
    """Megatron-FSDP's outer (across instances) sharding: "optim" shards the optimizer states over
    every data-parallel rank (`planner.model.memory`)."""
    fsdp_grad_comm_dtype: Literal["fp32", "bf16", "fp16"] | None = None
    """Megatron-FSDP's gradient communication dtype (Megatron --megatron-fsdp-grad-comm-dtype):
    its unsharded gradient buckets' (`grad_comm_bytes`); None: the main gradients'."""
    bf16_layers_at_start: int = 0
    """FP8 / NVFP4: the first decoder layers run in bf16 (Megatron --first-last-layers-bf16)."""
    bf16_layers_at_end: int = 0
    """The same for the last decoder layers."""
    dsa_kernel_backend: DsaKernelBackend = "tilelang"
    """DeepSeek sparse attention's kernels (`DsaKernelBackend`, `planner.model.dsa`): a plan's
    default is the sparse kernels a DSA model trains with; Megatron's own default, "none", is
    what `planner.inputs.megatron_dsa` reads a command line without --dsa-kernel-backend as."""
    dsa_indexer_loss_coeff: float = 0.0
    """The DSA indexer's KL loss weight; 0: the indexer runs without autograd."""
    dsa_indexer_use_sparse_loss: bool = False
    """The indexer loss over the top-k keys only (else over every causal key)."""
    fp8_attention: bool = False
    """FP8 / NVFP4: the fused attention's matmuls run in FP8 (Transformer Engine's FP8
    dot-product attention; `planner.model.attention`)."""
    fp8_output_proj: bool = False
    """FP8 with the MXFP8 recipe: the output layer's GEMM runs in MXFP8 (Megatron
    --fp8-output-proj; `output_time.output_layer_time`; its weight cache:
    `buffers.output_proj_cache_bytes`)."""
    moe_fused_grouped_mlp: bool = False
    """MoE: the experts run as Transformer Engine's fused grouped MLP (Megatron
    --use-transformer-engine-op-fuser; `grouped_mlp_fused` says where its kernel runs)."""
    moe_router_padding: bool = False
    """MoE, FP8 / FP4: the router pads each expert's token count to the GEMMs' alignment before
    the dispatch (Megatron --moe-router-padding-for-quantization; `planner.model.moe_padding`)."""
    moe_grouped_tensor: bool = False
    """MoE: the experts' weights as Transformer Engine's grouped tensor (Megatron
    --moe-use-grouped-tensor): not modelled; what lets a rank capacity factor run on HybridEP
    without the fused grouped MLP (`planner.search.rules.flex_settings`)."""
    gemm_sm_margin: int = 0
    """NVTE_EXT_MARGIN_SM: SMs every Transformer Engine GEMM of the decoder leaves free for the
    whole step (`planner.model.layer_time`)."""
    optimizer: Literal["adam", "muon"] = "adam"  # planner.model.optimizer_states
    muon_whole_params: bool = False  # the layer-wise optimizer's whole-parameter sharding
    muon_ns_steps: int = 5  # Megatron --muon-num-ns-steps (planner.model.muon_time)
    muon_tp_mode: MuonTpMode = "duplicated"  # --muon-tp-mode
    muon_split_qkv: bool = True  # --muon-split-qkv (--muon-no-split-qkv: False)
    muon_matmul_precision: MuonPrecision = "medium"  # --muon-fp32-matmul-prec
    muon_nesterov: bool = False  # --muon-nesterov (planner.model.muon_step)
    rl_kv_cache_bytes: float = 0.0  # planner.model.rl_inference
    rl_inference_parallel: tuple[int, int, int, int] | None = None  # (tp, pp, ep, etp)
    vision_encoder: tuple[int, int, int] | None = None  # planner.model.vision
    t5_encoder: tuple[int, int] | None = None  # planner.model.t5: (layers, encoder tokens)
    attention_dropout: bool = True  # planner.model.scores
    unfused_attention: UnfusedAttention = "te"  # without flash attention (planner.model.scores)
    masked_softmax_fusion: bool = True  # Megatron's, for its local attention (planner.model.scores)
    hidden_dropout: bool = True  # the residual dropouts' masks (planner.model.activations)
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
    cuda_graph_impl: CudaGraphImpl | None = None
    """With `cuda_graphs`, Megatron's --cuda-graph-impl where the plan or line names it (local,
    transformer_engine: per-layer; full_iteration: the whole step); None: what the launch target
    writes, per-layer graphs (`planner.emit.common.cuda_graph_impl`). What per-layer graphs
    refuse: `planner.search.rules.graphs`."""
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
    def megatron_loss(self) -> Literal["unfused", "native", "te"] | None:
        """Which of Megatron's vocab-parallel cross entropies the job runs (`cross_entropy`
        "fused"): "native" (the compiled fusion), "te" (Transformer Engine's, what a fused loss
        without the compiled one is launched as), "unfused" (`loss_fusion` False: Megatron's
        default); None for torch's loss or logits gathered over TP."""
        if self.cross_entropy != "fused":
            return None
        if self.compiled_loss_fusion:
            return "native"
        return "te" if self.loss_fusion else "unfused"

    @property
    def grad_bytes(self) -> float:
        """Bytes per gradient element: 4 for fp32 main_grad buffers, 2 for bf16."""
        return 4.0 if self.main_grad_dtype == "fp32" else 2.0

    @property
    def grad_comm_bytes(self) -> float:
        """Bytes per element of Megatron-FSDP's unsharded gradient buckets: those of
        `fsdp_grad_comm_dtype`, else `grad_bytes` (megatron_fsdp param_and_grad_buffer.py:
        3107-3111 fetches them in grad_comm_dtype where set, d98e8a64)."""
        if self.fsdp_grad_comm_dtype is None:
            return self.grad_bytes
        return MOMENT_BYTES[self.fsdp_grad_comm_dtype]

    def recompute_policy(self, recompute: Recompute) -> RecomputePolicy:
        """What a layout's recompute setting recomputes in this training code: "selective" is
        the core attention (Megatron) or PyTorch's per-op policy."""
        return self.selective_recompute if recompute == "selective" else recompute

    @property
    def params_dtype(self) -> ParamsDtype:
        """The parameters' dtype, which the activations, the collectives and the tensors a
        quantised recipe leaves unquantised share (`ParamsDtype`): the precision itself, or under
        FP8 / NVFP4 `quantised_params_dtype`."""
        return params_dtype_of(self.precision, self.quantised_params_dtype)

    @property
    def precision_text(self) -> str:
        """The precision as headers print it: "fp8", or "fp8 on fp32 parameters" where a quantised
        recipe's parameters are not bf16."""
        if self.quantised and self.params_dtype != "bf16":
            return f"{self.precision} on {self.params_dtype} parameters"
        return self.precision

    @property
    def quantised(self) -> bool:
        """The decoder's linear layers run in FP8 or NVFP4 (Transformer Engine quantises their
        operands), not bf16 or fp32."""
        return self.precision in QUANTISED

    @property
    def compiled(self) -> bool:
        """The training step runs under torch.compile: torchtitan with [torchtitan] compile."""
        return self.framework == "torchtitan" and self.titan.compile

    @property
    def quant_recipe(self) -> str:
        """How the linear layers' operands are quantised: the FP8 recipe, or "nvfp4"."""
        return "nvfp4" if self.precision == "fp4" else self.fp8_recipe

    @property
    def block_scaled(self) -> bool:
        """The linear layers' operands are quantised in blocks (MXFP8 or NVFP4), not per tensor."""
        return self.quantised and self.quant_recipe in ("mxfp8", "nvfp4")

    @property
    def attention_in_fp8(self) -> bool:
        """The fused attention's matmuls run in FP8: `fp8_attention` in an FP8 / NVFP4 job (its
        bf16 twin, `planner.model.bf16_layers`, runs them in bf16)."""
        return self.fp8_attention and self.quantised

    @property
    def output_layer_in_fp8(self) -> bool:
        """The output layer runs in MXFP8: `fp8_output_proj` in an FP8 job."""
        return self.fp8_output_proj and self.precision == "fp8"

    @property
    def grouped_mlp_fused(self) -> bool:
        """The fused grouped MLP's kernel runs: `moe_fused_grouped_mlp` in an MoE job on
        Blackwell (compute capability 10: B200, B300, GB200, GB300) with block-scaled operands
        (MXFP8 or NVFP4). Transformer Engine (d0067d0d ops/fused/grouped_mlp.py) fuses the
        experts' fc1, activation and fc2 only there (`fuse_grouped_mlp_ops`); elsewhere its op
        fuser runs the same operations one by one, as the unfused layer does."""
        return (
            self.moe_fused_grouped_mlp
            and self.arch.is_moe
            and self.cluster.gpu.is_blackwell
            and self.block_scaled
        )

    @property
    def low_precision_params(self) -> bool:
        """The quantised weights are the parameters (--fp8-param-gather / --fp4-param-gather):
        no bf16 copy, and the distributed optimizer gathers them in their own bytes."""
        if self.precision == "fp8":
            return self.fp8_param_gather
        return self.precision == "fp4" and self.fp4_param_gather

    @property
    def precision_aware_optimizer(self) -> bool:
        """Whether the run has Megatron's --use-precision-aware-optimizer: given
        (`use_precision_aware_optimizer`), or needed: for bf16 Adam moments, an fp16 master
        (OptimizerConfig asserts fp32 ones without it, optimizer_config.py:468-480 @d98e8a64),
        and the CPU-offloaded optimizer, which validate_args asserts it with."""
        return (
            self.moment_dtypes != ("fp32", "fp32")
            or self.optimizer_offload_fraction > 0
            or self.use_precision_aware_optimizer
            or self.main_params_dtype != "fp32"
        )

    @property
    def optimizer_bytes(self) -> float:
        """Optimizer bytes per parameter on the GPU, as the update reads and writes them: the
        master weight counted in fp32 (4) and Adam's two moments, each in its dtype
        (`moment_dtypes`: 4 in fp32, 2 in bf16 or fp16, 1 in fp8, MOMENT_BYTES).
        What Transformer Engine keeps of the master in 16 bits under the precision-aware
        optimizer (its remainder, or an fp16 master) the memory model takes off
        (`planner.model.adam_step.master_saving`). With the optimizer offloaded to the CPU, the
        share kept on the GPU at OFFLOAD_GPU_PART_BYTES each."""
        if self.optimizer_offload_fraction > 0:
            return (1.0 - self.optimizer_offload_fraction) * OFFLOAD_GPU_PART_BYTES
        return 4.0 + sum(MOMENT_BYTES[d] for d in self.moment_dtypes)

    @property
    def moment_dtypes(self) -> tuple[MomentDtype, MomentDtype]:
        """(exp_avg, exp_avg_sq) dtypes: each its own field where set, else
        `optimizer_state_dtype`."""
        both = self.optimizer_state_dtype
        return (self.exp_avg_dtype or both, self.exp_avg_sq_dtype or both)

    @property
    def tokens_per_step(self) -> int:
        return self.seq_length * self.global_batch_size
