"""torchtitan's SDPA under debug.deterministic: which kernel runs, and the backward workspace it
allocates (`flash_backward_bytes`, one attention block's, beside what the rank keeps).

K and V are not expanded to the query heads before the kernel, in either era: e347b1e5's Llama 3
and Qwen3 attention pass the n_kv_heads-wide xk, xv and `enable_gqa=self.enable_gqa`
(models/llama3/model/model.py:201, :288-299; models/qwen3/model/model.py:168, :281-291) to
ScaledDotProductAttentionWrapper, which hands them to F.scaled_dot_product_attention as they are
(models/attention.py:180-198), as does FlexAttentionWrapper to flex_attention (:126-154);
b5bcd76c's GQAttention likewise (models common attention.py:901, :936-943; its SDPA :395-426,
flex :313-359, varlen :137-222 pass enable_gqa). So what autograd keeps is the n_kv_heads-wide
K and V (`planner.model.activations`), and PyTorch's SDPA takes GQA in each fused backend
without copying (pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp at
001f694a: `check_batch_size_and_num_heads_dense<true /*supports_gqa*/ ...>` in
can_use_cudnn_attention, can_use_flash_attention and can_use_mem_efficient_attention).

Which kernel. torchtitan's SDPA lists cuDNN, flash, math in that order (e347b1e5
models/attention.py:174-178; b5bcd76c :389-393), which planner times as the cuDNN kernel
("fused"). With debug.deterministic torchtitan calls torch.use_deterministic_algorithms(True,
warn_only=debug.deterministic_warn_only, default False: e347b1e5 distributed/utils.py:114-118,
job_config.py:992), and PyTorch then refuses cuDNN attention (sdp_utils.cpp
`check_cudnn_deterministic`: "cuDNN SDPA is not deterministic", among can_use_cudnn_attention's
general constraints, so for the forward too): the flash backend runs, PyTorch's vendored
FlashAttention-2 (aten/src/ATen/native/transformers/cuda/flash_attn, FA3 only where
activate_flash_attention_impl selects it, which e347b1e5 never calls), timed at
`attention.FLASH2_KERNELS`' rates (`kernel`). This is the e347b1e5 flavors that run SDPA
(`titan_attention.toml_backend`; DeepSeek-V3 and gpt-oss run FlexAttention, e347b1e5
models/deepseek_v3/__init__.py:100, :154, models/gpt_oss/model/args.py:67, whose deterministic
path planner does not model). b5bcd76c runs no SDPA for a language model (its deterministic
mode, the plan's without deterministic_fill, is FlexAttention's or varlen's:
`planner.model.titan_attention`).

The workspace. Its backward (attention_backward.cu `_flash_attention_backward` passes
deterministic = true when deterministic algorithms are on and not warn-only) is FA2's mha_bwd
(flash_attn/flash_api.cpp at 03b7c19d), which allocates beside dQ, dK and dV:
- dq_accum, fp32: [nsplits, b, round128(s_q), h, round32(d)] with nsplits = ceil(SMs / (b x h))
  (deterministic: each split accumulates its own copy; otherwise one);
- with GQA (h_kv < h) dk_expanded and dv_expanded, each [b, s_k, h, d] in bf16: the per-query-head
  dK and dV, summed over each group into dK, dV after the kernel (at::sum_out);
- softmax_d, fp32 [b, h, round128(s_q)].
h and h_kv are the rank's heads (tp splits them), s_q = s_k = s / cp (each ring step's kernel runs
on one chunk). The expanded dK, dV are (h / h_kv - 1) x the K and V gradients' bytes more than a
backward without the expansion: transient, freed when the block's backward returns. The split
dq_accum's extra reduction traffic (zeroed, then summed) is not timed: no measured FA2
deterministic backward was found (`determinism.DETERMINISTIC_ATTENTION_BWD` is FA3's, charged
for Transformer Engine only).
"""

from __future__ import annotations

import math

from planner.inputs.plan import Job
from planner.inputs.plan_types import AttentionKernel
from planner.inputs.torchtitan import MODELS, zoo_flavor
from planner.model.shard import BF16, Shard
from planner.model.sm_count import gpu_sms
from planner.model.titan_attention import toml_backend

FP32 = 4.0
"""Bytes of an fp32 accumulator element."""


def flash_runs(job: Job) -> bool:
    """Whether torchtitan's SDPA runs PyTorch's flash backend in deterministic mode in place of
    cuDNN (module docstring): e347b1e5's mode, `[torchtitan] deterministic_fill` (the TOML target
    refuses the mode without it); b5bcd76c's (no fill) runs no SDPA for a language model
    (`planner.model.titan_attention`: FlexAttention, or varlen for gpt-oss)."""
    if job.framework != "torchtitan" or not job.deterministic or not job.flash_attention:
        return False
    if not job.titan.deterministic_fill:  # b5bcd76c's mode: flex or varlen, no SDPA
        return False
    zoo = zoo_flavor(job.arch)
    return zoo is not None and toml_backend(MODELS[zoo][0]) == "sdpa"


def kernel(job: Job) -> AttentionKernel:
    """The attention kernel whose rates time the job: FlashAttention-2 ("flash2") where
    `flash_runs`, else the plan's."""
    return "flash2" if flash_runs(job) else job.attention_kernel


def _round(x: int, m: int) -> int:
    return -(-x // m) * m


def flash_backward_bytes(job: Job, cp: int, sh: Shard) -> float:
    """Bytes FA2's deterministic backward allocates beyond dQ, dK and dV for one attention block
    on this rank (module docstring); 0 where `flash_runs` does not hold."""
    if not flash_runs(job):
        return 0.0
    arch = job.arch
    b = sh.micro_batch_size
    s = job.seq_length // cp
    h = arch.num_attention_heads // sh.tp
    h_kv = max(arch.query_groups // sh.tp, 1)
    d = arch.head_dim
    nsplits = math.ceil(gpu_sms(job.cluster) / (b * h))
    rows = b * _round(s, 128) * h
    dq_accum = FP32 * nsplits * rows * _round(d, 32)
    softmax_d = FP32 * rows
    expanded = 2 * BF16 * b * s * h * d if h_kv < h else 0.0
    return dq_accum + softmax_d + expanded
