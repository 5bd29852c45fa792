"""Attention scores an unfused attention keeps for its backward: what one micro-batch's s x s
scores per head cost, by which softmax computes them.

Transformer Engine's unfused attention (UnfusedDotProductAttention, used when neither FlashAttention
nor cuDNN's fused attention takes the shape) runs its scaled, masked softmax through
FusedScaleMaskSoftmax (NVIDIA/TransformerEngine d0067d0d,
transformer_engine/pytorch/attention/dot_product_attention/softmax.py:296-329, built with
softmax_in_fp32 true, :262, backends.py:383):

- the fused kernel when `is_kernel_available`: 16 < s_k < 16384 and s_k a multiple of 8 (all a
  causal mask needs; without one it also wants s_q and b x heads multiples of 4, not checked).
  It saves its 16-bit softmax output (2 bytes per score, `FUSED_SOFTMAX_BYTES_PER_SCORE`), which
  the second batched GEMM saves as its input too;
- otherwise `forward_torch_softmax` (:355-383): the scores upcast to fp32, a torch softmax whose
  fp32 output its backward keeps (4), cast back to 16 bits (the cast keeps nothing).

Megatron-Core's own DotProductAttention (--transformer-impl local; Megatron-LM d98e8a64
megatron/core/transformer/dot_product_attention.py:100-109) builds Megatron's FusedScaleMaskSoftmax
with `scaled_masked_softmax_fusion=config.masked_softmax_fusion` (--no-masked-softmax-fusion turns
it off, arguments.py:2887-2891) and `softmax_in_fp32=config.attention_softmax_in_fp32`, which the
command line leaves false unless --attention-softmax-in-fp32 or --apply-query-key-layer-scaling
(arguments.py:1714-1715, 3067). Its kernel runs only with the flag, 16 < s_k <= 4096 and s_q, s_k
multiples of 4 (megatron/core/fusions/fused_softmax.py:253-260; b x heads a multiple of 4 and of
the kernel's batches per block, not checked); otherwise its torch softmax (:313-340) saves its
output: 4 bytes in fp32, 2 in the scores' 16 bits, where no cast follows.

After the softmax the attention dropout adds its mask and its output (1 + 2 bytes,
`DROPOUT_BYTES_PER_SCORE`) only where the model has attention dropout; the 16-bit probabilities
before it are then kept by nothing (native_dropout's backward keeps only the mask), so the fp32
torch path keeps 4 + 1 + 2 = 7 and the fused kernel Korthikanti et al.'s 2 + 1 + 2 = 5. Torch's
dropout at p = 0 returns its input (ATen Dropout.cpp), so the second GEMM saves the probabilities
themselves: the 16-bit softmax output (2), or the fp32 path's cast copy beside the fp32 output
(4 + 2 = 6). Check (Megatron-LM functional tests, --attention-backend unfused,
--attention-dropout 0.0, seq 4096, tp 2, 16 heads per rank, micro-batch 4: 2.1 GB of scores per
layer at 2 bytes, 5.4 GB at 5): gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed peaks at 56.0 GiB on
H100 (benchmarks/functional_tests.py); 5 bytes would put 14 layer-passes of in-flight scores alone
at 75 GB, predicting 98.5 GiB; 2 bytes predict 53.5 GiB (-4.5%), and 52.3 / 44.1 / 44.7 GiB against
53.6 / 38.4 / 45.8 measured for the same model's fp8, attention-CUDA-graph and selective-recompute
cases. And gpt3_mcore_tp2_pp2_uninstall_te (--transformer-impl local --no-masked-softmax-fusion
--fp16 --apply-query-key-layer-scaling, attention dropout 0.1: 7 bytes per score) peaks at 1.94 GiB
on A100.
"""

from __future__ import annotations

from planner.inputs.plan_types import UnfusedAttention

FUSED_SOFTMAX_BYTES_PER_SCORE = 2
"""The fused kernel's 16-bit softmax output, which the second batched GEMM saves as its input
where no dropout stands between them."""

FP32_SOFTMAX_BYTES_PER_SCORE = 4
"""A torch softmax in fp32: its output, which its backward keeps."""

CAST_BYTES_PER_SCORE = 2
"""The fp32 softmax's output cast back to 16 bits, which the second GEMM keeps without dropout."""

DROPOUT_BYTES_PER_SCORE = 3
"""Attention dropout's mask (1) and output (2): with the fused kernel's 2, Korthikanti et al.'s
(2022) 5as^2b."""

LOCAL_FUSED_MAX_KEYS = 4096
"""Megatron's fused softmax kernels take at most 4096 keys (fused_softmax.py:256)."""


def fused_softmax(s_k: int) -> bool:
    """Whether TE's fused softmax kernel takes keys of length s_k (causal or unmasked)."""
    return 16 < s_k < 16384 and s_k % 8 == 0


def batches_per_block(s_k: int) -> int:
    """The fused kernel's batches per thread block (Megatron's scaled_masked_softmax
    get_batch_per_block, the same in its copies, e.g. ColossalAI's): 128 threads in warps of
    min(next power of two of s_k, 32) lanes, two batches a warp up to 128 keys, else one."""
    width = 1 << max(s_k - 1, 0).bit_length()
    return 128 // min(width, 32) * (2 if width <= 128 else 1)


def local_fused_softmax(s_k: int, fusion: bool = True, batches: int = 4) -> bool:
    """Whether Megatron-Core's own attention runs its fused softmax kernel over s_k keys (causal,
    s_q = s_k) with --masked-softmax-fusion as `fusion` says, for `batches` = micro-batch x heads
    per TP rank: a multiple of 4 and of the kernel's batches per block (fused_softmax.py:251-265,
    the causal kernel's condition)."""
    keys = fusion and 16 < s_k <= LOCAL_FUSED_MAX_KEYS and s_k % 4 == 0
    return keys and batches % 4 == 0 and batches % batches_per_block(s_k) == 0


def softmax_bytes(
    s: int, attention: UnfusedAttention = "te", fusion: bool = True, batches: int = 4
) -> float:
    """Bytes per score the softmax itself keeps: the fused kernel's 16-bit output, or the torch
    softmax's output in fp32 (TE's always; Megatron's local_fp32) or in 16 bits (local);
    `batches` the micro-batch x heads per TP rank (`local_fused_softmax`)."""
    fused = fused_softmax(s) if attention == "te" else local_fused_softmax(s, fusion, batches)
    if fused or attention == "local":
        return FUSED_SOFTMAX_BYTES_PER_SCORE
    return FP32_SOFTMAX_BYTES_PER_SCORE


def score_bytes(
    heads: int,
    s: int,
    micro_batch: int,
    dropout: bool = True,
    attention: UnfusedAttention = "te",
    fusion: bool = True,
    tp: int = 1,
) -> float:
    """Bytes one layer's unfused attention keeps for `heads` heads of s x s scores per sample: the
    softmax's bytes per score, and then the dropout's mask and output where the model has
    attention dropout, else the 16-bit cast of an fp32 softmax's output, which the second GEMM
    keeps (a 16-bit softmax output is already what it keeps); `tp` splits the heads over the
    ranks Megatron's kernel runs on (`local_fused_softmax`'s batches)."""
    per = softmax_bytes(s, attention, fusion, micro_batch * max(heads // tp, 1))
    if dropout:
        per += DROPOUT_BYTES_PER_SCORE
    elif per == FP32_SOFTMAX_BYTES_PER_SCORE:
        per += CAST_BYTES_PER_SCORE
    return per * heads * s * s * micro_batch
