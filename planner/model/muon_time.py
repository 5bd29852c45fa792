"""Muon's optimizer step on one GPU: the Newton-Schulz orthogonalisation of each decoder matrix
(`Job.optimizer = "muon"`; the memory side is `planner.model.optimizer_states`).

Megatron-LM d98e8a64 (--optimizer muon: megatron/core/optimizer/emerging_optimizers.py
`TensorParallelMuon`, running NVIDIA-NeMo/Emerging-Optimizers fd77292
orthogonalized_optimizers/muon_utils.py `newton_schulz`) orthogonalises the momentum of every 2-D
decoder weight; the rest (embeddings, output layer, norms, biases) take Adam
(`cost.optimizer_time`, which times every parameter's memory-bound update). On X, m x n with
m <= n (transposed if not), each of MUON_NS_STEPS quintic iterations runs three GEMMs:
A = X X^T (M = m, K = n, N = m), B = b A + c A A (m, m, m) and X = a X + B X (m, m, n), i.e.
4 m^2 n + 2 m^3 FLOPs. Megatron's own balancing estimate (layer_wise_optimizer.py
`_ns_compute_cost`) is the leading max(m, n) min(m, n)^2 term. At --muon-fp32-matmul-prec medium
(the default) the iteration casts X to bf16 ("BF16 I/O kernels"): the bf16 roofline.

The matrices (`matrices`): attention's Q, K and V apart (--muon-split-qkv, the default: each over
all query groups) and its output projection, or MLA's down- and up-projections; a dense MLP's fc1
(gate and up as one) and fc2; each local expert's fc1 and fc2 (TEGroupedMLP keeps one weight per
expert); shared experts' fc1 and fc2; the router's (experts x hidden); a Mamba mixer's out_proj
(its in_proj is excluded, mamba_mixer.py sets use_muon False on it). Whole matrices: under
--muon-tp-mode duplicated (the default) every TP rank all-gathers the matrix's fp32 momentum
shards (`newton_schulz_tp`) and orthogonalises all of it, so TP does not divide the work; it adds
the all-gather.

Who runs them: without the distributed optimizer every data-parallel rank runs all of its stage's
matrices; with it (Megatron's layer-wise distributed optimizer) they are dealt out to the
data-parallel ranks by that cost (LPT bin-packing, `_compute_per_buffer_param_layout`): each rank
runs a dp-th of the stage's (dense matrices over `Layout.dense_dp`, experts over
`Layout.expert_dp`), never less than the largest one, and issues a dp-th of them (rounded up).

Time: the GEMMs on the bf16 roofline and the host issuing each matrix's MUON_MATRIX_KERNELS
kernels (`host.KERNEL_ISSUE_S` each on the reference host, `host.slowdown`), whichever is longer
(the host runs ahead of the GPU), plus the TP all-gathers.
"""

from __future__ import annotations

import math

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, flops, host
from planner.model.gemm import Gpu, gemm_time

MUON_NS_STEPS = 5
"""Newton-Schulz iterations per matrix and step: Megatron's --muon-num-ns-steps default."""

MUON_MATRIX_KERNELS = 30
"""Kernels the host issues per orthogonalised matrix and step (orthogonalized_optimizer.py `step`,
muon_utils.py `newton_schulz`, emerging_optimizers.py `orthogonalize`): the weight decay and the
momentum's lerp (2), the Frobenius normalisation (3), the casts to bf16 and back (2), three GEMMs
per iteration (15 at MUON_NS_STEPS), the spectral scale and the parameter update (2), the
duplicated mode's all-gather and concatenation (2), and the per-parameter Python (the loop, the
matmul-precision context, the QKV split's views) taken as four more. Counted, not fitted; each
costs `host.KERNEL_ISSUE_S` on the reference host."""

FP32 = 4
"""Bytes per element of the momentum the duplicated TP mode all-gathers (fp32)."""

Matrix = tuple[float, float, float]
"""(rows, columns, how many) of a weight Muon orthogonalises whole."""


