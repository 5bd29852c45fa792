"""Muon's optimizer step on one GPU: the Newton-Schulz orthogonalisation of each decoder matrix
(`Job.optimizer = "muon"`; the memory side is `planner.model.optimizer_states` and
`planner.model.muon_step`).

Megatron-LM d98e8a64 (--optimizer muon: megatron/core/optimizer/emerging_optimizers.py
`TensorParallelMuon`, running NVIDIA-NeMo/Emerging-Optimizers fd77292
orthogonalized_optimizers/muon_utils.py `newton_schulz`) orthogonalises the momentum of every 2-D
decoder weight; the rest (embeddings, output layer, norms, biases) take Adam
(`stage_sync.optimizer_time`, which times every parameter's memory-bound update). On X, m x n with m
<= n (transposed if not), each of `Job.muon_ns_steps` quintic iterations (--muon-num-ns-steps, 5 by
default) runs three GEMMs: A = X X^T (M = m, K = n, N = m), B = b A + c A A (m, m, m) and X = a X +
B X (m, m, n), i.e. 4 m^2 n + 2 m^3 FLOPs. Megatron's own balancing estimate
(layer_wise_optimizer.py `_ns_compute_cost`) is the leading max(m, n) min(m, n)^2 term. At
--muon-fp32-matmul-prec medium (the default, `Job.muon_matmul_precision`) the iteration casts X to
bf16 ("BF16 I/O kernels"): the bf16 roofline; at high the fp32 GEMMs run as TF32, which the vendors'
datasheets put at half the bf16 dense peak on every part in the catalog (4-byte elements: the same
ridge); at highest on the CUDA cores at the part's fp32 peak (`GpuSpec.peak_tflops_fp32`: 67 of
H100's 989 bf16 TFLOP/s), at the same large-GEMM fraction.

The matrices (`matrices`): attention's Q, K and V apart (--muon-split-qkv, the default, each over
all query groups; `Job.muon_split_qkv` False keeps QKV one matrix) and its output projection, or
MLA's down- and up-projections; a dense MLP's fc1 (gate and up as one) and fc2; each local expert's
fc1 and fc2 (TEGroupedMLP keeps one weight per expert); shared experts' fc1 and fc2; the router's
(experts x hidden); a Mamba mixer's out_proj (its in_proj is excluded, mamba_mixer.py sets use_muon
False on it). A tensor-parallel weight (`Job.muon_tp_mode`, --muon-tp-mode; `newton_schulz_tp`):
duplicated (the default) all-gathers the matrix's fp32 momentum shards on every TP rank and
orthogonalises all of it, so TP does not divide the work, it adds the all-gather; blockwise
orthogonalises each rank's shard on its own (TP divides the work, nothing moves); distributed keeps
the shards and all-reduces each iteration's m x m Gram matrix, timed as the shard's three GEMMs (X
X^T and B X on the shard, A A whole: 4 m^2 n / tp + 2 m^3, m the whole matrix's short side) plus
that all-reduce.

Who runs them: without the distributed optimizer every data-parallel rank runs all of its stage's
matrices; with it (Megatron's layer-wise distributed optimizer) they are dealt out to the data-
parallel ranks by that cost (LPT bin-packing, `_compute_per_buffer_param_layout`): each rank runs a
dp-th of the stage's (dense matrices over `Layout.dense_dp`, experts over `Layout.expert_dp`), never
less than the largest one, and issues a dp-th of them (rounded up).

Time: the GEMMs on the roofline and the host issuing each matrix's MUON_MATRIX_KERNELS kernels
(`host.KERNEL_ISSUE_S` each on the reference host, `host.slowdown`), whichever is longer (the host
runs ahead of the GPU), plus the TP collectives.
"""

from __future__ import annotations

import math

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, gemm_shapes, host
from planner.model.gemm import Gpu, fp32_peak, gemm_time

