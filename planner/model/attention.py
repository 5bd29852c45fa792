"""Flash-attention kernel throughput: the fraction of the bf16 dense peak a fused attention kernel
sustains, by GPU generation, direction (forward, backward), sequence length and head dimension,
from the kernels' published benchmarks. `planner.model.layer_time` times core attention with it.

Work counted as the FlashAttention benchmarks count it (flash-attention benchmarks/
benchmark_flash_attention.py `flops`): 4 s^2 d per head forward (QK^T and PV), halved under the
causal mask, backward 2.5 x forward. The fraction of the peak on that work is

    e(s, d) = E x [d / (d + D) / (128 / (128 + D))] x s / (s + S) x s / (s + B)

E the long-sequence fraction at head dim 128 (ATTENTION_KERNELS, per direction and GPU); the
head-dim term the kernel's arithmetic intensity (D = ATTENTION_HALF_HEAD_DIM: larger heads
amortise the softmax and the tile loads); the sequence term the per-tile prologue and epilogue
(S = ATTENTION_HALF_SEQ: short sequences have few tiles per (batch, head) to pipeline); the causal
term the diagonal tiles, computed whole though half masked (B = ATTENTION_CAUSAL_TILE: one B-wide
block per query tile over s/2 useful keys on average). Every model planner trains is causal.

The softmax's exponentials. Each (query, key) score the kernel computes takes one exponential on
the special-function units (forward: the softmax; backward: P recomputed from the saved
log-sum-exp), 4d matmul FLOPs forward and 10d backward. A direction takes the longer of its
matmuls at the rate above and its exponentials at the GPU's MUFU.EX2 rate
(`GpuSpec.exp_tera_per_s`) times the same long-sequence and length terms (the kernel's tile
pipeline idles both units alike; the head-dim term is the matmuls' own): the kernels overlap the
two (FlashAttention-3's ping-pong, FlashAttention-4's softmax warps). In bf16 no part is bound by
them at head dim 128 (B200: 2.28e-13 s of matmul against 2.22e-13 of exponential per score; the
FlashAttention-4 paper's point that they are co-limiting there), at head dim 64 Blackwell is; in
FP8 (Transformer Engine's FP8 dot-product attention, `Job.fp8_attention`: the matmuls run
FP8_ATTENTION_SPEEDUP x faster) B200 and GB200 forward are, and Blackwell Ultra's doubled
special-function units (GB300 10.7 against GB200's 5 per 10^12 s; B300 and B200, the same dies
at the 0.9 x lower clock their dense peaks are rated at, 9.63 and 4.5) lift the bound.
Sliding-window attention (`ModelArch.window_size`) computes each query's keys within the window
only (`keys_per_query`), at the rate of a sequence as long as twice those keys: a window of 128
runs its few tiles at about a third of the long-sequence rate.
Check (tests/model/test_fp8_attention.py): DeepSeek-V3's MLA forward in FP8 then runs 1.35 x
faster on GB300 than on GB200, the ~35% NVIDIA measured (technical blog "Making Softmax More
Efficient with NVIDIA Blackwell Ultra", DeepSeek-V3 FP8 FPROP).
"""

from __future__ import annotations

from planner.inputs.plan_sections import AttentionKernel

ATTENTION_KERNELS: tuple[tuple[str, float, float], ...] = (
    ("a100", 0.73, 0.63),
    ("*", 0.636, 0.54),
)
"""(catalog-name prefix, forward, backward) fraction of the bf16 dense peak at long sequences and
head dim 128, on non-causal work. A100 (Ampere): FlashAttention-2 (Dao 2023, arXiv:2307.08691,
Sec. 4.1: "up to 73% of the theoretical maximum FLOPs/s" forward, 63% backward, A100 80GB SXM4).
Hopper and later ("*"): FlashAttention-3 / cuDNN fused attention (Transformer Engine's default on
H100): forward at head dim 128 629 TFLOP/s of 989 as s grows (0.636; the ATTENTION_HALF_SEQ fit
of pytorch/benchmark PR #2391, commit ff65cb67, measured at the FA3 paper's sizes, batch x seq
16k, heads x dim 2048: 620.7 at 16k); backward 1.5-1.75x FlashAttention-2's (Shah et al. 2024,
arXiv:2407.08608, abstract), which runs at ~330 TFLOP/s on H100 (FA2 paper Fig. 7): ~0.54 of the
peak. Blackwell and AMD parts take the Hopper fractions, never above the part's measured matmul
ceiling (`layer_time`). Blackwell, what was read: FlashAttention-4 (arXiv:2603.05451, abstract)
reaches 1613 TFLOP/s forward on B200 in bf16 (0.72 of 2250) and is up to 1.3 x cuDNN 9.13
(Transformer Engine's kernel), whose forward is bound by the exponential units and backward by
shared-memory traffic, neither grown from H100 (Together AI's FlashAttention-4 blog); no
per-direction cuDNN rate on B200 was found, and the MLPerf B200 Llama 3.1 8B rows, a third of
whose step is attention, ask for no slower attention (benchmarks/fidelity.py), so none is set."""

