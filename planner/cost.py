"""Step time of a layout: compute, communication, pipeline bubble, optimizer.

`estimate(job, layout)` is pure and cheap (one pass over two layer types and pp stages); the search
calls it thousands of times. Every time is per GPU, per step, in seconds.

Compute. Each GPU runs, per micro-batch of t = micro_batch_size x seq_length / cp tokens, the GEMMs
of its TP shard of each layer (QKV, output projection, fc1, fc2, experts, logits; M = t rows,
K and N the TP-sliced weight dims). A GEMM of 2MKN FLOPs runs at

    peak x GEMM_EFFICIENCY_MAX / (1 + GEMM_EFFICIENCY_MAX x ridge / I),

I = 1 / (1/M + 1/K + 1/N) its arithmetic intensity in FLOP per byte of 16-bit operands (set by
the smallest dimension: a thin TP slice, a small micro-batch, a rarely-routed expert) and
ridge = bf16 peak / HBM bandwidth the GPU's roofline ridge point. This is the additive roofline: the
GEMM's FLOPs at e_max x peak plus its operand traffic (2MKN / I bytes) at HBM speed, so a GEMM with
I = e_max x ridge gets half of e_max and memory-bound ones fall off like I / ridge; no constant
beyond e_max. Backward = 2 x forward (dgrad and wgrad have the same three dimensions).
FP8 runs the decoder's linear layers at the FP8 peak plus Transformer Engine's cast-transpose
traffic (FP8_CAST_BYTES per input, weight and output-gradient element); attention and the output
layer stay in bf16.

Core attention with flash attention executes half the s x s matrix under the causal mask (the
work, not the FLOP convention of `planner.flops`) and its backward recomputes the scores: 2 + 5
matmuls, i.e. forward + 2.5 forwards; it runs at ATTENTION_EFFICIENCY of the bf16 peak. Without
flash attention (Megatron before 2023: the fused-softmax path) the full matrix is computed by
batched GEMMs (M = K = s, N = head dim) and the s^2 softmax/dropout tensors add memory traffic.

Non-GEMM work (norms, activation functions, dropout, residuals, rotary, softmax, cross-entropy) is
memory-bound: ELEMENTWISE_PASSES x the bytes of the layer's saved activations (Korthikanti et al.
2022 Table 2 terms, generalised to GQA/GLU; the replicated terms are split by tp only with
sequence parallelism) at HBM_EFFICIENCY x the HBM bandwidth. Framework switches that change this
work (composite RMSNorm, loss on gathered logits, no flash attention) are `Job` fields.

Recompute: full repeats each layer's forward (compute and TP traffic) before its backward;
selective repeats the core attention forward.

Communication (planner.comms, each group on the tier it spans in Megatron's tp-cp-ep-dp-pp order):
TP two all-reduces (SP: all-gather + reduce-scatter) per layer per forward and backward, exposed
unless `tp_comm_overlap` (then only what exceeds the layer's GEMMs); CP the ring-attention K/V
hops, hidden behind the attention kernels; EP all-to-all dispatch and combine of t x top_k tokens
times MOE_LOAD_IMBALANCE, exposed; PP one activation send forward and one gradient send backward
per micro-batch (t x h bf16, /tp with SP), on the critical path in 1F1B, hidden in steady state
and exposed on fill and drain when interleaved; DP gradient reduce-scatter / all-reduce and
parameter all-gather (ZeRO-3: per micro-batch), exposed beyond their overlap windows
(`comms.data_parallel`).

Pipeline (planner.schedule): T = m x max_r t_r + (sum_r t_r - max_r t_r) / vpp with t_r each
stage's time per micro-batch (compute + exposed TP/CP/EP/PP traffic); the last stage also runs the
output layer and loss. The breakdown reports the slowest stage; `bubble` is the second term.
The DP traffic and optimizer of the stage where they take longest are added after the pipeline.

Optimizer: memory-bound; OPTIMIZER_BYTES_PER_PARAM bytes touched for each parameter shard a GPU
updates, plus reading and zeroing the local gradient buffer, at HBM_EFFICIENCY x HBM bandwidth.
Other: STEP_OVERHEAD_S per step (data loading, logging, launch latencies).

Calibration: GEMM_EFFICIENCY_MAX, ATTENTION_EFFICIENCY and ELEMENTWISE_PASSES are fitted by
benchmarks/fit_constants.py on the SC21 and Megatron-Core H100 rows of published_runs.yaml;
everything else is a documented physical or measured constant.
"""