MUON_MATRIX_KERNELS = 30
"""Kernels the host issues per orthogonalised matrix and step (orthogonalized_optimizer.py `step`,
muon_utils.py `newton_schulz`, emerging_optimizers.py `orthogonalize`): the weight decay and the
momentum's lerp (2), the Frobenius normalisation (3), the casts to bf16 and back (2), three GEMMs
per iteration (15 at the default 5 iterations), the spectral scale and the parameter update (2),
the duplicated mode's all-gather and concatenation (2), and the per-parameter Python (the loop,
the matmul-precision context, the QKV split's views) taken as four more. Counted, not fitted;
each costs `host.KERNEL_ISSUE_S` on the reference host."""

FP32 = 4
"""Bytes per element of the momentum the duplicated TP mode all-gathers (fp32)."""

Matrix = tuple[float, float, float, float, float]
"""A weight Muon orthogonalises: (rows, columns) whole, (rows, columns) of one TP rank's shard,
and how many the rank holds."""


def matrices(
    arch: ModelArch, kind: LayerKind, ep: int, tp: int = 1, etp: int = 1, split_qkv: bool = True
) -> tuple[list[Matrix], list[Matrix]]:
    """(dense, expert) matrices of one layer of `kind` on one GPU (module docstring), whole and
    as TP (experts: expert-TP) shards, the rank's E / ep local experts each."""
    # the layer's GEMMs' K x N are its weights: whole at tp = etp = 1, a rank's shard at tp, etp
    whole = gemm_shapes.linear_gemms(arch, 1.0, 1, ep, 1, kind)
    shard = gemm_shapes.linear_gemms(arch, 1.0, tp, ep, etp, kind)
    parts = gemm_shapes.linear_gemm_parts(arch, kind)
    dense: list[Matrix] = []
    expert: list[Matrix] = []
    h = arch.hidden_size
    for i, ((_, k, n, c), (_, ks, ns, _), part) in enumerate(zip(whole, shard, parts, strict=True)):
        if part == "expert":
            expert.append((k, n, ks, ns, c))
        elif part == "mamba" and i == 0:
            continue  # in_proj: use_muon False
        elif part == "attn" and i == 0 and splits_qkv(arch, split_qkv):
            d, q, g = arch.head_dim, arch.num_attention_heads, arch.query_groups
            kv = max(g / tp, 1) * d  # KV heads are replicated when tp exceeds the groups
            gated = 2 if arch.attention_output_gate else 1  # the gate: a Q-sized matrix
            dense += [(h, q * d, h, q * d / tp, gated), (h, g * d, h, kv, 2)]  # Q, K and V
        else:
            dense.append((k, n, ks, ns, c))
    if kind.moe:
        e = float(arch.num_moe_experts or 1)
        dense.append((h, e, h, e, 1))  # the router, not TP-split
    return dense, expert


def splits_qkv(arch: ModelArch, split_qkv: bool) -> bool:
    """Whether an attention layer's QKV weight is orthogonalised as its Q, K and V parts
    (`matrices`' first two entries of such a layer: Q, with its gate, and K and V): with
    --muon-split-qkv, unless the attention is MLA (no fused QKV weight)."""
    return split_qkv and not arch.multi_latent_attention


