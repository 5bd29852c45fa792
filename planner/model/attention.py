"""Flash-attention kernel throughput: the fraction of the bf16 dense peak a fused attention kernel
sustains, by GPU generation, direction (forward, backward), precision, sequence length, sliding
window and head dimension, from the kernels' published benchmarks. `planner.model.attention_time`
times core attention with it.

Work counted as the kernel computes it: every score of every key tile a query tile visits, 4 d
FLOPs forward (QK^T and PV), 10 d backward (2.5 x), d the head dim. Under the causal mask a query
tile of B rows (B = ATTENTION_CAUSAL_TILE) visits the key tiles up to and including its diagonal
one, computed whole though half masked: (s + B) / 2 keys per query on average for s / 2 useful
ones. With a sliding window of w keys before each query (`ModelArch.window_size`) it visits
ceil(w / B) + 1 tiles (`computed_keys`): a window of 127 computes about 256 keys a query for 128
useful ones. The fraction of the peak on that work is

    e(span, d) = E x [d / (d + D) / (128 / (128 + D))] x span / (span + S)

E the kernel's long-sequence fraction at head dim 128 (`Kernel`, per direction, precision and GPU
generation); the head-dim term its arithmetic intensity (D, `Kernel.half_head_dim`); the span term
the per-tile prologue and epilogue over the keys one query tile runs through (span: the sequence,
or the window's tiles; S, `Kernel.half_seq`: a short span has few tiles to pipeline).

The softmax. Each score the kernel computes takes one exponential on the special-function units
(forward: the softmax; backward: P recomputed from the saved log-sum-exp) and a few FP32
operations on the CUDA cores (scale, running max, subtraction, row sum, rescale, conversion). A
direction takes the longest of its matmuls at the rate above, its exponentials at the GPU's
MUFU.EX2 rate (`GpuSpec.exp_tera_per_s`) times `Kernel.exp`, and its softmax's FP32 work
(`Kernel.alu` FLOPs a score) at the FP32 peak, the last two with the span term: the kernels
overlap the three (FlashAttention-3's ping-pong, FlashAttention-4's softmax warps; FA4's point that
Blackwell's tensor cores outgrew both the exponential units and the ALUs). At head dim 128 in bf16
the matmuls bind on every part; at head dim 64 B200's forward waits on its exponentials (cuDNN's
gpt-oss forward, 925 TFLOP/s at 8k), and Blackwell Ultra's doubled special-function units (GB300
10.7 against GB200's 5 per 10^12 s; B300 and B200, the same dies at the 0.9 x lower clock their
dense peaks are rated at, 9.63 and 4.5) leave the CUDA cores the bound there (B300: 1,110 TFLOP/s,
1.2 x B200, not 2 x), as in GB300's FP8 forward.

The kernels (`FUSED_KERNELS`, Transformer Engine's fused attention: cuDNN on Hopper and
Blackwell, FlashAttention-2 on A100; `FLASH2_KERNELS`, PyTorch SDPA's flash backend). The cuDNN
rows are fitted by benchmarks/attention_kernels.py (`--fit`) to NVIDIA's cudnn-frontend SDPA
benchmarks (benchmarks/data/cudnn_sdpa: H200, GB200 and GB300 training kernels, each direction
timed alone, Llama 3.1, DeepSeek-V3, Kimi K2.6, Qwen3.5 and gpt-oss shapes, 2k-32k tokens,
causal, bf16 and per-tensor FP8; B200 and B300 forward kernels at head dims 64 and 128): one E per
generation, direction and precision, the span, head-dim, exponential and CUDA-core terms shared;
within a median 5.8% of the 195 kernels (the FlashAttention-3-based table before it: 17.1%). What
the fit says about the parts: cuDNN's head-dim term is slight (Qwen3.5's 256-wide heads forward at
1.06 x Llama's 128 on GB200, where FlashAttention-3 on H100 gained 1.19 x; 64-wide heads lose
nothing on the matmuls, only on the exponentials and ALUs); its span term halves the rate at ~630
keys (FA3 at batch x seq = 16k: 227); GB300 runs the same kernels 1.1-1.2 x GB200 at the same
rated peak; FP8 operands speed the forward 1.3-1.7 x, the backward 1.1-1.6 x on Blackwell and not
at all on H200 (0.8 x). Left out of the fit and not modelled: the non-causal rows (every model
planner trains is causal), MXFP8 attention, the deterministic backward
(`planner.model.determinism`), the 32k sliding-window rows (3.2 x the 16k ones on both parts, a
different kernel path), FP8 sliding-window backward (6-100 ms: 30-200 x its forward, no fast path).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from planner.inputs.plan_types import AttentionKernel


class Kernel(NamedTuple):
    """One attention kernel's rates on one GPU generation (module docstring)."""

    fwd: float
    """Forward fraction of the bf16 dense peak at long spans and head dim 128, bf16 operands."""
    bwd: float
    """The same, backward."""
    fp8_fwd: float
    """Forward fraction of the bf16 dense peak with FP8 operands (`Job.fp8_attention`)."""
    fp8_bwd: float
    """The same, backward."""
    half_seq: float
    """S: the span (keys a query tile runs through) at which the rate is half its long-span
    value."""
    half_head_dim: float
    """D: the head-dim term's half point."""
    exp: float
    """Fraction of the GPU's exponential rate sustained at long spans."""
    alu: float
    """FP32 FLOPs per computed score the softmax runs on the CUDA cores (scale, running max,
    subtraction, row sum, rescale, conversion), at the part's FP32 peak over the span term; 0:
    not measured for this kernel (no bound)."""