from __future__ import annotations

from dataclasses import dataclass

from planner import comms, flops
from planner.activations import MOE_LOAD_IMBALANCE
from planner.arch import ModelArch
from planner.layout import Layout
from planner.memory import stage_params
from planner.schedule import pipeline_time, stage_ranges
from planner.spec import Job

GEMM_EFFICIENCY_MAX = 0.744
"""Fraction of dense peak a large GEMM sustains in training (cuBLAS / Transformer Engine bf16
reach ~700-800 of 989 TFLOP/s on H100 and ~250-280 of 312 on A100 in microbenchmarks; less under a
power cap). Fitted by benchmarks/fit_constants.py on the SC21 and Megatron-Core H100 rows."""

ATTENTION_EFFICIENCY = 0.188
"""Fraction of bf16 peak a flash-attention kernel sustains on the work it executes (causal half,
backward = 2.5 forwards). Fitted (same rows). Lower than kernel benchmarks (FlashAttention-2:
~0.6 on A100, ~0.35 on H100) because it also absorbs what small-hidden, long-sequence models lose
elsewhere (softmax exp throughput, launch gaps); it only acts on flash-attention rows, i.e. the
H100 ones of the fit set."""

ELEMENTWISE_PASSES = 5.0
"""HBM traffic of a layer's non-GEMM kernels, forward + backward, in multiples of the bytes of its
saved activations (each saved tensor is written once, read by the backward, and its gradient is
written and read again: 4-6 passes). Fitted (same rows)."""

HBM_EFFICIENCY = 0.80
"""Achieved / nominal HBM bandwidth for streaming kernels (STREAM-like copies reach 80-90%)."""

OPTIMIZER_BYTES_PER_PARAM = 28.0
"""Adam with fp32 master weights: read grad, master, m, v (16 bytes), write master, m, v (12)."""

GRAD_BUFFER_BYTES_PER_PARAM = 8.0
"""Per local parameter per step: the gradient-norm read and the zeroing write of the fp32 buffer."""

STEP_OVERHEAD_S = 0.01
"""Per-step fixed cost: data loader hand-off, loss/grad-norm all-reduces, logging, launches."""

UNFUSED_NORM_BYTES = 80.0
"""Extra HBM bytes per normalised element, forward + backward, of a composite (unfused) PyTorch
RMSNorm over a fused kernel: in fp32, x.float() (r2 w4), pow (r4 w4), mean (r4), x * rsqrt (r4 w4),
* weight and cast (r4 w2) is ~30 bytes forward against ~4 fused, and autograd's backward about
twice that against ~6 fused."""

FP8_CAST_BYTES = 4.0
"""Bytes moved per element to feed an FP8 GEMM (Transformer Engine cast-transpose: read bf16,
write fp8 and its fp8 transpose), for each of its input, weight and output-gradient tensors."""