def matrices(arch: ModelArch, kind: LayerKind, ep: int) -> tuple[list[Matrix], list[Matrix]]:
    """(dense, expert) matrices of one layer of `kind` on one GPU (module docstring): whole
    matrices, the rank's E / ep local experts each."""
    # the layer's GEMMs at tp = etp = 1 are its whole weights (K x N), experts counted per rank
    gemms = [(k, n, c) for _, k, n, c in flops.linear_gemms(arch, 1.0, 1, ep, 1, kind)]
    parts = flops.linear_gemm_parts(arch, kind)
    dense: list[Matrix] = []
    expert: list[Matrix] = []
    h = arch.hidden_size
    for i, ((k, n, c), part) in enumerate(zip(gemms, parts, strict=True)):
        if part == "expert":
            expert.append((k, n, c))
        elif part == "mamba" and i == 0:
            continue  # in_proj: use_muon False
        elif part == "attn" and i == 0 and not arch.multi_latent_attention:
            d, q, g = arch.head_dim, arch.num_attention_heads, arch.query_groups
            dense += [(h, q * d, 1), (h, g * d, 2)]  # Q, and K and V
        else:
            dense.append((k, n, c))
    if kind.moe:
        dense.append((h, float(arch.num_moe_experts or 1), 1))  # the router
    return dense, expert


def ns_flops(rows: float, cols: float) -> float:
    """FLOPs of one matrix's MUON_NS_STEPS iterations: 4 m^2 n + 2 m^3 each, m <= n."""
    m, n = min(rows, cols), max(rows, cols)
    return MUON_NS_STEPS * (4 * m * m * n + 2 * m**3)


def ns_gpu_time(rows: float, cols: float, gpu: Gpu) -> float:
    """GPU seconds of one matrix's iterations: three bf16 GEMMs each (module docstring)."""
    m, n = min(rows, cols), max(rows, cols)
    one = (
        gemm_time(m, n, m, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)
        + gemm_time(m, m, m, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)
        + gemm_time(m, m, n, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)
    )
    return MUON_NS_STEPS * one


def _share(job: Job, group: list[Matrix], shards: int, tp: int, gpu: Gpu) -> float:
    """Seconds one rank spends on its share of `group` (its dp-th of the work and of the
    matrices, never less than the largest), plus each matrix's TP all-gather."""
    if not group:
        return 0.0
    work = [ns_gpu_time(r, c, gpu) for r, c, _ in group]
    total = sum(w * n for w, (_, _, n) in zip(work, group, strict=True))
    count = sum(n for _, _, n in group)
    gpu_s = max(total / shards, max(work))
    per_matrix = MUON_MATRIX_KERNELS * host.KERNEL_ISSUE_S * host.slowdown(job)
    host_s = math.ceil(count / shards) * per_matrix
    gather = 0.0
    if tp > 1:
        grp = comms.place(job.cluster, 1, tp)
        gather = sum(comms.all_gather(FP32 * r * c, grp) * n for r, c, n in group) / shards
    return max(gpu_s, host_s) + gather


def step_time(job: Job, lay: Layout, counts: tuple[int, ...], gpu: Gpu) -> float:
    """Seconds of Muon's orthogonalisation on one GPU of a stage with `counts` layers of each of
    `job.arch.kinds`; 0 unless the job trains with Muon."""
    if job.optimizer != "muon":
        return 0.0
    dense: list[Matrix] = []
    expert: list[Matrix] = []
    for kind, n in zip(job.arch.kinds, counts, strict=True):
        if n:
            d, e = matrices(job.arch, kind, lay.ep)
            dense += [(r, c, k * n) for r, c, k in d]
            expert += [(r, c, k * n) for r, c, k in e]
    distributed = lay.zero_stage >= 1
    dense_shards = lay.dense_dp if distributed else 1
    expert_shards = max(lay.expert_dp, 1) if distributed else 1
    return _share(job, dense, dense_shards, lay.tp, gpu) + _share(
        job, expert, expert_shards, lay.expert_tp, gpu
    )
