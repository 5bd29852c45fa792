"""How one decoder layer's activations are split on one GPU (`Shard`: the tokens of a micro-batch
on a context-parallel rank, the TP / SP / expert-TP split, the precision its linear layers keep,
what is recomputed or offloaded), and the byte rules every block's activations share: a dropout's
mask, a norm's input, a linear layer's saved input (`planner.model.activations` for the dense
blocks, `planner.model.moe_activations` for MoE layers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from planner.inputs.job import Job
from planner.inputs.layout import RecomputePolicy
from planner.inputs.plan_types import CudaGraphImpl, DsaKernelBackend, UnfusedAttention
from planner.model import dsa
from planner.model.job_memo import kept_hash

BF16 = 2
FP32 = 4
LINEAR_INPUT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1.0 / 16}
"""Bytes per element a linear layer keeps of its input for the weight gradient, by the training's
precision: bf16, fp16; FP8 8 bits (per-tensor scales: delayed, tensorwise); NVFP4 4 bits with a
1-byte E4M3 scale per 16 (Transformer Engine linear.py @d0067d0d keeps only the column-wise copy
the wgrad GEMM reads: `update_usage(rowwise_usage=False, columnwise_usage=True)`)."""

BLOCK_SCALED_FP8_INPUT_BYTES = 1.0 + 1.0 / 32
"""The FP8 column-wise copy with its block scales: MXFP8 one E8M0 byte per 32 values
(TransformerEngine d0067d0d tensor/mxfp8_tensor.py:139-175, columnwise scale_inv [M/32, K]
uint8); blockwise one fp32 per 1 x 128 (tensor/float8_blockwise_tensor.py:202-207,
[ceil(M/128), K] fp32: 4/128 = 1/32 too)."""


def linear_input_bytes(job: Job) -> float:
    """Bytes per element a linear layer keeps of its input (`Shard.linear_bytes`): the
    precision's (`LINEAR_INPUT_BYTES`, Transformer Engine's quantised copy, with its block scales
    under MXFP8 and blockwise FP8: `BLOCK_SCALED_FP8_INPUT_BYTES`), but under torchtitan
    the bf16 input itself: torchao's float8 linear saves the high-precision input and weight and
    casts them again in the backward (pytorch/ao 36027d82 torchao/float8/float8_linear.py:45,
    `ctx.save_for_backward(input_hp, weight_hp_t)`), as its grouped GEMM does for the routed
    experts. A compiled graph's partitioner may keep the float8 cast instead; not decidable
    from the source, so the larger is counted."""
    if job.framework == "torchtitan":
        return BF16
    if job.precision == "fp8" and job.fp8_recipe in ("mxfp8", "blockwise"):
        return BLOCK_SCALED_FP8_INPUT_BYTES
    return LINEAR_INPUT_BYTES[job.precision]


MASK = 1
"""Bytes per element of a dropout's saved mask (torch.bool)."""

UNFUSED_NORM_EXTRA = 6
"""Extra bytes per element a plain PyTorch RMSNorm/LayerNorm keeps over a fused kernel, which keeps
its bf16 input (2) and one statistic per token: the unfused one also keeps intermediate tensors
for autograd (a bf16 normalised tensor, 2; with a LLaMA-style fp32 upcast 4-8 more); the bf16
output counts as the next layer's input. Fitted (grid 4-10, picked 6) by benchmarks/fit_memory.py
on the Hagemann et al. rows without the fused kernel."""

MOE_LOAD_IMBALANCE = 1.2
"""Tokens the busiest expert-parallel rank receives, relative to the balanced share, under dropless
routing (Megatron's default, no capacity factor) with an auxiliary balancing loss: a planning
value, used for learned routing by the memory model (`routing_load.memory_load`). The step time
takes the expected busiest rank instead, which depends on the expert-parallel size and the experts
per rank and is this value at DeepSeek-V3's 32 ranks of 8 experts
(`routing_load.learned_routing_load`)."""

AttentionFp8 = Literal["", "delayed", "current", "mxfp8"]
"""How the fused FP8 attention quantises Q, K and V (`Shard.attention_fp8`; "": not in FP8)."""