BF16 = 2


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per step on the slowest pipeline stage, by cause."""

    compute: float
    recompute: float
    tp_comm_exposed: float
    tp_comm_hidden: float
    cp_comm_exposed: float
    cp_comm_hidden: float
    ep_comm_exposed: float
    ep_comm_hidden: float
    pp_comm_exposed: float
    dp_comm_exposed: float
    dp_comm_hidden: float
    bubble: float
    optimizer: float
    other: float

    @property
    def step_time(self) -> float:
        """Compute, recompute, every exposed communication, bubble, optimizer and other."""
        hidden = ("tp_comm_hidden", "cp_comm_hidden", "ep_comm_hidden", "dp_comm_hidden")
        return sum(float(getattr(self, f)) for f in self.__dataclass_fields__ if f not in hidden)


_COST_NAMES = {
    "recompute": "recompute",
    "tp_comm_exposed": "TP traffic",
    "cp_comm_exposed": "CP traffic",
    "ep_comm_exposed": "EP traffic",
    "pp_comm_exposed": "PP traffic",
    "dp_comm_exposed": "DP traffic",
    "bubble": "bubble",
    "optimizer": "optimizer",
    "other": "other",
}


@dataclass(frozen=True)
class Performance:
    breakdown: StepBreakdown
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_flops_per_step: float
    hardware_flops_per_step: float
    model_tflops_per_gpu: float
    mfu: float
    """Model FLOPs / (step time x GPUs x dense peak of the job's precision)."""

    def bottleneck(self) -> str:
        """The largest cost other than compute, e.g. "bubble" or "TP traffic"."""
        b = self.breakdown
        name = max(_COST_NAMES, key=lambda f: float(getattr(b, f)))
        return _COST_NAMES[name]


# ----------------------------------------------------------------------------- compute kernels


@dataclass(frozen=True)
class _Gpu:
    peak_bf16: float
    peak_linear: float
    """Peak for the decoder's linear layers (FP8 when the job is fp8)."""
    hbm: float
    """Achieved HBM bandwidth, bytes/s."""
    ridge: float
    """bf16 peak / nominal HBM bandwidth, FLOP per byte."""


def gemm_efficiency(m: float, k: float, n: float, ridge: float) -> float:
    """Fraction of peak for an M x K x N GEMM (additive roofline): e / (1 + e x ridge / I)."""
    intensity = 1.0 / (1.0 / m + 1.0 / k + 1.0 / n)
    e = GEMM_EFFICIENCY_MAX
    return e / (1.0 + e * ridge / intensity)


def gemm_time(m: float, k: float, n: float, peak: float, ridge: float, count: float = 1) -> float:
    """Seconds for `count` forward GEMMs of M x K x N."""
    if m <= 0 or k <= 0 or n <= 0 or count <= 0:
        return 0.0
    return count * 2.0 * m * k * n / (peak * gemm_efficiency(m, k, n, ridge))


@dataclass
class _Layer:
    """One layer type's seconds per micro-batch on one GPU."""

    fwd: float = 0.0
    bwd: float = 0.0
    recompute: float = 0.0
    gemm_fwd: float = 0.0
    attn_fwd: float = 0.0
    tp: float = 0.0
    tp_hidden: float = 0.0
    cp: float = 0.0
    cp_hidden: float = 0.0
    ep: float = 0.0


def _activation_bytes(arch: ModelArch, lay: Layout, s_local: int, t: float, moe: bool) -> float:
    """Saved-activation bytes of one layer per micro-batch (Korthikanti Table 2 terms): the proxy
    for the memory traffic of its elementwise kernels."""
    h, tp = arch.hidden_size, lay.tp
    q_width, _ = flops.attention_core_width(arch)
    kv = 2 * arch.query_groups * arch.head_dim
    glu = 2 if arch.gated_linear_unit else 1
    if moe:
        ffn = arch.expert_ffn * arch.moe_router_topk + (
            arch.moe_shared_expert_intermediate_size or 0
        )
    else:
        ffn = arch.ffn_hidden_size
    replicated = 10 * h  # norm inputs 4h, attention and MLP inputs 4h, two dropout masks 2h
    split = 2 * (q_width + kv) + 2 * q_width + 2 * ffn * glu + 2 * ffn
    per_token = replicated / (tp if lay.sequence_parallel else 1) + split / tp
    return t * per_token


def _layer(job: Job, lay: Layout, gpu: _Gpu, moe: bool) -> _Layer:
    arch = job.arch
    out = _Layer()
    s = job.seq_length
    s_local = s // lay.cp
    t = float(lay.micro_batch_size * s_local)
    tp = lay.tp
    # --- linear layers (FP8: plus Transformer Engine's cast-transpose of inputs, weights and
    # output gradients, read 2 bytes and write 1 + 1 (the transpose) per element)
    cast = 0.0
    shapes = flops.linear_gemms(arch, t, tp, lay.ep, lay.expert_tp, moe, MOE_LOAD_IMBALANCE)
    for m, k, n, c in shapes:
        out.gemm_fwd += gemm_time(m, k, n, gpu.peak_linear, gpu.ridge, c)
        if job.precision == "fp8":
            cast += c * FP8_CAST_BYTES * (m * k + k * n + m * n) / gpu.hbm
    # --- core attention
    qk_w, v_w = flops.attention_core_width(arch)
    heads_local = arch.num_attention_heads / tp
    full = 2.0 * t * s * (qk_w + v_w) / tp  # QK^T and AV over the full matrix
    ew_bytes = _activation_bytes(arch, lay, s_local, t, moe)
    if job.flash_attention:
        attn_fwd = full / 2 / (gpu.peak_bf16 * ATTENTION_EFFICIENCY)
        attn_bwd = 2.5 * attn_fwd
    else:
        d = arch.head_dim
        bmm = gemm_time(s_local, d, s, gpu.peak_bf16, gpu.ridge, 2 * heads_local)
        attn_fwd = bmm * lay.micro_batch_size
        attn_bwd = 2 * attn_fwd
        ew_bytes += 5 * heads_local * s_local * s * lay.micro_batch_size
    ew = ELEMENTWISE_PASSES * ew_bytes / gpu.hbm
    if not job.fused_norm:
        norm_elems = t * 2 * arch.hidden_size / (tp if lay.sequence_parallel else 1)
        ew += UNFUSED_NORM_BYTES * norm_elems / gpu.hbm
    out.attn_fwd = attn_fwd
    out.fwd = out.gemm_fwd + attn_fwd + (ew + cast) / 3
    out.bwd = 2 * out.gemm_fwd + attn_bwd + 2 * (ew + cast) / 3
    if lay.recompute == "full":
        out.recompute = out.fwd
    elif lay.recompute == "selective":
        out.recompute = attn_fwd
    # --- TP, CP, EP traffic of the layer (planner.comms)
    n_fwd = 2 if lay.recompute == "full" else 1  # forward passes per micro-batch
    if tp > 1:
        total = comms.tensor_parallel_layer(job.cluster, tp, t * arch.hidden_size * BF16, n_fwd)
        if lay.tp_comm_overlap and lay.sequence_parallel:
            exposed = max(total - (2 + n_fwd) * out.gemm_fwd, 0.0)
        else:
            exposed = total
        out.tp, out.tp_hidden = exposed, total - exposed
    if lay.cp > 1:
        kv_bytes = t * 2 * max(arch.query_groups / tp, 1) * arch.head_dim * BF16
        out.cp, out.cp_hidden = comms.context_parallel_ring(
            job.cluster, tp, lay.cp, kv_bytes, attn_fwd, attn_bwd, n_fwd
        )
    if moe and lay.ep > 1:
        tokens = t / (tp if lay.sequence_parallel else 1)
        size = tokens * arch.moe_router_topk * arch.hidden_size * BF16 * MOE_LOAD_IMBALANCE
        out.ep = comms.expert_all_to_all(job.cluster, lay.expert_tp, lay.ep, size, n_fwd)
    return out


def _output_layer(job: Job, lay: Layout, gpu: _Gpu) -> float:
    """Seconds per micro-batch of the output layer and loss (fwd + bwd) on the last stage."""
    arch = job.arch
    t = float(lay.micro_batch_size * job.seq_length // lay.cp)
    vocab = arch.padded_vocab(lay.tp) / lay.tp
    fwd = gemm_time(t, arch.hidden_size, vocab, gpu.peak_bf16, gpu.ridge)
    loss_vocab = vocab if job.vocab_parallel_loss else vocab * lay.tp
    ce = ELEMENTWISE_PASSES * t * loss_vocab * 4 / gpu.hbm  # fp32 logits through softmax/CE
    gather = 0.0
    if not job.vocab_parallel_loss and lay.tp > 1:
        # logits all-gathered forward, their gradient sliced backward
        gather = comms.all_gather(t * vocab * lay.tp * BF16, comms.place(job.cluster, 1, lay.tp))
    heads = 1 + arch.mtp_num_layers
    return heads * (3 * fwd + ce + gather)


def _optimizer_time(lay: Layout, dense: float, expert: float, gpu: _Gpu) -> float:
    shard_d = lay.dp * lay.cp if lay.zero_stage >= 1 else 1
    shard_e = max(lay.expert_dp, 1) if lay.zero_stage >= 1 else 1
    updated = dense / shard_d + expert / shard_e
    return (
        OPTIMIZER_BYTES_PER_PARAM * updated + GRAD_BUFFER_BYTES_PER_PARAM * (dense + expert)
    ) / (gpu.hbm)


def _gpu(job: Job) -> _Gpu:
    spec = job.cluster.gpu
    peak = spec.peak_flops("bf16")
    linear = spec.peak_flops("fp8") if job.precision == "fp8" else peak
    hbm_nominal = spec.hbm_bandwidth_tb_per_s * 1e12
    return _Gpu(peak, linear, hbm_nominal * HBM_EFFICIENCY, peak / hbm_nominal)


def estimate(job: Job, layout: Layout) -> Performance:
    """Predicted step time and throughput of a layout that passed `planner.rules`."""
    arch, lay = job.arch, layout
    gpu = _gpu(job)
    m = max(lay.num_microbatches(job.global_batch_size), 1)
    dense_l = _layer(job, lay, gpu, False)
    moe_l = _layer(job, lay, gpu, True) if arch.is_moe else dense_l
    out_layer = _output_layer(job, lay, gpu)

    # PP point-to-point per micro-batch: activations forward, gradients backward
    pp_msg = 0.0
    if lay.pp > 1:
        t = lay.micro_batch_size * job.seq_length / lay.cp
        size = t * arch.hidden_size * BF16 / (lay.tp if lay.sequence_parallel else 1)
        stride = lay.tp * lay.cp * lay.dp
        pp_msg = 2 * comms.p2p(size, comms.p2p_link(job.cluster, stride, lay.pp))
    interleaved = lay.vpp > 1  # Megatron overlaps p2p with compute in the interleaved schedule
    pp_per_mb = 0.0 if interleaved else pp_msg

    stage_times: list[float] = []
    rows: list[tuple[float, ...]] = []
    dp_exp = dp_hid = opt = 0.0
    dp_seen: dict[tuple[int, int, bool, bool], tuple[float, float, float]] = {}
    for rank, layers in enumerate(stage_ranges(arch.num_layers, lay)):
        n_moe = arch.moe_count(layers)
        n_dense, last = len(layers) - n_moe, rank == lay.pp - 1
        c = rec = tp = tp_h = cp = cp_h = ep = fwd = bwd = 0.0
        for k, n in ((dense_l, n_dense), (moe_l, n_moe)):
            c += n * (k.fwd + k.bwd)
            fwd += n * k.fwd
            bwd += n * (k.bwd + k.recompute)
            rec += n * k.recompute
            tp += n * k.tp
            tp_h += n * k.tp_hidden
            cp += n * k.cp
            cp_h += n * k.cp_hidden
            ep += n * k.ep
        if last:
            c += out_layer
            fwd += out_layer / 3
            bwd += 2 * out_layer / 3
        stage_times.append(c + rec + tp + cp + ep + pp_per_mb)
        rows.append((c, rec, tp, tp_h, cp, cp_h, ep))
        # DP traffic and optimizer: the stage where they take longest decides (ranks with the
        # same layers and role move the same bytes: computed once)
        key = (n_dense, n_moe, rank == 0, last)
        if key not in dp_seen:
            dense, expert = stage_params(job, lay, rank, layers)
            e, hid = comms.data_parallel(
                job.cluster, lay, dense, expert, job.main_grad_dtype, fwd, bwd, m
            )
            dp_seen[key] = (e, hid, _optimizer_time(lay, dense, expert, gpu))
        e, hid, o = dp_seen[key]
        if e + o >= dp_exp + opt:
            dp_exp, dp_hid, opt = e, hid, o

    _, bubble = pipeline_time(stage_times, m, lay.vpp)
    worst = max(range(len(stage_times)), key=stage_times.__getitem__)
    c, rec, tp, tp_h, cp, cp_h, ep = rows[worst]
    pp_exposed = m * pp_per_mb + (pp_msg * (lay.pp - 1) if interleaved else 0.0)

    breakdown = StepBreakdown(
        compute=m * c,
        recompute=m * rec,
        tp_comm_exposed=m * tp,
        tp_comm_hidden=m * tp_h,
        cp_comm_exposed=m * cp,
        cp_comm_hidden=m * cp_h,
        ep_comm_exposed=m * ep,
        ep_comm_hidden=0.0,
        pp_comm_exposed=pp_exposed,
        dp_comm_exposed=dp_exp,
        dp_comm_hidden=dp_hid,
        bubble=bubble,
        optimizer=opt,
        other=STEP_OVERHEAD_S,
    )
    step = breakdown.step_time
    n_gpus = lay.num_gpus
    model = flops.model_flops(arch, job.seq_length, job.global_batch_size)
    hw = flops.hardware_flops(arch, job.seq_length, job.global_batch_size, lay.recompute)
    peak = job.cluster.gpu.peak_flops(job.precision)
    return Performance(
        breakdown=breakdown,
        step_time_s=step,
        tokens_per_s_per_gpu=job.tokens_per_step / (step * n_gpus),
        model_flops_per_step=model,
        hardware_flops_per_step=hw,
        model_tflops_per_gpu=model / (step * n_gpus) / 1e12,
        mfu=model / (step * n_gpus * peak),
    )