def ns_flops(rows: float, cols: float, steps: int = 5) -> float:
    """FLOPs of one matrix's `steps` iterations: 4 m^2 n + 2 m^3 each, m <= n."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4 * m * m * n + 2 * m**3)


def _rate(job: Job, gpu: Gpu) -> tuple[float, float]:
    """The Newton-Schulz GEMMs' (dense peak, roofline ridge): bf16 at medium precision; TF32 at
    high, half the bf16 peak on 4-byte elements (the same ridge); fp32 on the CUDA cores at
    highest (`GpuSpec.peak_tflops_fp32`, under the same power cap as the bf16 peak)."""
    precision, spec = job.muon_matmul_precision, job.cluster.gpu
    if precision == "medium":
        return gpu.peak_bf16, gpu.ridge
    if precision == "high":
        return gpu.peak_bf16 / 2, gpu.ridge
    peak = fp32_peak(spec, gpu)
    # 4-byte elements: twice the bytes per FLOP of the bf16 roofline's intensity
    return peak, 2 * gpu.ridge * peak / gpu.peak_bf16


def ns_gpu_time(job: Job, m: Matrix, gpu: Gpu) -> float:
    """GPU seconds of one matrix's iterations on one rank under the job's TP mode: three GEMMs
    each (module docstring), X X^T and B X over the rank's part of the long side (the whole
    matrix duplicated, the shard blockwise, the shard's share distributed) and A A whole."""
    rows, cols, r_shard, c_shard, _ = m
    short, long = min(rows, cols), max(rows, cols)
    if job.muon_tp_mode == "blockwise":
        short, long = min(r_shard, c_shard), max(r_shard, c_shard)
    elif job.muon_tp_mode == "distributed":
        long *= (r_shard * c_shard) / (rows * cols)  # the rank's share of the matrix
    (peak, ridge), e = _rate(job, gpu), gpu.e_bf16
    one = (
        gemm_time(short, long, short, peak, ridge, e)
        + gemm_time(short, short, short, peak, ridge, e)
        + gemm_time(short, short, long, peak, ridge, e)
    )
    return job.muon_ns_steps * one


def _tp_traffic(job: Job, m: Matrix, tp: int) -> float:
    """Seconds of one matrix's TP collectives: the duplicated mode's fp32 all-gather of the
    momentum, or the distributed mode's all-reduce of each iteration's Gram matrix (in the
    iteration's dtype); none for blockwise or a matrix TP does not split."""
    rows, cols, r_shard, c_shard, _ = m
    if tp <= 1 or job.muon_tp_mode == "blockwise" or r_shard * c_shard >= rows * cols:
        return 0.0
    grp = comms.place(job.cluster, 1, tp)
    if job.muon_tp_mode == "duplicated":
        return comms.all_gather(FP32 * rows * cols, grp)
    width = 2 if job.muon_matmul_precision == "medium" else FP32
    return job.muon_ns_steps * comms.all_reduce(width * min(rows, cols) ** 2, grp)


def _share(job: Job, group: list[Matrix], shards: int, tp: int, gpu: Gpu) -> float:
    """Seconds one rank spends on its share of `group` (its dp-th of the work and of the
    matrices, never less than the largest), with each matrix's TP collectives."""
    if not group:
        return 0.0
    work = [ns_gpu_time(job, m, gpu) for m in group]
    total = sum(w * m[4] for w, m in zip(work, group, strict=True))
    count = sum(m[4] for m in group)
    gpu_s = max(total / shards, max(work))
    kernels = MUON_MATRIX_KERNELS + (1 if job.muon_nesterov else 0)  # Nesterov's lerp
    per_matrix = kernels * host.KERNEL_ISSUE_S * host.slowdown(job)
    host_s = math.ceil(count / shards) * per_matrix
    traffic = sum(_tp_traffic(job, m, tp) * m[4] for m in group) / shards
    return max(gpu_s, host_s) + traffic


def step_time(job: Job, lay: Layout, counts: tuple[int, ...], gpu: Gpu) -> float:
    """Seconds of Muon's orthogonalisation on one GPU of a stage with `counts` layers of each of
    `job.arch.kinds`; 0 unless the job trains with Muon."""
    if job.optimizer != "muon":
        return 0.0
    dense: list[Matrix] = []
    expert: list[Matrix] = []
    for kind, n in zip(job.arch.kinds, counts, strict=True):
        if n:
            d, e = matrices(job.arch, kind, lay.ep, lay.tp, lay.expert_tp, job.muon_split_qkv)
            dense += [(*m[:4], m[4] * n) for m in d]
            expert += [(*m[:4], m[4] * n) for m in e]
    distributed = lay.zero_stage >= 1
    dense_shards = lay.dense_dp if distributed else 1
    expert_shards = max(lay.expert_dp, 1) if distributed else 1
    return _share(job, dense, dense_shards, lay.tp, gpu) + _share(
        job, expert, expert_shards, lay.expert_tp, gpu
    )