SELECTIVE_DEFAULT: frozenset[str] = frozenset({"core_attn"})
"""Megatron's --recompute-modules when none are given (TransformerConfig, TC:1940-1941)."""


@dataclass(frozen=True)
class Shard:
    """How one layer's activations are split on one GPU."""

    tokens: int
    """Tokens per micro-batch on this context-parallel rank: seq_length / cp x micro_batch_size."""
    tp: int = 1
    sequence_parallel: bool = False
    etp: int = 1
    recompute: RecomputePolicy = "none"
    flash_attention: bool = True
    linear_bytes: float = BF16
    """`LINEAR_INPUT_BYTES` of the training's precision."""
    value_bytes: float = BF16
    """Bytes of one unquantised value the layer keeps, in the parameters' dtype: 2 (bf16, fp16),
    4 with fp32 parameters (`planner.model.fp32.word`)."""
    seq_per_cp_rank: int = 0
    """s / cp (for the s^2 attention-score term without flash attention)."""
    micro_batch_size: int = 1
    fused_norm: bool = True
    cross_entropy: Literal["fused", "pytorch", "gathered"] = "fused"
    compiled_loss: bool = False
    """The loss under torch.compile: Megatron's fused one COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT
    more per logit, torchtitan's COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT (`logits_bytes`)."""
    loss_chunks: int = 1
    """torchtitan's ChunkedLossWrapper chunks (`TorchtitanSection.loss_chunks`; 1 = whole
    logits): `loss_activations.logits_bytes`."""
    attention_dropout: bool = True  # the model has attention dropout (`planner.model.scores`)
    unfused_attention: UnfusedAttention = "te"  # whose softmax (`Job.unfused_attention`)
    masked_softmax_fusion: bool = (
        True  # Megatron's, for its local attention (`planner.model.scores`)
    )
    hidden_dropout: bool = True
    """The model has hidden dropout: each residual add's and the embedding's dropout keeps its
    mask (`masks`)."""
    frozen: bool = False
    """The model's weights are frozen (`Job.frozen_model`): no linear layer keeps its input."""
    fused_swiglu: bool = True
    fc1_keeps_original: bool = False
    """The routed experts' fc1 saves its bf16 input, not the FP8 copy: Megatron sets
    save_original_input on it when expert_fc1 is offloaded under an FP8 recipe other than MXFP8
    (experts.py d98e8a64, "to avoid the CPU overhead of multiple d2h copies")."""
    expert_padding: bool = False
    """TEGroupedMLP pads the routed experts' tokens itself (FP8 / FP4 or a grouped tensor,
    unless `skip_routed_expert_padding` provably holds: `planner.model.moe_padding`;
    experts.py d98e8a64 :890-903, undone at :1041-1043): a padded copy of its input and a
    padded fc2 output beside the unpadded one, alive while the experts run
    (`moe_activations.forward_bytes`)."""
    pad_pairs: float = 0.0
    """Padding rows the GPU's experts receive beyond the routed pairs, before the expert-TP
    gather (`moe_padding.Padding.pairs`, a bound): counted in `moe_activations.pairs`."""
    pad_sent: float = 0.0
    """Rows router padding adds to the alltoall dispatcher's permuted local tokens
    (`moe_padding.Padding.sent`)."""
    moe_send_load: float = 1.0
    """The alltoall dispatcher's permuted local tokens relative to k per local token: the
    capacity factor where Megatron pads each expert's tokens to capacity (token_dispatcher.py
    d98e8a64 :518-525, num_out_tokens = capacity x E), else 1."""
    combine_cast_bytes: float = 0.0
    """Bytes per element of the copy of the expert output the allgather and alltoall dispatchers
    cast to the router's dtype for the reduce-scatter before the combine, alive beside the
    output (`router_dtype.cast_bytes`, `moe_activations.forward_bytes`); 0: no copy."""
    shared_keeps_original: bool = False
    """The shared experts' fc1 saves its bf16 input, not a quantised copy: Megatron sets
    save_original_input on it under an FP8 recipe other than delayed scaling, and under NVFP4,
    unless selective recompute checkpoints the shared experts (shared_experts.py d98e8a64: the
    router already keeps that input)."""
    proj_keeps_original: bool = False
    """The attention's output projection saves its 16-bit input, not a quantised copy: Megatron
    sets save_original_input on it under an FP8 recipe other than delayed scaling and under NVFP4
    (attention.py d98e8a64 :428-444; multi_latent_attention.py :235-251, absorbed_mla.py
    :247-263), which Transformer Engine keeps where the quantiser rebuilds its copy from the
    input alike (d0067d0d module/linear.py:296-334, module/_common.py:58-67: current scaling,
    blockwise, MXFP8, NVFP4 without stochastic rounding on the input) and saves that input
    (linear.py:597-598, :621): `activations._attention_out`."""
    attention_fp8: AttentionFp8 = ""
    """The fused attention runs in FP8 (`Job.attention_in_fp8`) and keeps its operands as
    Transformer Engine's FusedAttnFunc saves them (d0067d0d dot_product_attention/backends.py
    :1582-1587): "delayed" and "current" scaling 8-bit Q, K, V; "mxfp8" theirs with block scales;
    "" the 16-bit ones (`activations.qkv_bytes`, `activations._attention_out`)."""
    cp_out_part: bool = False
    """Transformer Engine's all-to-all context parallelism (Megatron --cp-comm-type a2a,
    AttnFuncWithCPAndQKVOA2A) saves the head-sharded output before the return all-to-all,
    `out_part` (TransformerEngine d0067d0d context_parallel.py:4545-4576, 16-bit), while the
    output projection saves the new tensor the all-to-all returns (:4486-4500, :4517): the
    attention output twice (`activations._attention_out`). Not DeepSeek sparse attention's own
    gather, nor torchtitan's CP."""
    shared_gathered: bool = False
    """The shared experts' fc1 saves the TP group's gathered input (T tokens, not T/t): under
    --moe-shared-expert-overlap with TP, SharedExpertMLP gathers the sequence-parallel tokens
    itself and runs its linear layers without their parallel mode (shared_experts.py
    `pre_forward_comm`, d98e8a64), so fc1 keeps what it read instead of re-gathering it in its
    backward."""
    te_grouped_mlp: bool = False
    """Megatron's experts run as Transformer Engine's op fuser (--moe-fused-grouped-mlp's
    use_transformer_engine_op_fuser, experts.py d98e8a64 :287-291): the GLU, clamped too, is one
    TE op saving its input and the scales (ScaledClampedQGeGLU, :545-562; TE d0067d0d
    ops/basic/swiglu.py:552-555): `moe_activations.clamp_widths`."""
    torchtitan: bool = False
    """The layers are torchtitan's model code (its attention-sink rescale: `activations`)."""
    router_tokens_whole: bool = False
    """The MoE router reads every token of the TP group, not a 1/tp share: torchtitan with EP
    off under TP replicates the gate's input (b5bcd76c common moe_sharding.py:91-92,
    :113-123, `tp=spmd.R`): `moe_activations.router_tokens`."""
    weighted_experts: bool = True
    """The routed experts weight their activation by the routing probabilities inside it
    (Megatron's TEGroupedMLP; torchtitan weights the tokens outside): `moe_activations`."""
    sp_keeps_gathered_input: bool = False
    modules: frozenset[str] = field(default=SELECTIVE_DEFAULT)
    """Megatron's recompute_modules, read when `recompute` is "core_attn" (Megatron selective)."""
    moe_load: float = MOE_LOAD_IMBALANCE
    """Token-expert pairs the busiest rank's experts receive, relative to the even share: what
    the layers keep for the backward."""
    moe_work_load: float | None = None
    """The same for the layer running, where its tensors differ from what it keeps (HybridEP's
    static budget beside Megatron's paged stash, `routing_load.memory_loads`); None = moe_load."""
    cuda_graphs: bool = False
    """The layers run as CUDA graphs: each keeps its graphs' static buffers
    (`graph_buffers.graph_bytes`)."""
    cuda_graph_impl: CudaGraphImpl | None = None
    """Their implementation (`Job.cuda_graph_impl`; None: per-layer, local): a full-iteration
    graph keeps no per-layer static buffers, Transformer Engine's share theirs
    (`graph_buffers.graph_bytes`, `graph_shared_bytes`)."""
    cuda_graph_modules: frozenset[str] = frozenset()
    """The regions each layer's graph captures (`Job.cuda_graph_modules`; empty: the whole
    layer)."""
    keeps_pre_moe_norm: bool = False
    """A MoE layer keeps its pre-MLP norm's output though layernorm is recomputed: Megatron turns
    that recompute off under Transformer Engine's router graphs (`graph_capture.keeps_pre_moe_norm`,
    transformer_layer.py:481-527 d98e8a64)."""
    router_graph_outputs: float = 0.0
    """Bytes a MoE layer keeps per micro-batch beyond its eager tensors: Transformer Engine's
    router graph's static outputs the eager layer frees (`router_graph.router_graph_outputs`)."""
    offload: frozenset[str] = frozenset()
    """Fine-grained activation offloading's modules (`planner.model.fine_offload`)."""
    offload_fraction: float = 1.0
    """The share of the layers whose groups go to the host
    (`Layout.activation_offload_fraction`)."""
    dsa_kernels: DsaKernelBackend = "none"
    """DeepSeek sparse attention's kernels as they run (`planner.model.dsa.backend`)."""
    dsa_loss: dsa.LossMode = "off"
    """Its indexer loss (`planner.model.dsa.loss_mode`)."""
    dsa_heads: float = 0.0
    """The query heads its kernel computes a rank, padded (`planner.model.dsa.local_heads`);
    0 = unpadded."""
    seq_length: int = 0
    """The whole sequence: the keys DSA's queries see (context parallelism gathers them); 0 =
    seq_per_cp_rank."""

    def __hash__(self) -> int:  # the generated hash, once per shard (the memos' keys)
        return kept_hash(self)

    @property
    def quantised(self) -> bool:
        """The linear layers keep FP8 / NVFP4 copies of their inputs."""
        return self.linear_bytes < BF16

    def drops(self, module: str) -> bool:
        """Whether Megatron's selective recompute discards `module`'s saved activations."""
        return self.recompute == "core_attn" and module in self.modules

    def drops_pre_moe_norm(self) -> bool:
        """Whether a MoE layer's pre-MLP norm output is recomputed: layernorm among the modules,
        unless Megatron keeps it for its router graph (`keeps_pre_moe_norm`)."""
        return self.drops("layernorm") and not self.keeps_pre_moe_norm