CUDNN_SPAN = 633.3
CUDNN_HEAD_DIM = 7.57
CUDNN_EXP = 0.8414
CUDNN_ALU = 15.14
"""The cuDNN rows' shared span, head-dim, exponential and CUDA-core terms
(benchmarks/attention_kernels.py --fit, the module docstring)."""

FA2_A100 = Kernel(0.73, 0.63, 0.73, 0.63, 227.0, 61.0, 0.73, 0.0)
"""FlashAttention-2 on A100 (Dao 2023, arXiv:2307.08691, Sec. 4.1: "up to 73% of the theoretical
maximum FLOPs/s" forward, 63% backward, A100 80GB SXM4); no FP8 on Ampere (the FP8 fields repeat
bf16's). Its span and head-dim terms are FlashAttention-3's on H100 (pytorch/benchmark PR #2391,
commit ff65cb67: 430.3 / 517.1 / 565.5 / 590.2 / 614.2 / 620.7 TFLOP/s at 512 / 1k / 2k / 4k / 8k /
16k at batch x seq 16k, s / (s + 227) within 2%; 740 TFLOP/s at head dim 256 against 620.7 at 128,
FA3 abstract: D = 61), the FlashAttention family's tile pipeline; the exponentials at the forward
fraction."""

FUSED_KERNELS: tuple[tuple[tuple[str, ...], Kernel], ...] = (
    (("a100",), FA2_A100),
    (
        ("b300", "gb300"),
        Kernel(0.7925, 0.5413, 1.3609, 0.8856, CUDNN_SPAN, CUDNN_HEAD_DIM, CUDNN_EXP, CUDNN_ALU),
    ),
    (
        ("b200", "gb200"),
        Kernel(0.6735, 0.4934, 1.3470, 0.7213, CUDNN_SPAN, CUDNN_HEAD_DIM, CUDNN_EXP, CUDNN_ALU),
    ),
    (
        ("*",),
        Kernel(0.6911, 0.5636, 1.0486, 0.4751, CUDNN_SPAN, CUDNN_HEAD_DIM, CUDNN_EXP, CUDNN_ALU),
    ),
)
"""(catalog-name prefixes, kernel) of Transformer Engine's fused attention, first match wins.
Blackwell Ultra (B300, GB300: the GB300 rows), Blackwell (B200, GB200: the GB200 rows), Hopper
and every other part ("*": the H200 rows; H100 and H800 are its die, and the AMD parts take it as
they took the Hopper fractions before): cuDNN, fitted (module docstring). GB200's FP8 forward
waits on its exponentials at every measured shape, so its matmul rate is not measured there: it
takes GB300's (the same tensor cores), capped as every FP8 rate is at twice its bf16 one (the
tensor cores' FP8 / bf16 ratio). A100: FlashAttention-2 (`FA2_A100`)."""

