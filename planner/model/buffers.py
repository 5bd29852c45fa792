"""Memory besides model states and saved activations, on one GPU: FP8 weight copies, gradient and
FSDP buffers, communication buffers, workspaces and the CUDA context, and which of them PyTorch's
caching allocator counts (`torch.cuda.max_memory_allocated`).

FP8 weights (Transformer Engine, transformer_engine/pytorch/tensor/*; Megatron-LM d98e8a64
`--fp8-param-gather`, fp8_utils.py). A GEMM weight in FP8 is kept as 8-bit data and, where the
GEMM cannot read it transposed, an 8-bit transpose: Hopper's FP8 GEMMs take only the TN layout, so
delayed and tensorwise scaling keep both there, while Blackwell reads either layout and keeps one
(`is_non_tn_fp8_gemm_supported`); MXFP8 (1 x 32 blocks) and blockwise (128 x 128) scaling quantise
along rows and along columns separately and keep both, with a scale per block (MXFP8: 1 byte per
32 values; blockwise: 4 bytes per 128 x 128). With fp8_param_gather the FP8 copies are the
parameters (the bf16 weight is gone; the fp32 master stays in the optimizer; for MXFP8 the
all-gather stages through the gradient buffer, param_and_grad_buffer.py
`reuse_grad_buf_for_mxfp8_param_ag`); without it TE caches them across the micro-batches of a step
beside the bf16 weight (`is_first_microbatch`). Only the decoder layers' linear weights are FP8
(embedding, output layer, norms and router stay 16-bit). NVFP4 (precision fp4, TE's NVFP4Tensor)
keeps rows and columns, 4 bits each with an E4M3 scale per 16, and --fp4-param-gather makes them
the parameters the same way.

Communication buffers outside PyTorch's allocator (cudaMalloc / NVSHMEM / cuMem, so not in
allocated_gib but in the total):
  - TP-overlap userbuffers (TE module/base.py `initialize_ub`, which Megatron calls with
    [seq x mbs / cp, h]): one buffer of that shape per overlapped GEMM (TP_OVERLAP_BUFFERS);
  - DeepEP's normal-mode buffers (deepseek-ai/DeepEP deep_ep/buffers/legacy.py,
    csrc/legacy/config.hpp `get_nvl_buffer_size_hint` / `get_rdma_buffer_size_hint`, with
    Megatron's hidden bytes, fused_a2a.py `get_buffer`);
  - HybridEP's buffer (DeepEP hybrid-ep branch, csrc/hybrid_ep/buffer/intranode.cu): sized for
    the worst case of every token of the EP group landing on one rank, dispatch and combine
    sharing it (use_shared_buffer, the default); across NVLink domains its RDMA buffers and
    always the all-gathered routing map (`hybridep_bytes`).

Constants fitted by benchmarks/fit_allocated.py say so; the others are physical and sourced.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import comms, rl_inference, titan_attention
from planner.model.fp32 import value_bytes, weight_bytes

CUDA_CONTEXT_BYTES = 0.8 * GIB
"""CUDA context plus cuBLAS/cuDNN handles and kernels loaded on one GPU, outside PyTorch's
allocator: about 500-600 MiB of context on Hopper with CUDA 12 (nvidia-smi of an idle process) and
the modules Transformer Engine loads."""

ASYNC_SAVE_WORKER_BYTES = 600 * 2**20
"""The CUDA context of Megatron-LM's persistent checkpoint worker (`Job.async_save`), a process of
its own (forkserver) on each rank's GPU from start to exit (d98e8a64 training/initialize.py:79-80;
dist_checkpointing/strategies/async_utils.py:565 `torch.cuda.set_device`). It runs no GEMM and
no Transformer Engine kernel: with CUDA's lazy module loading it is the idle process's context
`CUDA_CONTEXT_BYTES` rests on, at the top of its 500-600 MiB. It allocates no device memory: the
trainer's tensors reach it over CUDA IPC (torch.multiprocessing queues, async_utils.py:19, :418)
and its copy (:582, filesystem_async.py:243 `tensor.to("cpu", non_blocking=True)`) lands in host
memory."""

NCCL_BYTES_PER_GROUP = 0.25 * GIB
"""NCCL communicator buffers: NCCL_BUFFSIZE (4 MiB) x protocols x channels (up to 32) per peer
connection; about 0.2-0.3 GiB for each process group a rank communicates in."""

TORCH_WORKSPACE_BYTES = 0.073 * GIB
"""Persistent allocations PyTorch's allocator counts besides the model states and Transformer
Engine's workspaces (`te_workspace_bytes`): cuBLAS / cuBLASLt workspaces (CUBLAS_WORKSPACE_CONFIG
:4096:8, 32 MiB per handle), Megatron's global gather buffer, RNG states. Fitted by
benchmarks/fit_allocated.py on the functional tests' mem-allocated-bytes after a step (model
states plus the workspaces); the rows and the spread are in that script's output."""