def masks(T: float, h: int, sh: Shard) -> float:
    """One dropout's saved mask over T tokens of width h (`MASK` bytes per element), where the
    model has hidden dropout; none at Megatron's --hidden-dropout 0: its fused bias-dropout-add
    (megatron/core/fusions/fused_bias_dropout.py @d98e8a64, under torch.compile) and the
    embedding's torch.nn.Dropout call torch's dropout, which at p = 0 returns its input (ATen's
    `dropout` in eager mode; `torch._decomp.decompositions.dropout`, `input.clone()`, when
    compiled), so autograd keeps no mask."""
    return MASK * T * h if sh.hidden_dropout else 0.0


def norm_input(T: float, h: int, sh: Shard) -> float:
    """What one norm keeps of its input per micro-batch (before any TP/SP split)."""
    return (BF16 + (0 if sh.fused_norm else UNFUSED_NORM_EXTRA)) * T * h


def split(rep: float, part: float, sh: Shard) -> float:
    """rep is replicated over TP unless SP; part is always divided by tp."""
    return (rep + part) / sh.tp if sh.sequence_parallel else rep + part / sh.tp


def linear_in(nbytes: float, sh: Shard) -> float:
    """A linear layer's saved input: `Shard.linear_bytes` per element (8 bits under FP8, 4.5 under
    NVFP4); none when its weight is frozen, as only
    the weight gradient reads it (Transformer Engine linear.py @d0067d0d: backward_needs_input =
    is_grad_enabled and weight.requires_grad)."""
    if sh.frozen:
        return 0.0
    return nbytes * sh.linear_bytes / BF16