FLASH2_KERNELS: tuple[tuple[str, float, float], ...] = (
    ("a100", 0.73, 0.63),
    ("*", 0.35, 0.334),
)
"""The same fractions for FlashAttention-2 (`Job.attention_kernel` "flash2": PyTorch SDPA's flash
backend). A100: the FA2 paper's, as above. Hopper and later ("*"): "FlashAttention-2 achieving
only 35% utilization on H100 GPUs" (Shah et al. 2024, arXiv:2407.08608, abstract) forward; the
~330 TFLOP/s of 989 the backward runs at (FA2 paper Fig. 7, as above): 0.334. FA2 has no
Blackwell kernels of its own; Blackwell takes these fractions too (no measurement read)."""

ATTENTION_HALF_SEQ = 227.0
"""Sequence length (tokens per (batch, head)) at which the kernel reaches half its long-sequence
rate on the per-tile overheads: fitted by hand to the same pytorch/benchmark PR #2391 FA3
forward series, 430.3 / 517.1 / 565.5 / 590.2 / 614.2 / 620.7 TFLOP/s at 512 / 1k / 2k / 4k /
8k / 16k: s / (s + 227) x 629 reproduces them within 2%."""

ATTENTION_HALF_HEAD_DIM = 61.0
"""Head dimension at which the kernel would reach half its rate (arithmetic intensity ~ d): from
FlashAttention-3's forward at 16k tokens, 740 TFLOP/s at head dim 256 (arXiv:2407.08608
abstract) against 620.7 at head dim 128 (pytorch/benchmark PR #2391): solving
(128 / (128 + x)) / (256 / (256 + x)) = 620.7 / 740 gives x = 61. Head dim 64 then runs at 0.76
of head dim 128's rate."""

ATTENTION_CAUSAL_TILE = 128.0
"""Key-block width of the flash kernels' tiles (FlashAttention-2 / -3 kBlockN = 128 at head dim
128): under the causal mask each query tile computes one diagonal block whole, half of it masked,
i.e. s / 2 + 64 keys of work for s / 2 useful ones."""


FP8_ATTENTION_SPEEDUP = 1.62
"""An FP8 flash-attention kernel's matmul rate over the bf16 kernel's, where no exponential bound
binds: FlashAttention-3 on H100, "close to 1.2 PFLOPs/s" in FP8 against "up to 740 TFLOPs/s" in
FP16 (arXiv:2407.08608 abstract; both at head dim 256, where the exponentials take 0.48 of the
FP8 matmul time by the bound above). Not 2: FP8 halves only the tensor-core time of each tile (the
same reason as `gemm.BLACKWELL_FP8_SPEEDUP`, 1.69 for Blackwell's GEMMs). Taken in both
directions (Transformer Engine's FP8 attention runs the backward's matmuls in FP8 too; no
published FP8 backward rate was found) and on every part."""

FP8_ATTENTION_QUANT_BYTES = 5.0
"""HBM bytes per element to quantise an FP8 attention operand with a current (per-tensor) scale,
Transformer Engine's FP8 attention recipe under current scaling, MXFP8 and NVFP4
(NVTE_DPA_FP8_RECIPE): read the bf16 tensor for its amax (2), read it again (2) and write FP8
(1). Q, K and V forward, the output gradient backward; the output stays bf16
(NVTE_DPA_FP8CS_O_in_F16, as MLPerf's Llama 3.1 8B configs set it)."""


def keys_per_query(seq: float, window: int | None) -> float:
    """Keys a query attends to on average under the causal mask: s / 2 over the whole sequence;
    with a sliding window of w tokens before it, query i attends to min(i, w) + 1 keys, on
    average (w + 1)(1 - w / 2s) when w < s. The kernel's rate is then taken at the length whose
    whole causal sequence has as many keys per query (2 x this): its tiles per query tile."""
    if window is None or window >= seq:
        return seq / 2
    return (window + 1) * (1 - window / (2 * seq))


def _long_seq(gpu_name: str, kernel: AttentionKernel = "fused") -> tuple[float, float]:
    table = FLASH2_KERNELS if kernel == "flash2" else ATTENTION_KERNELS
    return next((f, b) for p, f, b in table if p == "*" or gpu_name.startswith(p))


def _length(seq: float) -> float:
    s = max(seq, 1.0)
    return s / (s + ATTENTION_HALF_SEQ) * s / (s + ATTENTION_CAUSAL_TILE)


def kernel_fractions(
    gpu_name: str, seq: float, head_dim: float, kernel: AttentionKernel = "fused"
) -> tuple[float, float]:
    """(forward, backward) fraction of the bf16 dense peak on causal attention work for one
    (batch, head) of `seq` queries and keys of width `head_dim` (module docstring), by the
    kernel (`Job.attention_kernel`: ATTENTION_KERNELS, or FLASH2_KERNELS for "flash2")."""
    fwd, bwd = _long_seq(gpu_name, kernel)
    d = max(head_dim, 1.0)
    h = ATTENTION_HALF_HEAD_DIM
    dim = d / (d + h) / (128.0 / (128.0 + h))
    length = _length(seq)
    return fwd * dim * length, bwd * dim * length


def exp_fractions(
    gpu_name: str, seq: float, kernel: AttentionKernel = "fused"
) -> tuple[float, float]:
    """(forward, backward) fraction of the special-function units' exponential rate the kernel
    sustains: the long-sequence and length terms of `kernel_fractions`, no head-dim term."""
    fwd, bwd = _long_seq(gpu_name, kernel)
    length = _length(seq)
    return fwd * length, bwd * length
