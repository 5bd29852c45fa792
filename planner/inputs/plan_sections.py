"""The plan file's tables as pydantic models (DESIGN.md section 2): `[training]` and the whole
file (`[cluster]`: `planner.inputs.cluster_sections`, `[parallel]`: `planner.inputs.plan_parallel`),
each frozen with extra="forbid" (the literal types of their choices: `planner.inputs.plan_types`).

Only the shape and bounds of each field are checked here; `planner.inputs.plan` resolves the
sections into a Job and a Layout (catalog GPU, model, derived dp). A new plan-file field is a
field of a section here, carried on `Job` or `Layout` there.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.fields import (
    FiniteFloat,
    Flag,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)
from planner.inputs.hardware import MAX_GPU_MEMORY_GIB
from planner.inputs.plan_counts import MAX_GLOBAL_BATCH as MAX_GLOBAL_BATCH
from planner.inputs.plan_counts import MAX_SEQ_LENGTH as MAX_SEQ_LENGTH
from planner.inputs.plan_counts import Degree, Experts, LayerCount, Layers, SmCount, Steps, Tokens
from planner.inputs.plan_optimizer import OptimizerFields
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.plan_types import (
    AttentionKernel,
    CrossEntropy,
    CudaGraphImpl,
    CudaGraphModule,
    DsaKernelBackend,
    Fp8Recipe,
    ParamsDtype,
    Precision,
    SelectivePolicy,
    UnfusedAttention,
)
from planner.inputs.torchtitan import Framework, TorchtitanSection

MAX_CAPACITY_FACTOR = 1e6
"""The largest expert capacity factor, rank token budget or paged-stash factor a plan takes: an
expert-parallel rank can receive no more than every token of its group routed to it (ep x
top_k copies of its own share: a factor of the expert count at most, 384 in the model zoo), so
a million is past any meaningful setting and keeps the byte counts finite (a factor of 1e305
overflowed them to inf - inf, and the NaN working set read as none: "fits")."""


class TrainingSection(OptimizerFields):
    """`[training]`: sequence length, global batch (sequences per optimizer step), precision;
    the optimizer's fields are `OptimizerFields`'."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_length: PositiveInt = Field(le=MAX_SEQ_LENGTH)
    framework: Framework = Field(
        default="megatron",
        description="the training code: megatron (Megatron-LM) or torchtitan; it sets the defaults "
        "of the knobs below left out (None = the framework's, planner.inputs.torchtitan)",
    )
    global_batch_size: PositiveInt = Field(le=MAX_GLOBAL_BATCH)
    precision: Precision = "bf16"
    params_dtype: ParamsDtype | None = Field(
        default=None,
        description="the parameters' dtype under precision fp8 / fp4 (Megatron --bf16, --fp16, or "
        "neither: fp32 parameters and activations around the quantised GEMMs); bf16 if left "
        "out; with another precision it is that precision",
    )
    main_grad_dtype: Literal["fp32", "bf16"] = "fp32"
    fused_norm: Flag | None = Field(
        default=None, description="fused LayerNorm/RMSNorm kernels (false: plain PyTorch norms)"
    )
    cross_entropy: CrossEntropy | None = Field(
        default=None,
        description="fused: Megatron's vocab-parallel kernel; pytorch: torch cross_entropy on "
        "each rank's fp32 logits (vocab-split under TP); gathered: logits gathered over TP first",
    )
    selective_recompute: SelectivePolicy | None = Field(
        default=None,
        description="what recompute = 'selective' recomputes: core_attn (Megatron) or per_op "
        "(PyTorch per-op checkpointing, torchtitan's 'op' mode; torchtitan's only)",
    )
    fp8_param_gather: Flag | None = Field(
        default=None, description="fp8: weights kept only in fp8 (Megatron --fp8-param-gather)"
    )
    fp4_param_gather: Flag | None = Field(
        default=None,
        description="fp4: weights kept only in NVFP4 and all-gathered so (Megatron "
        "--fp4-param-gather)",
    )
    fp8_recipe: Fp8Recipe | None = Field(
        default=None,
        description="Megatron --fp8-recipe (default delayed): delayed or tensorwise (per-tensor "
        "scales), blockwise (128 x 128 / 1 x 128 blocks), mxfp8 (Blackwell, 1 x 32 blocks)",
    )
    moe_router_num_groups: Experts | None = Field(
        default=None, description="group-limited routing: expert groups (None = the model's)"
    )
    moe_router_group_topk: Experts | None = Field(
        default=None, description="groups a token may use (None = the model's)"
    )
    moe_expert_capacity_factor: PositiveFloat | None = Field(
        default=None,
        le=MAX_CAPACITY_FACTOR,
        description="token dropping: tokens per expert at most this x the even share",
    )
    moe_pad_expert_input_to_capacity: Flag = Field(
        default=False, description="pad every expert's tokens up to its capacity"
    )
    moe_expert_rank_capacity_factor: PositiveFloat | None = Field(
        default=None,
        le=MAX_CAPACITY_FACTOR,
        description="Megatron --moe-expert-rank-capacity-factor (HybridEP): each expert-parallel "
        "rank's static token budget, this x its routed copies; its expert tensors are that big "
        "and tokens beyond it dropped (None = dropless, sized as routed)",
    )
    moe_paged_stash: Flag = Field(
        default=False,
        description="Megatron --moe-paged-stash (needs moe_expert_rank_capacity_factor): the "
        "routed experts' saved activations move to a stash of moe_paged_stash_buffer_size_factor "
        "x their even share",
    )
    moe_paged_stash_buffer_size_factor: FiniteFloat = Field(
        default=1.10,
        ge=-MAX_CAPACITY_FACTOR,
        le=MAX_CAPACITY_FACTOR,
        description="Megatron --moe-paged-stash-buffer-size-factor-cuda: the stash's size over "
        "the even share (negative: over the actual maxima, bounded by the budget)",
    )
    moe_router_force_load_balancing: Flag = Field(
        default=False,
        description="benchmark routing: random router logits spread each token's experts "
        "uniformly, so every expert-parallel rank gets its even share up to sampling noise "
        "(Megatron --moe-router-force-load-balancing)",
    )
    moe_router_dtype: Literal["fp32", "fp64"] | None = Field(
        default=None,
        description="Megatron --moe-router-dtype: the router's probabilities in fp32 / fp64, and "
        "the allgather and alltoall dispatchers reduce-scatter the expert output in that dtype "
        "before the combine (None: the hidden states' dtype)",
    )
    cuda_graphs: Flag = Field(
        default=False,
        description="the decoder layers run as captured CUDA graphs (Megatron --cuda-graph-impl "
        "local | transformer_engine | full_iteration): one graph launch per layer and direction, "
        "so the host's per-kernel issue no longer floors a small layer's time",
    )
    cuda_graph_impl: CudaGraphImpl | None = Field(
        default=None,
        description="with cuda_graphs: Megatron --cuda-graph-impl (local, transformer_engine: "
        "per-layer graphs; full_iteration: the whole iteration, which Megatron also runs with CPU "
        "offloading and full recompute). None: what the launch target writes (local for "
        "Megatron-LM, transformer_engine for Megatron-Bridge)",
    )
    cuda_graph_modules: list[CudaGraphModule] | None = Field(
        default=None,
        description="with cuda_graphs: the regions of each layer captured (Megatron "
        "--cuda-graph-modules: attn, mlp, moe, moe_router, moe_preprocess, mamba); the rest "
        "runs eagerly. None: the whole layer",
    )
    flash_attention: Flag | None = Field(
        default=None, description="flash/cuDNN fused attention (false: s^2 scores stored)"
    )
    attention_kernel: AttentionKernel = Field(
        default="fused",
        description="the flash-attention kernel: fused (TE cuDNN / FlashAttention-3) or flash2 "
        "(FlashAttention-2: PyTorch SDPA's flash backend, torchtitan before Oct 2025)",
    )
    dsa_kernel_backend: DsaKernelBackend = Field(
        default="tilelang",
        description="DeepSeek sparse attention's kernels (Megatron --dsa-kernel-backend): "
        "tilelang or cudnn (sparse), or none (dense over fp32 s x s scores: Megatron's own "
        "default, which a command line without the flag is read as)",
    )
    dsa_indexer_loss_coeff: NonNegativeFloat = Field(
        default=0.0,
        ge=0.0,
        description="DeepSeek sparse attention: the indexer's KL loss weight (Megatron "
        "--dsa-indexer-loss-coeff); 0 = the indexer is frozen and keeps nothing for a backward",
    )
    dsa_indexer_use_sparse_loss: Flag = Field(
        default=False,
        description="the indexer loss over the top-k keys only (Megatron "
        "--dsa-indexer-use-sparse-loss); false: over every causal key",
    )
    fused_swiglu: Flag | None = Field(
        default=None,
        description="fused SwiGLU (false: eager silu(x) * gate, which also saves silu(x); "
        "Megatron --no-bias-swiglu-fusion); for an MoE model's squared-ReLU experts, Megatron's "
        "--use-fused-weighted-squared-relu (false, Megatron's default: the activation's output "
        "saved for the probabilities)",
    )
    fused_rope: Flag | None = Field(
        default=None,
        description="fused rotary embedding (false: Megatron --no-rope-fusion, or torchtitan "
        "without compile: its separate elementwise ops)",
    )
    sp_keeps_gathered_input: Flag | None = Field(
        default=None,
        description="sequence parallelism saves the all-gathered input of the column-parallel "
        "linears (PyTorch DTensor SP); Megatron saves its shard and re-gathers in backward",
    )
    tp_backward_overlap: Flag | None = Field(
        default=None,
        description="the column-parallel linears' backward TP collectives run under their dgrad "
        "and wgrad GEMMs (Megatron-LM, Transformer Engine); false: every TP collective blocks "
        "(plain autograd functions, PyTorch DTensor)",
    )
    compiled_loss_fusion: Flag = Field(
        default=False,
        description="Megatron --cross-entropy-loss-fusion (native): the loss's torch.compile'd "
        "steps hold one more fp32 copy of the local logits at their peak",
    )
    tp_userbuffers: Flag = Field(
        default=False,
        description="Transformer Engine's TP-overlap userbuffers are allocated though "
        "parallel.tp_comm_overlap is off (Megatron --tp-comm-overlap with every overlap it turns "
        "on disabled): counted in memory, not timed",
    )
    loss_fusion: Flag = Field(
        default=True,
        description="a fused vocab-parallel cross entropy (Megatron --cross-entropy-loss-fusion; "
        "NeMo's and Megatron-Bridge's default); false: Megatron-LM's default unfused loss, which "
        "moves about twice the HBM bytes per logit",
    )
    log_grad_stats: Flag = Field(
        default=False,
        description="Megatron --log-params-norm / --log-num-zeros-in-grad: every step also takes "
        "the parameters' norm or counts the zero gradients, tensor by tensor, and reads the result "
        "back to the host (planner.model.cost.GRAD_STATS_S)",
    )
    dataloader_attention_mask: Flag = Field(
        default=False,
        description="Megatron-LM's default (--no-create-attention-mask-in-dataloader off): the "
        "dataloader builds each sample's causal mask, [micro-batch, 1, seq, seq] bytes, and the "
        "first and the last pipeline stage hold it on the GPU through each forward; planner "
        "launch writes the flag that turns it off",
    )
    async_save: Flag = Field(
        default=False,
        description="Megatron --async-save with --use-persistent-ckpt-worker (Megatron-Bridge "
        "checkpoint.async_save): a checkpoint worker process beside each rank, with a CUDA "
        "context of its own on that rank's GPU for the whole run (planner.model.buffers)",
    )
    test_mode: Flag = Field(
        default=False,
        description="Megatron --test-mode: with QK layernorm, every attention forward all-gathers "
        "its QK-norm weights over the data- and tensor-parallel groups and compares each rank's "
        "copy on the host (planner.model.host.REALTIME_TEST_OPS)",
    )
    deterministic: Flag = Field(
        default=False,
        description="Megatron --deterministic-mode (torchtitan: debug.deterministic): torch's "
        "deterministic algorithms, NCCL's ring, Transformer Engine's deterministic attention; "
        "under Megatron every allocation is filled too (planner.model.determinism); needs "
        "loss_fusion = false and tp_comm_overlap = false",
    )
    weight_hash_interval: Steps = Field(
        default=0,
        description="Megatron --check-weight-hash-across-dp-replicas-interval: every this many "
        "steps each rank copies its weights to the host and SHA-1s them there "
        "(planner.model.weight_hash); 0: never",
    )
    bf16_layers_at_start: LayerCount = Field(
        default=0,
        description="fp8 / fp4: the first decoder layers that stay in bf16 (Megatron "
        "--first-last-layers-bf16 --num-layers-at-start-in-bf16)",
    )
    bf16_layers_at_end: LayerCount = Field(
        default=0,
        description="fp8 / fp4: the last decoder layers that stay in bf16 "
        "(--num-layers-at-end-in-bf16)",
    )
    fp8_attention: Flag = Field(
        default=False,
        description="fp8 / fp4: the fused attention's matmuls run in FP8 too (Transformer "
        "Engine's FP8 dot-product attention: Megatron-Core TransformerConfig "
        "fp8_dot_product_attention, Megatron-Bridge mixed_precision.fp8_dot_product_attention; "
        "Megatron-LM's command line has no flag for it)",
    )
    fp8_output_proj: Flag = Field(
        default=False,
        description="fp8 with fp8_recipe mxfp8: the output layer (LM head) runs in MXFP8 too "
        "(Megatron --fp8-output-proj, Megatron-Bridge mixed_precision.fp8_output_proj)",
    )
    moe_fused_grouped_mlp: Flag = Field(
        default=False,
        description="MoE: the experts' fc1, activation and fc2 as Transformer Engine's fused "
        "grouped MLP (Megatron --use-transformer-engine-op-fuser, with "
        "--moe-mlp-glu-interleave-size 32 for a GLU; Megatron-Bridge "
        "model.use_transformer_engine_op_fuser); its fused kernel runs on Blackwell with "
        "fp8_recipe mxfp8 or precision fp4 (launch exports NVTE_CUTEDSL_FUSED_GROUPED_MLP=1)",
    )
    moe_grouped_tensor: Flag = Field(
        default=False,
        description="MoE: the experts' weights as Transformer Engine's grouped tensor (Megatron "
        "--moe-use-grouped-tensor; not modelled: it lets moe_expert_rank_capacity_factor run on "
        "HybridEP without moe_fused_grouped_mlp)",
    )
    moe_router_padding: Flag = Field(
        default=False,
        description="MoE, fp8 / fp4 with the alltoall or DeepEP dispatcher: the router pads "
        "each expert's token count to the grouped GEMMs' alignment before the dispatch, and the "
        "experts skip their own padding copy (Megatron --moe-router-padding-for-quantization, "
        "alias --moe-router-padding-for-fp8; Megatron-Bridge "
        "model.moe_router_padding_for_quantization)",
    )
    gemm_sm_margin: SmCount = Field(
        default=0,
        description="NVTE_EXT_MARGIN_SM: SMs every Transformer Engine GEMM of the decoder leaves "
        "to the kernels overlapped with it (the GEMMs run on the GPU's SMs less this, all step); "
        "launch exports it",
    )
    rl_kv_cache_gib: NonNegativeFloat = Field(
        default=0.0,
        le=MAX_GPU_MEMORY_GIB,  # a per-GPU cache: no more than a GPU's memory can be
        description="Megatron RL (--perform-rl-step): the rollout engine's KV cache on each GPU, "
        "GiB (--inference-dynamic-batching-buffer-size-gb)",
    )
    rl_inference_parallel: tuple[Degree, Degree, Degree, Degree] | None = Field(
        default=None,
        description="Megatron RL: (tp, pp, ep, etp) of a separate rollout model whose bf16 "
        "weights every GPU also holds (--rl-inference-*-parallel-size); None: no second copy",
    )
    vision_encoder: tuple[Layers, Tokens, Tokens] | None = Field(
        default=None,
        description="Megatron's LLaVA (pretrain_vlm.py): (layers, tokens per image, patch size) "
        "of its vision transformer, the language model's shape; seq_length is the language "
        "model's (text and image tokens)",
    )
    t5_encoder: tuple[Layers, Tokens] | None = Field(
        default=None,
        description="Megatron's T5 (its example pretrain_t5.py): (encoder layers, encoder "
        "sequence length) of its encoder, the model's layer shape; the model's num_layers are "
        "the decoder's, each with a cross-attention over the encoder's output, and seq_length is "
        "the decoder's (pipeline and context parallelism 1)",
    )
    frozen_model: Flag = Field(
        default=False,
        description="the model's own parameters (embedding, decoder layers, output layer) are "
        "frozen and what trains lies outside it (a multimodal projector, e.g. Megatron-LM's "
        "MIMO LLaVA): no gradients, optimizer states, weight-gradient GEMMs or gradient sync for "
        "them, and their linear layers keep no inputs for a weight gradient",
    )
    attention_dropout: Flag = Field(
        default=True,
        description="the model has attention dropout (Megatron --attention-dropout > 0, its "
        "default 0.1): with an unfused attention, its mask and output per score",
    )
    unfused_attention: UnfusedAttention = Field(
        default="te",
        description="with flash_attention = false, which attention keeps the scores: te "
        "(Transformer Engine's unfused), local / local_fp32 (Megatron --transformer-impl local: "
        "its torch softmax in 16 bits, or in fp32 with --attention-softmax-in-fp32)",
    )
    masked_softmax_fusion: Flag = Field(
        default=True,
        description="Megatron's fused scale-mask-softmax kernel for its local attention, at most "
        "4096 keys (false: --no-masked-softmax-fusion, the torch softmax)",
    )
    hidden_dropout: Flag = Field(
        default=True,
        description="the model has hidden dropout (Megatron --hidden-dropout > 0, its default "
        "0.1): the embedding's and each residual add's dropout keeps a 1-byte mask per hidden "
        "element; at 0 PyTorch's dropout returns its input and keeps none",
    )
    expandable_segments: Flag | None = Field(
        default=None,
        description="the run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (as "
        "Megatron-Bridge's recipes and planner's launch files do): count the allocator's smaller "
        "fragmentation; false (PyTorch's default allocator) counts the larger",
    )


class PlanFile(BaseModel):
    """The whole file. `[model]` is checked separately (it has three shapes)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: dict[str, Any]
    cluster: ClusterSection
    training: TrainingSection
    parallel: ParallelSection | None = None
    torchtitan: TorchtitanSection | None = None