TE_WORKSPACE_BYTES = {
    "hopper_or_later": 32 * 2**20 + 1024,
    "older": 4 * 2**20,
    "gfx942": 32 * 2**20,
    "gfx950": 64 * 2**20,
}
"""Transformer Engine's cuBLAS workspace (cpp_extensions/gemm.py
`get_cublas_workspace_size_bytes`): 32 MiB + 1 KiB from compute capability 9, 4 MiB before; on
ROCm (ROCm/TransformerEngine 01b52037 the same file :43-49) 64 MiB on gfx950, 32 MiB on the
others (`GpuSpec.amd_gfx`). The grouped-GEMM and userbuffer copies below are the same there
(`get_cublas_workspace`, grouped GEMMs through `general_grouped_gemm`)."""

TE_GROUPED_GEMM_STREAMS = 4
"""Extra TE workspaces for grouped GEMMs (the MoE experts), one per compute stream
(`get_cublas_workspace(grouped_gemm=True)`, nvte_get_num_compute_streams)."""

TE_UB_STREAMS = 3
"""Extra TE workspaces for the TP-overlap GEMMs (`_NUM_MAX_UB_STREAMS`)."""

TP_OVERLAP_BUFFERS = {"bf16": 12 * 2, "fp8": 8 * 1 + 4 * 2}
"""Bytes per element of [seq x mbs / cp, h] of TE's TP-overlap userbuffers: 12 overlapped GEMMs
(qkv, proj, fc1, fc2 x fprop, dgrad, wgrad; TE module/base.py `initialize_ub`), the 8 all-gather
buffers in 8 bits under FP8 (`fp8_buf`), the 4 reduce-scatter ones in 16."""

DEEPEP_NUM_SMS = 20
"""SMs (two per channel) DeepEP's normal kernels use under Megatron when
--moe-flex-dispatcher-num-sms is unset (token_dispatcher.py: "None -> 20"); set, its buffers
are sized for that many (`Layout.moe_flex_dispatcher_num_sms`: DeepEP's `Config` takes
`Buffer.num_sms`, and its size hints grow with the channels)."""

DEEPEP_CONFIGS = {
    2: ((24, 256, 6, 128), (10, 256, 6, 128)),
    4: ((6, 256, 6, 128), (9, 256, 6, 128)),
    8: ((6, 256, 6, 128), (4, 256, 6, 128)),
    16: ((36, 288, 20, 128), (4, 288, 12, 128)),
    24: ((32, 288, 8, 128), (1, 288, 8, 128)),
    32: ((32, 288, 8, 128), (1, 288, 8, 128)),
    48: ((32, 288, 8, 128), (1, 288, 8, 128)),
    64: ((32, 288, 8, 128), (1, 288, 8, 128)),
    96: ((20, 480, 12, 128), (1, 480, 8, 128)),
    128: ((20, 560, 12, 128), (1, 560, 8, 128)),
    144: ((32, 720, 12, 128), (2, 720, 8, 128)),
    160: ((28, 720, 12, 128), (2, 720, 8, 128)),
}
"""DeepEP's recommended (dispatch, combine) configs by EP size, each (NVLink send, NVLink
receive, RDMA send, RDMA receive) chunk tokens (deepseek-ai/DeepEP dd758caf
deep_ep/buffers/legacy.py:245-258, :279-292). Megatron sizes its buffer with both
(Megatron-LM d98e8a64 fused_a2a.py:48-58); a group of another size fails their
`assert num_ranks in config_map` (`planner.search.rules.flex_groups`)."""

