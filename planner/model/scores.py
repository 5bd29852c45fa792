"""Attention scores an unfused attention keeps for its backward: what one micro-batch's s x s
scores per head cost, by which softmax computes them.

Transformer Engine's unfused attention (UnfusedDotProductAttention, used when neither FlashAttention
nor cuDNN's fused attention takes the shape) runs its scaled, masked softmax through
FusedScaleMaskSoftmax (NVIDIA/TransformerEngine c83f3857,
transformer_engine/pytorch/attention/dot_product_attention/softmax.py):

- the fused kernel when `is_kernel_available`: 16 < s_k < 16384 and s_k a multiple of 8 (all a
  causal mask needs; without one it also wants s_q and b x heads multiples of 4, not checked).
  It saves its 16-bit softmax output: with the dropout mask and the dropout output that the
  second batched GEMM saves, Korthikanti et al.'s 2 + 1 + 2 = 5 bytes per score
  (`KORTHIKANTI_BYTES_PER_SCORE`, the dropout counted whether or not the model uses it, as the
  rest of `planner.model.activations` does);
- otherwise `forward_torch_softmax`: the scores upcast to fp32 (softmax_in_fp32, the default), a
  torch softmax whose fp32 output its backward keeps (4), cast back to 16 bits for the second
  GEMM (2): 6 bytes per score, plus the dropout's mask and output (1 + 2) only where the model
  has attention dropout (torch's dropout at p = 0 returns its input: ATen Dropout.cpp).
"""

from __future__ import annotations

KORTHIKANTI_BYTES_PER_SCORE = 5
"""Softmax output 2, dropout mask 1, dropout output 2 (Korthikanti et al. 2022, 5as^2b)."""

TORCH_SOFTMAX_BYTES_PER_SCORE = 6
"""TE's torch softmax fallback: its fp32 output (4) and the 16-bit probabilities (2)."""

DROPOUT_BYTES_PER_SCORE = 3
"""Attention dropout's mask (1) and output (2)."""


def fused_softmax(s_k: int) -> bool:
    """Whether TE's fused softmax kernel takes keys of length s_k (causal or unmasked)."""
    return 16 < s_k < 16384 and s_k % 8 == 0


def score_bytes(heads: int, s: int, micro_batch: int, dropout: bool = True) -> float:
    """Bytes one layer's unfused attention keeps for `heads` heads of s x s scores per sample."""
    if fused_softmax(s):
        per = KORTHIKANTI_BYTES_PER_SCORE
    else:
        per = TORCH_SOFTMAX_BYTES_PER_SCORE + (DROPOUT_BYTES_PER_SCORE if dropout else 0)
    return per * heads * s * s * micro_batch
