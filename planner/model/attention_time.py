"""Seconds of the flash-attention kernel of one layer and micro-batch on one GPU: its matmuls over
the whole key tiles it computes at the published kernels' rate (`planner.model.attention`, bf16
or FP8), its softmax's exponentials at the GPU's special-function rate and its softmax's FP32
work at the CUDA cores' rate, each direction the longest of the three, and FP8 attention's
operand quantisation; in fp32 training the unfused attention that runs instead
(`unfused_fp32`). `planner.model.layer_time` adds it to the layer; `efficiency` is its
ATTENTION_EFFICIENCY, passed in so that a refit reaches it."""

from __future__ import annotations

from typing import NamedTuple

from planner.inputs.arch import ModelArch
from planner.inputs.plan import Job
from planner.model import attention, determinism, flops, gemm_shapes, titan_sdpa
from planner.model.fp32 import gemm_peak
from planner.model.gemm import Gpu, fp32_peak, gemm_time


class Core(NamedTuple):
    """The flash-attention kernel's seconds per micro-batch (`core_attention`)."""

    fwd: float
    bwd: float
    quant: float
    """FP8 attention's operand quantisation (HBM traffic), forward and backward together."""
    exp_bound: bool
    """The forward waits on the exponential units, not on the matmuls."""
    alu_bound: bool = False
    """The forward waits on the softmax's FP32 work on the CUDA cores."""


def fractions(
    job: Job, span: float, head_dim: float, efficiency: float, fp8: bool = False
) -> tuple[float, float]:
    """(forward, backward) fraction of the bf16 peak the flash-attention kernel sustains on the
    work it computes over a `span` of keys (`attention.kernel_fractions`: the published kernels'
    rate by GPU, precision, span and head dim), never above the part's measured matmul ceiling
    (FP8's as a fraction of the bf16 peak), times `efficiency`.
    Taken at the whole sequence also with context parallelism: the ring's chunk kernels run back
    to back over the whole key range (and the all-to-all variant runs whole sequences on fewer
    heads); the chunks' extra per-call overheads are not charged here, so trading cp for
    micro-batch size keeps the step time (`planner.search.twins`) unless the layer's small
    kernels, the ring's among them, set it (`layer_time.KERNEL_MIN_S`)."""
    spec = job.cluster.gpu
    fe, be = attention.kernel_fractions(spec.name, span, head_dim, titan_sdpa.kernel(job), fp8)
    ceiling = spec.matmul_ceiling("fp8" if fp8 else "bf16")
    if ceiling is not None:
        if fp8:
            ceiling *= spec.peak_flops("fp8") / spec.peak_flops("bf16")
        fe, be = min(fe, ceiling), min(be, ceiling)
    return fe * efficiency, be * efficiency


def core_attention(
    job: Job, gpu: Gpu, t: float, s: int, tp: int, efficiency: float, window: int | None = None
) -> Core:
    """The flash-attention kernel for t local queries over s keys (or a sliding `window` of them)
    on a TP shard: each direction the longest of its matmuls over the keys it computes
    (`attention.computed_keys`: whole tiles), at the kernel's bf16 or FP8 rate
    (`Job.fp8_attention`; the backward's longer in Megatron's deterministic mode,
    `determinism.attention_bwd_factor`; torchtitan's deterministic SDPA at FlashAttention-2's
    rates, `titan_sdpa.kernel`), its exponentials (one per score computed, at the GPU's
    `exp_tera_per_s` x `attention.exp_fraction`) and its softmax's CUDA-core work
    (`attention.alu_flops` per score at the FP32 peak), and FP8's quantisation traffic. In fp32
    training Transformer Engine runs its unfused attention instead (`unfused_fp32`)."""
    if job.params_dtype == "fp32":
        return unfused_fp32(job, gpu, t, s, tp)
    arch, spec = job.arch, job.cluster.gpu
    qk_w, v_w = flops.attention_core_width(arch)
    heads = arch.num_attention_heads
    keys, span = attention.computed_keys(s, window)  # (s + 128) / 2 over the whole sequence
    work = 2.0 * t * keys * (qk_w + v_w) / tp  # QK^T and AV, forward
    fp8 = job.attention_in_fp8
    fe, be = fractions(job, span, (qk_w + v_w) / 2 / heads, efficiency, fp8)
    fwd = work / (gpu.peak_bf16 * fe)
    bwd = 2.5 * work / (gpu.peak_bf16 * be) * determinism.attention_bwd_factor(job)
    exp_fwd = 0.0
    clock = gpu.peak_bf16 / spec.peak_flops("bf16")  # a power cap slows the SFUs and ALUs alike
    scores = t * keys * heads / tp
    kernel = titan_sdpa.kernel(job)
    if spec.exp_tera_per_s is not None:
        rate = spec.exp_tera_per_s * 1e12 * clock * efficiency
        exp_fwd = scores / (rate * attention.exp_fraction(spec.name, span, kernel))
    alu = attention.alu_flops(spec.name, span, kernel)
    alu_fwd = scores * alu / (fp32_peak(spec, gpu) * efficiency)
    side = max(exp_fwd, alu_fwd)  # either direction: one exponential and its softmax per score
    quant = 0.0
    if fp8:  # Q, K, V (K and V per query group) forward, the output gradient backward
        groups = min(arch.query_groups / heads, 1.0)
        elements = t * (qk_w + (qk_w + v_w) * groups + v_w) / tp
        quant = attention.FP8_ATTENTION_QUANT_BYTES * elements / gpu.hbm
    return Core(
        max(fwd, side),
        max(bwd, side),
        quant,
        exp_fwd > max(fwd, alu_fwd),
        alu_fwd > max(fwd, exp_fwd),
    )