DEEPEP_NVL_PEERS = 8
"""DeepEP's legacy kernels' NVLink peers (csrc/legacy/buffer.hpp:23, :120-121 at dd758caf): the
rest of the group is reached over RDMA, also inside a larger NVLink domain (Megatron builds its
Buffer without allow_mnnvl, fused_a2a.py:68, so DeepEP sets NVSHMEM_DISABLE_MNNVL,
deep_ep/buffers/legacy.py:124-126)."""

DEEPEP_SOURCE_META_BYTES = 8
"""sizeof(SourceMeta), two ints (csrc/kernels/legacy/internode.cu:22-45 at dd758caf)."""


def te_workspace_bytes(job: Job, layout: Layout) -> float:
    """Transformer Engine's persistent cuBLAS workspaces on one GPU: one, plus one per compute
    stream for a MoE model's grouped GEMMs, plus TE_UB_STREAMS with TP overlap."""
    gpu = job.cluster.gpu
    recent = not gpu.name.startswith(("a100", "l40s"))
    kind = "hopper_or_later" if recent else "older"
    size = TE_WORKSPACE_BYTES[(gpu.amd_gfx or "gfx942") if gpu.vendor == "amd" else kind]
    count = 1 + (TE_GROUPED_GEMM_STREAMS if job.arch.is_moe else 0)
    count += TE_UB_STREAMS if userbuffers(job, layout) else 0
    return size * count


def workspace_bytes(job: Job, layout: Layout) -> float:
    """Persistent workspaces PyTorch's allocator counts: Transformer Engine's and the rest."""
    return TORCH_WORKSPACE_BYTES + te_workspace_bytes(job, layout)


def userbuffers(job: Job, layout: Layout) -> bool:
    """Whether TE's TP-overlap userbuffers are allocated: with tp_comm_overlap at tp > 1, or
    where a Megatron run allocates them without overlapping (`Job.tp_userbuffers`; torchtitan
    allocates none, its TP being torch's: `inputs.inert` says the setting has no effect)."""
    alone = job.tp_userbuffers and job.framework == "megatron"
    return (layout.tp_comm_overlap or alone) and layout.tp > 1


