"""Time of one decoder layer (and of the output layer) for one micro-batch on one GPU.

Compute. Each GPU runs, per micro-batch of t = micro_batch_size x seq_length / cp tokens, the GEMMs
of its TP shard of each layer (QKV, output projection, fc1, fc2, experts, logits; M = t rows,
K and N the TP-sliced weight dims), each on the additive roofline of `planner.model.gemm` at

    e = min(GEMM_EFFICIENCY_MAX, the part's matmul ceiling)

of the peak, the only constant of that roofline. The ceiling is measured per part and precision
(the best-shape throughput of the vendor's BLAS over the dense peak, from the catalog): a part
whose best matmul is slower than GEMM_EFFICIENCY_MAX x peak runs its GEMMs at that best.
Backward = 2 x forward (dgrad and wgrad have the same three dimensions); 1 x with the model's
weights frozen (`Job.frozen_model`: no wgrad).
FP8 runs the decoder's linear layers at the FP8 peak (at most FP8_CEILING_FRACTION of the part's
FP8 matmul ceiling, the same under every recipe; on Blackwell at most `gemm.BLACKWELL_FP8_SPEEDUP`
x the bf16 rate), NVFP4 (precision fp4) at the FP4 peak (at most FP8_CEILING_FRACTION of
`gemm.fp4_ceiling`, the fixed non-MMA time of a Blackwell GEMM tile against the FP4 tensor cores)
plus the recipe's quantisation traffic: `gemm.quant_bytes` per element of each GEMM's input and
output gradient per micro-batch, and of its weight once per step
(`Layer.weight_cast`, added by `planner.model.cost`); the output layer stays in bf16, and attention
unless `Job.fp8_attention`.
With `Job.gemm_sm_margin` (Transformer Engine's NVTE_EXT_MARGIN_SM) the decoder's GEMMs run on the
GPU's SMs less it, all step; the collectives hidden under them run on those SMs first
(`comms.sm_share` takes the margin off what they hold). Routed experts run as one grouped GEMM per
layer over the rank's E / ep experts, each padded to the kernel's row tile (`gemm.grouped_rows`);
their tokens are the busiest rank's (`routing_load.step_load`: one for a single expert-parallel
rank, the dropless imbalance, the sampling noise of forced random routing, or the capacity factor
with token dropping or padding). The router's logits GEMM (tokens x h x E) and the token
permutations before the dispatch and after the combine (`planner.model.moe_time`, memory-bound) are
timed too, though no model FLOPs count them.

A layer is the blocks of its kind (`planner.inputs.hybrid.LayerKind`): a transformer layer's
attention (or gated delta net) and MLP or experts, or one block of a hybrid stack: attention, an
MLP, experts, a Mamba-2 mixer or a gated delta net. A linear-time mixer's in_proj and out_proj are
GEMMs like the others and its chunked scan is timed by its module's `scan_time`
(`planner.model.mamba`, `planner.model.gdn`; its context parallelism: one all-to-all per tensor
each way, exposed: the Mamba mixer's z, x, B, C, dt and output, six; the gated delta net's qkvzba
and output, two; `layer_traffic.traffic`).

Core attention with flash attention executes the whole key tiles under the causal mask (about
half the s x s matrix, or a sliding window's tiles: the work, not the FLOP convention of
`planner.model.flops`) and its backward recomputes the scores: 2 + 5 matmuls, i.e. forward + 2.5
forwards; each direction runs at the published kernels' fraction of the bf16 peak for the GPU,
precision (bf16, or FP8 with FP8 attention), span of keys and head dim
(`planner.model.attention`), times ATTENTION_EFFICIENCY, but never faster than the GPU's
special-function units compute the softmax's exponentials, one per score
(`planner.model.attention_time`).
Without flash attention (Megatron before 2023: the fused-softmax path) the full matrix is computed
by batched GEMMs (M = K = s, N = head dim) and the s^2 softmax/dropout tensors add memory traffic;
in fp32 training Transformer Engine's unfused attention runs whatever flash_attention says
(`attention_time.core_timed`, `attention_time.unfused_fp32`).

Non-GEMM work (norms, activation functions, dropout, residuals, rotary, softmax, cross-entropy) is
memory-bound: ELEMENTWISE_PASSES x the bytes of the layer's saved activations (Korthikanti et al.
2022 Table 2 terms, generalised to GQA/GLU; the replicated terms are split by tp only with
sequence parallelism; of a MoE layer's, not the routed experts' permuted input, which only the
token permutation touches, `moe_time.permute_time`) at HBM_EFFICIENCY x the HBM bandwidth.
Framework switches that change this work (composite RMSNorm, loss on gathered logits, no flash
attention) are `Job` fields. The experts' fused grouped MLP (`Job.grouped_mlp_fused`) does its
activation and quantisation passes in the GEMM epilogues: `moe_time.fused_mlp_saving` comes off
this work and the casts.

Small kernels. A stream runs at most one kernel per KERNEL_MIN_S however little each does (the
launch path's rate: a grid is dispatched once the kernel it depends on retires, its waves ramp
up and drain, its first loads wait a memory round trip); a kernel that runs longer hides the next
one's launch behind it. A layer's streamed work above (its elementwise and quantisation bytes) is
spread over its `host.kernels` launches forward less its GEMMs and its attention or scan kernel
(`small_kernels`), and BACKWARD_ISSUE_RATIO times as many backward. Taken as equal in size, they
take max(streamed, small_kernels x KERNEL_MIN_S), launched eagerly or replayed from a graph.
Production layers reach the floor barely or not at all (their elementwise kernels move tens of
MB each: 0.7% of GPT-3 175B's MLPerf step at tp 4 on H100, none of Llama 3.1 405B's); at a few
thousand tokens per GPU each moves 1-3 us of bytes, and the floor sets a third of the step
(Llama 3.1 8B at tp 2 cp 4 on 512 GB200, 1,024 tokens per GPU per micro-batch: 32%).

Traffic. The layer's TP, CP and EP traffic is charged here, since how much of it hides depends on
the layer's own kernels: TP by `planner.model.layer_tp` (what hides under the GEMMs still holds
SMs), CP by `planner.model.cp_time`, EP by the token dispatcher (`dispatch.moe_dispatch`).
Recompute: full repeats each layer's forward (compute, TP and EP traffic) before its backward;
Megatron's selective recompute re-runs its --recompute-modules (`recompute_time`); torchtitan's
per-op policy (every other matmul output of a block, no grouped GEMM's, the attention output)
the GEMMs it does not save (`gemm_shapes.per_op_split`: by their share of the FLOPs) and the
elementwise forward. Rotary embeddings run as separate ops (`Job.fused_rope` false) add
`attention_time.UNFUSED_ROPE_BYTES` per element they turn to the streamed work. CPU offloading:
`Layer.offload`, the layer's saved activations over the GPU's host link one way
(`planner.model.host_link`); `planner.model.stage_time` exposes what outlasts the next layer.

Power caps: a GPU capped below its TDP (`[cluster] power_limit_w`) runs its tensor cores at a lower
clock. Dynamic power goes as f x V^2 and, in the DVFS range, V as f, so P ~ f^3: compute peaks scale
by (cap / TDP)^(1/3) (POWER_CLOCK_EXPONENT). HBM bandwidth is not scaled.

Calibration: GEMM_EFFICIENCY_MAX, FP8_CEILING_FRACTION, ATTENTION_EFFICIENCY,
ELEMENTWISE_PASSES and KERNEL_MIN_S are fitted by benchmarks/fit_constants.py on the SC21 and
Megatron-Core H100 rows of published_runs.yaml and one hash fold of the dense MLPerf rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from planner.inputs.hybrid import LayerKind, layer_kind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    attention_time,
    cp_time,
    determinism,
    gemm_shapes,
    host,
    layer_parts,
    layer_tp,
    layer_traffic,
    linear_time,
    mixers,
    moe_time,
    recompute_time,
)
from planner.model.gemm import (
    Gpu,
    fp4_ceiling,
    gemm_time,
    linear_fraction,
)
from planner.model.host_link import host_link_bandwidth
from planner.model.layer_keys import core_key, parts_key
from planner.model.layer_traffic import LayerCore
from planner.model.routing_load import step_load

GEMM_EFFICIENCY_MAX = 0.7594
"""Fraction of dense peak a large GEMM sustains in training (cuBLAS / Transformer Engine bf16
reach ~700-800 of 989 TFLOP/s on H100 and ~250-280 of 312 on A100 in microbenchmarks; less under a
power cap), never more than the part's measured matmul ceiling (`GpuSpec.matmul_ceiling`: MI300X
and MI325X reach 51-60% of their peak at best, H100 FP8 71%). Fitted by
benchmarks/fit_constants.py on the SC21 and Megatron-Core H100 rows."""

FP8_CEILING_FRACTION = 0.8348
"""Fraction of the part's measured best-shape FP8 matmul throughput (`GpuSpec.matmul_ceiling`:
the MAMF table's FP8 figure, a sweep's most favourable shape) that the decoder's FP8 GEMMs reach
at training shapes; NVFP4's GEMMs the same fraction of their best-shape ceiling
(`gemm.fp4_ceiling`, also one benchmark's most favourable shape). Points read: B200, per-tensor
FP8 CUTLASS at M=16384 N=6144 K=4096, 2544.7 TFLOP/s (vLLM PR #19566) of MAMF 3432.5 (0.74);
H800, DeepGEMM at M=4096 N=7168 K=16384, 1404-1470 of H100's MAMF 1402.6 (~1.0, a hand-tuned
kernel, DeepGEMM PR #74). Fitted by benchmarks/fit_constants.py (the FP8 rows there: MLPerf's
fold, Transformer Engine's cuBLASLt GEMMs)."""

ATTENTION_EFFICIENCY = 0.6329
"""Multiplier on the flash-attention kernels' measured throughput (`planner.model.attention`:
FlashAttention-2 on A100, cuDNN on Hopper and Blackwell, by GPU, precision, span of keys and head
dimension, whole key tiles), and on the rates they sustain the softmax's exponentials and its
CUDA-core work at (`planner.model.attention_time`): 1.0 = the kernels as benchmarked alone.
Read at call time; a calibration or benchmarks/fit_constants.py may refit it (what it absorbs
beyond the kernel: the attention's launch gaps and its share of the step's other losses). Fitted
(2026-12-04) against the kernel rates before the cuDNN table; with the cuDNN table a refit moves
it to 0.697 and the other constants a little, the fit rows 4.4% -> 4.1% median, but every
held-out source worse (dense Megatron 3.8% -> 3.9%, torchtitan 5.5% -> 7.5%, MoE Megatron 12.8%
-> 13.7%): not taken. At 1.0 (the kernels alone, the rest refitted) the fit rows come to 3.8%
and the held-out rows worse still (dense 4.5%, torchtitan 10.9%, MoE 17.4%)."""

ELEMENTWISE_PASSES = 5.267
"""HBM traffic of a layer's non-GEMM kernels, forward + backward, in multiples of the bytes of its
saved activations (each saved tensor is written once, read by the backward, and its gradient is
written and read again: 4-6 passes). Fitted (same rows)."""

KERNEL_MIN_S = 3.583e-6
"""The least time a kernel holds a stream (the module docstring's small kernels). Fitted (same
rows), where the measurements put it: null kernels launched back to back from a stream run at
about one per 3 us on recent GPUs and software, the launch path's "speed of light" (NVIDIA
developer forums, "Too much time for kernel launch latency",
forums.developer.nvidia.com/t/233645, a reply: "the launch overhead of null kernels ... reduced
to about 3 microseconds"); a replayed graph node adds ~0.5 us to a short kernel (A. Gray,
"Getting Started with CUDA Graphs", NVIDIA technical blog, 2019: 3.4 us per replayed kernel of
2.9 us)."""

HBM_EFFICIENCY = 0.80
"""Achieved / nominal HBM bandwidth for streaming kernels (STREAM-like copies reach 80-90%)."""

UNFUSED_NORM_BYTES = 80.0
"""Extra HBM bytes per normalised element, forward + backward, of a composite (unfused) PyTorch
RMSNorm over a fused kernel: in fp32, x.float() (r2 w4), pow (r4 w4), mean (r4), x * rsqrt (r4 w4),
* weight and cast (r4 w2) is ~30 bytes forward against ~4 fused, and autograd's backward about
twice that against ~6 fused."""

POWER_CLOCK_EXPONENT = 1.0 / 3.0
"""Sustained clock ~ power^(1/3) under a cap: CMOS dynamic power P = C V^2 f with the voltage
scaled with the clock along the DVFS curve (P ~ f^3). An upper bound on the slowdown for
compute-bound kernels at or near the TDP; not fitted."""


@dataclass
class Layer:
    """One layer type's seconds per micro-batch on one GPU."""

    fwd: float = 0.0
    bwd: float = 0.0
    recompute: float = 0.0
    tp: float = 0.0
    """TP seconds the layer's time shows: exposed traffic plus what the hidden part takes from
    the compute it runs under."""
    tp_hidden: float = 0.0
    tp_traffic: float = 0.0
    """Every TP collective's seconds, exposed or hidden (what `planner.search.bound` floors)."""
    tp_plain: float = 0.0
    """`tp` as it would be without Megatron's --tp-comm-overlap (`tp` itself where that is off):
    whether the overlap pays (`planner.search.variants.overlap_pays`)."""
    cp: float = 0.0
    cp_hidden: float = 0.0
    ep: float = 0.0
    ep_shared: float = 0.0
    """Of `ep`, the seconds the shared experts' GEMMs run under (Megatron
    --moe-shared-expert-overlap: `dispatch.shared_overlap`)."""
    weight_cast: float = 0.0
    """FP8: seconds to quantise the layer's weights, once per step (not per micro-batch); what
    is cast on every use is in `fwd` and `bwd` (`linear_time.per_use_weight_cast`)."""
    offload: float = 0.0
    """Seconds to move the layer's saved activations over the host link one way (CPU
    offloading: out in the forward, back before the backward)."""


def _constants() -> tuple[float, ...]:
    """This module's constants `_core` reads, at call time: its memo keys hold them
    (`layer_keys.core_key`), so a calibration or a test that sets one never reads a core computed
    under another."""
    return ATTENTION_EFFICIENCY, ELEMENTWISE_PASSES, KERNEL_MIN_S, UNFUSED_NORM_BYTES


def layer_time(
    job: Job,
    lay: Layout,
    gpu: Gpu,
    kind: bool | LayerKind,
    cores: dict[tuple[object, ...], LayerCore] | None = None,
) -> Layer:
    """Seconds per micro-batch of one decoder layer of a kind (or a transformer layer's MoE
    flag: False dense, True MoE) on one GPU; a linear-time mixer's scan from its module
    (`planner.model.mixers`).
    `cores`: where the caller remembers the layer cores (`_core`: compute, streamed work,
    offload; `layer_keys.LAYER_CORES.of(job)`, which `planner.model.stage_time` clears with its
    layer times), keyed on what they read (`layer_keys.core_key`); the recompute and the TP, CP
    and EP traffic are computed here."""
    arch = job.arch
    kind = layer_kind(kind)
    moe = kind.moe
    if cores is None:
        c = _core(job, lay, gpu, kind)
    elif (hit := cores.get(key := core_key(lay, gpu, kind, _constants()))) is not None:
        c = hit
    else:  # its dispatcher-free parts shared with the other dispatchers'
        c = cores[key] = _core(job, lay, gpu, kind, layer_parts.PARTS.of(job))
    t, load, gemm_fwd, perm = c.t, c.load, c.gemm_fwd, c.perm
    shapes, parts, times, casts = c.shapes, c.parts, c.times, c.casts
    attn_fwd, streamed = c.attn_fwd, c.streamed
    tp = lay.tp
    out = Layer(fwd=c.fwd, bwd=c.bwd, weight_cast=c.weight_cast, offload=c.offload)
    policy = job.recompute_policy(lay.recompute)
    modules: tuple[str, ...] = lay.recompute_modules if policy == "core_attn" else ()
    if policy == "full":
        out.recompute = out.fwd
    elif policy == "per_op":  # the matmuls torchtitan's policy re-runs, by their FLOPs' share
        _, rerun, whole = gemm_shapes.per_op_split(arch, shapes, tp, kind)
        out.recompute = gemm_fwd * rerun / whole + streamed / 3 + perm / 2
    elif policy == "core_attn":
        pieces = recompute_time.Pieces(parts, times, casts, attn_fwd, t, load, perm / 2)
        out.recompute = sum(
            recompute_time.module_time(job, lay, gpu, kind, pieces, mod) for mod in modules
        )
    # --- TP, CP, EP traffic of the layer (planner.model.comms, planner.model.dispatch)
    n_fwd = 2 if lay.recompute == "full" else 1  # forward passes per micro-batch
    if tp > 1:
        out.tp, out.tp_hidden, out.tp_traffic, out.tp_plain = layer_tp.tp_charges(
            job, lay, kind, (shapes, times), t, n_fwd, layer_tp.replayed(policy, modules)
        )
    if lay.cp > 1 and kind.mixer is not None:
        n_cp = cp_time.recomputed_passes(n_fwd, modules) if kind.mixer == "attention" else n_fwd
        out.cp, out.cp_hidden = layer_traffic.traffic(job, lay, kind, c, "cp", n_cp)
    if moe and lay.ep * lay.expert_tp > 1 and not layer_tp.experts_on_gathered_input(job, lay):
        n_ep = 2 if lay.recompute == "full" or "moe" in modules else 1
        out.ep, out.ep_shared = layer_traffic.traffic(job, lay, kind, c, "ep", n_ep)
    return out


def _core(
    job: Job,
    lay: Layout,
    gpu: Gpu,
    kind: LayerKind,
    memo: dict[tuple[object, ...], layer_parts.Parts] | None = None,
) -> LayerCore:
    """`layer_time`'s core (`LayerCore`), computed; its dispatcher-free parts
    (`layer_parts.parts`) from `memo` where the caller gives one (`layer_keys.parts_key`), their
    attention kernels then from `layer_parts.ATTENTION_CORES`."""
    arch = job.arch
    moe = kind.moe
    s = job.seq_length
    s_local = s // lay.cp
    t = float(lay.micro_batch_size * s_local)
    tp = lay.tp
    load = step_load(job, lay)
    e = ATTENTION_EFFICIENCY
    if memo is None:
        p = layer_parts.parts(job, lay, gpu, kind, t, load, e)
    elif (hit := memo.get(pkey := parts_key(lay, gpu, kind, load, e))) is not None:
        p = hit
    else:
        attention = layer_parts.ATTENTION_CORES.of(job)
        p = memo[pkey] = layer_parts.parts(job, lay, gpu, kind, t, load, e, attention)
    gemm_fwd, cast = sum(p.lin.times), sum(p.lin.casts)
    perm = 0.0  # the token permutations: half forward (permute, unpermute), half their reverses
    if moe:
        # router GEMM and the token permutations (not in `gemm_shapes.linear_gemms`: no model FLOPs)
        gemm_fwd += moe_time.router_time(job, lay, gpu, t)
        perm = moe_time.permute_time(job, lay, gpu, t, load)
    # --- core attention, or a linear-time mixer's chunked scan
    act_bytes, ew_bytes = p.act_bytes, p.ew_bytes
    attn_fwd = attn_bwd = scan_fwd = scan_bwd = 0.0
    if (linear := mixers.of(kind)) is not None:
        scan_fwd, scan_bwd = linear.scan_time(arch, gpu, t, tp)
    if kind.mixer == "attention" and (attention_time.core_timed(job) or arch.has_dsa):
        attn_fwd, attn_bwd = p.attn_fwd, p.attn_bwd
        cast += p.attn_quant
    elif kind.mixer == "attention":
        heads_local = arch.num_attention_heads / tp
        bmm = gemm_time(
            s_local, arch.head_dim, s, gpu.peak_bf16, gpu.ridge, gpu.e_bf16, 2 * heads_local
        )
        attn_fwd = bmm * lay.micro_batch_size
        attn_bwd = 2 * attn_fwd
        ew_bytes += 5 * heads_local * s_local * s * lay.micro_batch_size
    ew = (ELEMENTWISE_PASSES * ew_bytes + determinism.fill_bytes(job, act_bytes)) / gpu.hbm
    if not job.fused_norm:
        norm_elems = t * kind.blocks * arch.hidden_size / (tp if lay.sequence_parallel else 1)
        ew += UNFUSED_NORM_BYTES * norm_elems / gpu.hbm
    if not job.fused_rope and kind.mixer == "attention":
        rotated = attention_time.rope_elements(arch, t, tp)
        ew += attention_time.UNFUSED_ROPE_BYTES * rotated / gpu.hbm
    streamed = ew + cast  # HBM-bound work; a fused grouped MLP's epilogues do part of it
    if moe:
        streamed = max(streamed - moe_time.fused_mlp_saving(job, lay, gpu, t, load), 0.0)
    # the small-kernel floor covers the permutations' kernels too
    streamed = max(streamed, KERNEL_MIN_S * small_kernels(job, lay, kind, len(p.lin.shapes)) - perm)
    fwd = gemm_fwd + attn_fwd + scan_fwd + streamed / 3 + perm / 2
    grads = 1 if job.frozen_model else 2  # dgrad, and wgrad unless the weights are frozen
    slow = _wgrad_slowdown(job, gpu)  # not on the GEMMs its recipe leaves alone
    wgrad = (grads - 1) * (gemm_fwd * slow - (slow - 1) * linear_time.wgrad_exempt(job, p.lin))
    bwd = gemm_fwd + wgrad + attn_bwd + scan_bwd + 2 * streamed / 3 + perm / 2
    w_fwd, w_bwd = p.lin.per_use  # the weight casts each micro-batch runs, the rest once a step
    once = 0.0 if linear_time.weights_cast_per_use(job, lay) else p.lin.weight_cast - w_fwd - w_bwd
    lin = (*p.lin[:4], once)
    fwd, bwd, offload = fwd + w_fwd, bwd + w_bwd, act_bytes / host_link_bandwidth(job)
    return LayerCore(
        *lin, t, load, gemm_fwd, attn_fwd, attn_bwd, streamed, perm, fwd, bwd, offload, grads
    )


def small_kernels(job: Job, lay: Layout, kind: LayerKind, gemms: int) -> float:
    """Kernels of one layer per micro-batch, forward and backward, that carry its streamed work:
    `host.kernels` forward less its `gemms` GEMMs and its mixer's kernel (attention or scan),
    and BACKWARD_ISSUE_RATIO times as many backward."""
    big = gemms + (1 if kind.mixer is not None else 0)
    return max(host.kernels(job, lay, kind) - big, 0.0) * (1 + host.BACKWARD_ISSUE_RATIO)


def gpu_of(job: Job) -> Gpu:
    """The job's GPU as the roofline sees it: peaks (lowered under a power cap), achieved HBM
    bandwidth, ridge point, large-GEMM fractions."""
    spec = job.cluster.gpu
    clock = (job.cluster.power_w / spec.tdp_w) ** POWER_CLOCK_EXPONENT
    peak = spec.peak_flops("bf16") * clock
    linear = spec.peak_flops(job.precision) * clock
    hbm_nominal = job.cluster.hbm_tb_per_s * 1e12

    def e(precision: Literal["bf16", "fp8"]) -> float:
        ceiling = spec.matmul_ceiling(precision)
        if ceiling is not None and precision == "fp8":
            ceiling *= FP8_CEILING_FRACTION
        return GEMM_EFFICIENCY_MAX if ceiling is None else min(GEMM_EFFICIENCY_MAX, ceiling)

    hbm = hbm_nominal * HBM_EFFICIENCY
    e_bf16, ceiling = e("bf16"), spec.matmul_ceiling("bf16")
    if job.precision == "fp4":
        best = fp4_ceiling(spec.peak_flops("fp4"), spec.peak_flops("bf16"))
        e_linear = min(GEMM_EFFICIENCY_MAX, FP8_CEILING_FRACTION * best)
    else:
        fp8 = job.precision == "fp8"
        e_linear = linear_fraction(
            e("fp8") if fp8 else e_bf16, e_bf16, fp8, spec.is_blackwell, ceiling, job.fp8_recipe
        )
    return Gpu(peak, linear, hbm, peak / hbm_nominal, e_bf16, e_linear)


def _wgrad_slowdown(job: Job, gpu: Gpu) -> float:
    """The weight-gradient GEMMs' time over the forward's: 1, but torchao's rowwise_with_gw_hp
    runs them in bf16 (the "gw" of its name kept in high precision) while the forward and input
    gradient run in FP8: the ratio of the large-GEMM rates (`Gpu.peak_linear` x `e_linear`, the
    FP8 ceiling, over `peak_bf16` x `e_bf16`); not on torchtitan's routed experts, which the
    recipe does not reach (`linear_time.wgrad_exempt`)."""
    if not (job.quantised and job.quant_recipe == "rowwise_with_gw_hp"):
        return 1.0
    return (gpu.peak_linear * gpu.e_linear) / (gpu.peak_bf16 * gpu.e_bf16)
