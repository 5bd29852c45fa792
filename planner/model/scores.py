"""Attention scores an unfused attention keeps for its backward: what one micro-batch's s x s
scores per head cost, by which softmax computes them.

Transformer Engine's unfused attention (UnfusedDotProductAttention, used when neither FlashAttention
nor cuDNN's fused attention takes the shape) runs its scaled, masked softmax through
FusedScaleMaskSoftmax (NVIDIA/TransformerEngine c83f3857,
transformer_engine/pytorch/attention/dot_product_attention/softmax.py):

- the fused kernel when `is_kernel_available`: 16 < s_k < 16384 and s_k a multiple of 8 (all a
  causal mask needs; without one it also wants s_q and b x heads multiples of 4, not checked).
  It saves its 16-bit softmax output (2 bytes per score, `FUSED_SOFTMAX_BYTES_PER_SCORE`), which
  the second batched GEMM saves as its input too;
- otherwise `forward_torch_softmax`: the scores upcast to fp32 (softmax_in_fp32, the default), a
  torch softmax whose fp32 output its backward keeps (4), cast back to 16 bits for the second
  GEMM (2): 6 bytes per score.

Either way the attention dropout between the softmax and the second GEMM adds its mask and its
output (1 + 2 bytes, Korthikanti et al.'s 2 + 1 + 2 = 5 with the fused kernel) only where the model
has attention dropout: torch's dropout at p = 0 returns its input (ATen Dropout.cpp), so the GEMM
saves the softmax output itself. Check (Megatron-LM functional tests, --attention-backend unfused,
--attention-dropout 0.0, seq 4096, tp 2, 16 heads per rank, micro-batch 4: 2.1 GB of scores per
layer at 2 bytes, 5.4 GB at 5): gpt3_mcore_te_tp2_pp2_ep4_etp1_memory_speed peaks at 56.0 GiB on
H100 (benchmarks/functional_tests.py); 5 bytes would put 14 layer-passes of in-flight scores alone
at 75 GB, predicting 98.5 GiB; 2 bytes predict 53.5 GiB (-4.5%), and 52.3 / 44.1 / 44.7 GiB against
53.6 / 38.4 / 45.8 measured for the same model's fp8, attention-CUDA-graph and selective-recompute
cases.
"""

from __future__ import annotations

FUSED_SOFTMAX_BYTES_PER_SCORE = 2
"""The fused kernel's 16-bit softmax output, which the second batched GEMM saves as its input
where no dropout stands between them."""

TORCH_SOFTMAX_BYTES_PER_SCORE = 6
"""TE's torch softmax fallback: its fp32 output (4) and the 16-bit probabilities (2)."""

DROPOUT_BYTES_PER_SCORE = 3
"""Attention dropout's mask (1) and output (2): with the fused kernel's 2, Korthikanti et al.'s
(2022) 5as^2b."""


def fused_softmax(s_k: int) -> bool:
    """Whether TE's fused softmax kernel takes keys of length s_k (causal or unmasked)."""
    return 16 < s_k < 16384 and s_k % 8 == 0


def score_bytes(heads: int, s: int, micro_batch: int, dropout: bool = True) -> float:
    """Bytes one layer's unfused attention keeps for `heads` heads of s x s scores per sample: the
    softmax path's bytes per score, and the dropout's where the model has attention dropout."""
    per = FUSED_SOFTMAX_BYTES_PER_SCORE if fused_softmax(s) else TORCH_SOFTMAX_BYTES_PER_SCORE
    per += DROPOUT_BYTES_PER_SCORE if dropout else 0
    return per * heads * s * s * micro_batch