def tp_overlap_bytes(job: Job, layout: Layout) -> float:
    """TE's TP-overlap userbuffers on one GPU (0 where `userbuffers` says none). FP8 with
    --first-last-layers-bf16 (bf16 layers at either end) allocates a second, unquantised set
    beside the FP8 one: Megatron-LM d98e8a64 megatron/training/initialize.py:230-238 passes
    both quantisation modes to `initialize_ub`, which builds every buffer once per mode
    (TransformerEngine d0067d0d transformer_engine/pytorch/module/base.py:516), in 16 bits for
    the unquantised one (:472-476)."""
    if not userbuffers(job, layout):
        return 0.0
    elems = job.seq_length * layout.micro_batch_size / layout.cp * job.arch.hidden_size
    # NVFP4 is not FP8: TE's userbuffers stay 16-bit there (the safe side for memory)
    if job.precision != "fp8":
        return elems * TP_OVERLAP_BUFFERS["bf16"]
    bf16_ends = job.bf16_layers_at_start > 0 or job.bf16_layers_at_end > 0
    return elems * (TP_OVERLAP_BUFFERS["fp8"] + (TP_OVERLAP_BUFFERS["bf16"] if bf16_ends else 0))


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def _deepep_bytes(hidden_bytes: int, ranks: int, sms: int) -> float:
    """DeepEP normal-mode NVLink + RDMA buffer bytes on `sms` SMs: the larger of the dispatch
    and combine configs' hints (csrc/legacy/config.hpp:53-99 at dd758caf), each per channel
    of two SMs and received token the data, the source metadata, 128 top-k indices (8 bytes)
    and weights (4) and 128 fp32 scales, rounded up to 128 bytes; the RDMA receive chunk first
    rounded up to a multiple of the RDMA send chunk (the Config constructor, config.hpp:47:
    128 -> 140 at ep 16, 132 at ep 96-160). A size DeepEP has no config for takes the next
    (the rule `flex_groups` refuses it)."""
    key = min((r for r in DEEPEP_CONFIGS if r >= ranks), default=max(DEEPEP_CONFIGS))
    channels = sms // 2
    nvl_ranks = min(ranks, DEEPEP_NVL_PEERS)
    rdma_ranks = max(ranks // DEEPEP_NVL_PEERS, 1)
    per_token = hidden_bytes + DEEPEP_SOURCE_META_BYTES + 128 * 8 + 128 * 4 + 128 * 4
    nvl = rdma = 0
    for _, nvl_recv, rdma_send, rdma_recv in DEEPEP_CONFIGS[key]:
        head = channels * nvl_ranks * (2 * rdma_ranks + 3) * 4
        nvl = max(nvl, _align(head + channels * nvl_ranks * nvl_recv * per_token, 128))
        if ranks <= DEEPEP_NVL_PEERS:
            continue
        recv = _align(rdma_recv, rdma_send)
        head = channels * rdma_ranks * (DEEPEP_NVL_PEERS * 2 + 2) * 2 * 4
        body = channels * rdma_ranks * recv * 2 * (per_token + 16)  # + an int4 per token
        rdma = max(rdma, _align(head + body, 128))
    return float(nvl + rdma)


def hybridep_bytes(tokens: int, h: int, local_experts: int, per_domain: int, nodes: int) -> float:
    """HybridEP's buffers on one GPU for `tokens` per rank, `local_experts` per rank, its group
    `per_domain` ranks on each of `nodes` NVLink domains (DeepEP hybrid-ep 94a9f8f6; bf16
    tokens: Megatron asserts no FP8 dispatch, fused_a2a.py:327 at d98e8a64). Intra-domain
    (csrc/hybrid_ep/buffer/intranode.cu, dispatch and combine sharing it): every token of the
    group, h bf16 values, a fp32 probability per expert of the domain and a fp32 scale per 128
    values. Across domains (hybrid_ep.cu:92-99 allocates them where num_of_nodes > 1;
    buffer/internode_doca.cu:388-420, :559-576): dispatch the rank's own tokens (values, a
    probability per expert of the group, scales) and the other domains' (values, a probability
    per expert of the domain, scales), combine the other domains' twice (reduction and group:
    bf16 values and probabilities). Always (hybrid_ep.cu:99): the all-gathered routing map,
    a bool per expert of the group and token of the group (extension/allgather.cu:142-147).
    The flags are left out (kilobytes)."""
    group = per_domain * nodes
    domain_probs = 4 * local_experts * per_domain
    scales = 4 * (h // 128)
    total = tokens * group * (2 * h + domain_probs + scales)
    if nodes > 1:
        others = tokens * (nodes - 1)
        total += tokens * (2 * h + domain_probs * nodes + scales)
        total += others * (2 * h + domain_probs + scales)
        total += 2 * others * (2 * h + domain_probs)
    return float(total + local_experts * group * tokens * group)


def dispatcher_bytes(job: Job, layout: Layout) -> float:
    """The flex dispatcher's communication buffers on one GPU (0 for alltoall / allgather, which
    use NCCL): DeepEP's from its size hints (8 NVLink peers, the rest over RDMA, whatever the
    NVLink domain); HybridEP's (`hybridep_bytes`) over the ep x etp ranks as they are placed on
    NVLink domains (`comms.place`; HybridEP takes the ranks it reaches over NVLink as a domain,
    deep_ep/hybrid_ep_buffer.py:62-84 at 94a9f8f6)."""
    arch = job.arch
    if not arch.is_moe or layout.moe_token_dispatcher_type != "flex":
        return 0.0
    assert arch.num_moe_experts is not None
    h = arch.hidden_size
    group = layout.ep * layout.expert_tp
    if layout.moe_flex_dispatcher_backend == "deepep":
        sms = layout.moe_flex_dispatcher_num_sms or DEEPEP_NUM_SMS
        # hidden bytes h x max(element size, 2): fp32 training's 4 (fused_a2a.py:33 @d98e8a64)
        return _deepep_bytes(int(max(value_bytes(job), 2)) * h, group, sms)
    tokens = job.seq_length // layout.cp * layout.micro_batch_size // layout.tp
    placed = comms.place(job.cluster, 1, group)
    nodes = max(group // placed.per_domain, 1)
    local_experts = arch.num_moe_experts // layout.ep
    return hybridep_bytes(tokens, h, local_experts, placed.per_domain, nodes)


def quantised_weight_bytes(job: Job, layout: Layout) -> tuple[float, float]:
    """(parameter bytes, cached copy bytes) per FP8 / NVFP4 GEMM weight element: 2 and 0 in
    bf16 (4 and 0 in fp32, `fp32.weight_bytes`). With fp8_param_gather / fp4_param_gather
    (which need a sharded optimizer) the quantised data and, where kept, its transpose are the
    parameter; without it they are a cache beside the parameter in its own dtype (bf16, fp16,
    or fp32 in an fp32 model: `fp32.weight_bytes`). Megatron-FSDP's ZeRO 3 FP8 parameters:
    `fsdp_fp8_weight_bytes` (the second value then whole on every rank)."""
    if not job.quantised:
        return weight_bytes(job), 0.0
    recipe = job.quant_recipe
    if recipe == "nvfp4":  # rows and columns, 4 bits each with an E4M3 scale per 16
        copies = 2 * (0.5 + 1.0 / 16)
    elif recipe == "mxfp8":
        copies = 2.0 + 2.0 / 32
    elif recipe == "blockwise":
        copies = 2.0 + 2 * 4.0 / (128 * 128)
    else:  # delayed / tensorwise: a transpose only where the GEMM needs TN
        copies = 1.0 if job.cluster.gpu.is_blackwell else 2.0
    if job.low_precision_params and layout.zero_stage == 3 and recipe != "nvfp4":
        return fsdp_fp8_weight_bytes(job)
    if job.low_precision_params and layout.zero_stage >= 1:
        return copies, 0.0
    return weight_bytes(job), copies


def fsdp_fp8_weight_bytes(job: Job) -> tuple[float, float]:
    """(sharded, whole) bytes per FP8 parameter element at ZeRO 3 (Megatron-FSDP's
    optim_grads_params) with --fp8-param-gather (Megatron-LM d98e8a64 megatron/core/distributed/
    fsdp/src/megatron_fsdp/param_and_grad_buffer.py, pgb): the parameter's data lives in its
    group's uint8 weight buffer (dtype "float8", pgb:1795-1798, :2631-2632), sharded over the
    group (:2655-2657), 1 B an element; MXFP8 adds a sharded transpose buffer (:2634-2643, the
    only recipe that has one, mixed_precision.py:183-185), 1 B more. The other recipes' transposes
    are built for a unit's backward and dropped at its release (megatron_fsdp.py:496-498,
    :627-628): Megatron-FSDP's transient buffers (`megatron_fsdp_bytes`), not kept. Whole on every
    rank: the scales, held by the parameter outside the buffers (blockwise an fp32 per 128 x 128
    block, MXFP8 an E8M0 per 32 each way; per-tensor ones a few bytes)."""
    if job.quant_recipe == "mxfp8":
        return 2.0, 2.0 / 32
    if job.quant_recipe == "blockwise":
        return 1.0, 4.0 / (128 * 128)
    return 1.0, 0.0


def output_proj_cache_bytes(job: Job, layout: Layout) -> float:
    """With `Job.fp8_output_proj`, the output layer's MXFP8 weight on the last pipeline rank: both
    orientations with an E8M0 scale per 32 (as `quantised_weight_bytes`), beside the bf16 weight,
    which stays the parameter (counted so under fp8_param_gather too, the safe side); 0 without."""
    if not job.output_layer_in_fp8:
        return 0.0
    words = job.arch.padded_vocab(layout.tp) * job.arch.hidden_size / layout.tp
    return (2.0 + 2.0 / 32) * words


def context_bytes(layout: Layout) -> float:
    """The CUDA context and the NCCL communicators of one GPU (outside PyTorch's allocator): the
    same at every micro-batch size. With expert parallelism the expert gradients reduce (and
    ZeRO gathers the expert parameters) over the expert-data-parallel group, a communicator of
    its own (Megatron-LM d98e8a64 parallel_state.py:1457-1471, distributed_data_parallel.py:286
    `intra_expt_dp_group` for the expert buffers), where it has more than one rank."""
    sizes = (layout.tp, layout.pp, layout.cp, layout.ep, layout.dp)
    groups = 1 + sum(d > 1 for d in sizes) + (layout.ep > 1 and layout.expert_dp > 1)
    return CUDA_CONTEXT_BYTES + NCCL_BYTES_PER_GROUP * groups


def async_save_worker_bytes(job: Job) -> float:
    """The persistent checkpoint worker's CUDA context on each GPU of a Megatron job with
    `async_save` (`ASYNC_SAVE_WORKER_BYTES`); 0 without."""
    return ASYNC_SAVE_WORKER_BYTES if job.async_save and job.framework == "megatron" else 0.0


def fixed_bytes(job: Job, layout: Layout) -> tuple[float, float]:
    """(allocated, not allocated) fixed bytes of one GPU: the persistent workspaces and an RL
    step's rollout engine (`planner.model.rl_inference`); the CUDA context (and the checkpoint
    worker's), NCCL communicators, TP-overlap userbuffers and the flex dispatcher's buffers;
    torchtitan's FlexAttention BlockMask (`titan_attention.block_mask_bytes`)."""
    outside = context_bytes(layout) + tp_overlap_bytes(job, layout) + dispatcher_bytes(job, layout)
    outside += async_save_worker_bytes(job)
    held = workspace_bytes(job, layout) + rl_inference.resident_bytes(job, layout)
    return held + titan_attention.block_mask_bytes(job, layout), outside


def dataloader_mask_bytes(job: Job, layout: Layout, rank: int) -> float:
    """Bytes of Megatron-LM's dataloader attention mask on pipeline rank `rank`
    (`Job.dataloader_attention_mask`): pretrain_gpt.py get_batch (d98e8a64) loads a batch on the
    first and the last pipeline stage only, and moves or receives its [micro-batch, 1, seq, seq]
    bool mask to the GPU (megatron/core/utils.py get_batch_on_this_tp_rank; its
    get_batch_on_this_cp_rank keeps the rank's 1 / cp of the query rows), alive through the
    micro-batch's forward and so at the activations' peak: micro-batch x seq^2 / cp bytes. Its
    host-to-device copy and TP broadcast (the same bytes per micro-batch) are not timed."""
    if not job.dataloader_attention_mask or job.framework != "megatron":
        return 0.0
    if rank not in (0, layout.output_rank):
        return 0.0
    return layout.micro_batch_size * job.seq_length**2 / layout.cp