def core_timed(job: Job) -> bool:
    """Whether `core_attention` times the job's attention layers: with flash attention, and in
    fp32 training whatever `flash_attention` says, since Transformer Engine runs its unfused
    attention there either way (the plan's flash_attention = false launches it as
    --attention-backend unfused: `unfused_fp32`); otherwise `layer_time` times Megatron's bf16
    unfused path itself."""
    return job.flash_attention or job.params_dtype == "fp32"


UNFUSED_FP32_SCORE_BYTES = (24.0, 36.0)
"""HBM bytes per score of fp32 unfused attention's work besides its GEMMs, (forward, backward), by
hand from Transformer Engine's UnfusedDotProductAttention with its torch softmax
(`planner.model.fp32`): forward, the first batched GEMM writes the scores (4), the mask's
in-place fill reads and writes them (8), the softmax reads them and writes its output (8), which
the second GEMM reads (4); backward, the second GEMM writes the probabilities' gradient (4) and
reads the probabilities for the values' (4), the softmax backward reads both and writes the
scores' gradient (12), the mask's fill backward reads and writes it (8), and the first GEMM reads
it twice, for the queries' and the keys' gradients (8)."""


def unfused_fp32(job: Job, gpu: Gpu, t: float, s: int, tp: int) -> Core:
    """fp32 attention for t local queries over s keys on a TP shard (`planner.model.fp32`):
    Transformer Engine's unfused attention computes every score, masked or not, in two batched
    GEMMs per head (QK^T, then the probabilities times V; the backward twice their work), which
    torch runs in TF32 in NVIDIA's containers (`fp32.gemm_peak`, 4-byte elements: twice the bf16
    roofline's bytes per FLOP, at its large-GEMM fraction), and streams the scores through HBM
    (UNFUSED_FP32_SCORE_BYTES)."""
    arch = job.arch
    qk_w, v_w = flops.attention_core_width(arch)
    heads = arch.num_attention_heads
    peak = gemm_peak(job, gpu)
    ridge = 2 * gpu.ridge * peak / gpu.peak_bf16
    rows = min(t, s)  # a sample's queries per batched GEMM
    count = heads / tp * t / rows
    qk = gemm_time(rows, qk_w / heads, s, peak, ridge, gpu.e_bf16, count)
    pv = gemm_time(rows, s, v_w / heads, peak, ridge, gpu.e_bf16, count)
    scores = t * s * heads / tp
    fwd_bytes, bwd_bytes = UNFUSED_FP32_SCORE_BYTES
    return Core(
        qk + pv + fwd_bytes * scores / gpu.hbm,
        2 * (qk + pv) + bwd_bytes * scores / gpu.hbm,
        0.0,
        False,
    )


UNFUSED_ROPE_BYTES = 32.0
"""Extra HBM bytes per rotated element (each query and key element the rotary embedding turns),
forward + backward, of rotary embeddings run as separate ops over one fused kernel (read 2,
write 2 each way: 8). By hand: torchtitan's eager `apply_rotary_emb` (x.float() r2 w4, the
complex multiply r4 w4, type_as r4 w2: 20 forward, as many backward: 40); Megatron-LM's
`_apply_rotary_pos_emb_bshd` under --no-rope-fusion (d98e8a64 rope_utils.py: t * cos, the
rotate-half copy, * sin, the add and the concatenation, about 21 bytes forward in bf16, about as
many backward: 42)."""


def rope_elements(arch: ModelArch, t: float, tp: int) -> float:
    """Elements one attention layer's rotary embedding turns per micro-batch on one GPU of TP
    size `tp`, for t tokens: every query and key head's whole head dim, or MLA's rope parts (each
    query head's qk_pos_emb_head_dim and the one key part shared by all heads); 0 for a model
    without rotary embeddings."""
    if arch.position_embedding_type != "rope":
        return 0.0
    heads = arch.num_attention_heads / tp
    if arch.multi_latent_attention and arch.qk_pos_emb_head_dim:
        return t * (heads + 1) * arch.qk_pos_emb_head_dim
    return t * (heads + gemm_shapes.kv_heads(arch, tp)) * arch.head_dim