FLASH2_KERNELS: tuple[tuple[tuple[str, ...], Kernel], ...] = (
    (("a100",), FA2_A100),
    (("*",), Kernel(0.35, 0.334, 0.35, 0.334, 227.0, 61.0, 0.35, 0.0)),
)
"""The same for FlashAttention-2 (`Job.attention_kernel` "flash2": PyTorch SDPA's flash backend).
A100: `FA2_A100`. Hopper and later ("*"): "FlashAttention-2 achieving only 35% utilization on
H100 GPUs" (Shah et al. 2024, arXiv:2407.08608, abstract) forward; the ~330 TFLOP/s of 989 the
backward runs at (FA2 paper Fig. 7): 0.334. FA2 has no FP8 kernel and no Blackwell kernels of its
own: Blackwell takes these fractions too (no measurement read); span and head-dim terms as
`FA2_A100`."""

ATTENTION_CAUSAL_TILE = 128.0
"""Key-block width of the flash kernels' tiles (FlashAttention-2 / -3 kBlockN = 128 at head dim
128; cuDNN's Blackwell kernels tile 128 x 128, cudnn-frontend's sdpa_fwd_prefill_sm100 plans,
TILE_M = TILE_N = 128): each query tile computes whole key tiles, its diagonal one half masked."""


FP8_ATTENTION_QUANT_BYTES = 5.0
"""HBM bytes per element to quantise an FP8 attention operand with a current (per-tensor) scale,
Transformer Engine's FP8 attention recipe under current scaling, MXFP8 and NVFP4
(NVTE_DPA_FP8_RECIPE): read the bf16 tensor for its amax (2), read it again (2) and write FP8
(1). Q, K and V forward, the output gradient backward; the output stays bf16
(NVTE_DPA_FP8CS_O_in_F16, as MLPerf's Llama 3.1 8B configs set it)."""


def kernel(gpu_name: str, kind: AttentionKernel = "fused") -> Kernel:
    """The attention kernel a job runs on a part (`FUSED_KERNELS`, or FLASH2_KERNELS for
    `Job.attention_kernel` "flash2")."""
    table = FLASH2_KERNELS if kind == "flash2" else FUSED_KERNELS
    return next(k for prefixes, k in table if "*" in prefixes or gpu_name.startswith(prefixes))


def computed_keys(seq: float, window: int | None) -> tuple[float, float]:
    """(keys the kernel computes per query, span): the whole B-wide key tiles (B =
    ATTENTION_CAUSAL_TILE) each of the n = ceil(s / B) query tiles visits, averaged over the
    queries, and the keys a query tile runs through (the sequence, or the window's tiles).
    Query tile i visits key tiles i - c .. i, c = ceil(w / B) (n - 1 without a window), those
    that exist: min(i, c) + 1 of them. Without a window that is (s + B) / 2 keys a query."""
    b = ATTENTION_CAUSAL_TILE
    n = max(math.ceil(seq / b), 1)
    c = n - 1 if window is None else min(math.ceil(window / b), n - 1)
    tiles = n + c * (c + 1) / 2 + (n - 1 - c) * c  # sum over i < n of min(i, c) + 1
    span = seq if c == n - 1 else (c + 1) * b
    return b * tiles / n, span


def _span(k: Kernel, span: float) -> float:
    s = max(span, 1.0)
    return s / (s + k.half_seq)


def kernel_fractions(
    gpu_name: str,
    span: float,
    head_dim: float,
    kind: AttentionKernel = "fused",
    fp8: bool = False,
) -> tuple[float, float]:
    """(forward, backward) fraction of the bf16 dense peak on the computed work (`computed_keys`)
    over a `span` of keys of width `head_dim`, bf16 or FP8 operands (module docstring)."""
    k = kernel(gpu_name, kind)
    d, h = max(head_dim, 1.0), k.half_head_dim
    scale = d / (d + h) / (128.0 / (128.0 + h)) * _span(k, span)
    fwd, bwd = (k.fp8_fwd, k.fp8_bwd) if fp8 else (k.fwd, k.bwd)
    return fwd * scale, bwd * scale


def exp_fraction(gpu_name: str, span: float, kind: AttentionKernel = "fused") -> float:
    """Fraction of the special-function units' exponential rate the kernel sustains over a
    `span` of keys, either direction: `Kernel.exp` times the span term."""
    k = kernel(gpu_name, kind)
    return k.exp * _span(k, span)


def alu_flops(gpu_name: str, span: float, kind: AttentionKernel = "fused") -> float:
    """FP32 FLOPs per computed score, at the part's FP32 peak, that the softmax's CUDA-core work
    takes over a `span` of keys, either direction: `Kernel.alu` over the span term (0: no
    bound)."""
    k = kernel(gpu_name, kind)
    return k.alu / _span(k, span)
