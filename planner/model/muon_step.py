"""Muon's working memory at the optimizer step (`Job.optimizer = "muon"`): what orthogonalising one
matrix allocates on top of the states and the step's gradient copies (`rank_states.step_bytes`).

The step runs one matrix at a time, after the last backward, while the fp32 gradient copies are
held (NVIDIA-NeMo/Emerging-Optimizers fd77292 orthogonalized_optimizers/orthogonalized_optimizer.py
`step`, :178-210: the momentum's lerp_ in place, `orthogonalize`, p.add_). For one matrix, in
Megatron-LM d98e8a64 megatron/core/optimizer/emerging_optimizers.py `TensorParallelMuon` and
Emerging-Optimizers fd77292 orthogonalized_optimizers/muon_utils.py, with E its whole elements, L
its elements on this rank and W those it is orthogonalised on:

- the duplicated TP mode (--muon-tp-mode's default; `newton_schulz_tp`, :327-333) all-gathers the
  fp32 momentum shards into tp tensors (4 E, :328-329) and concatenates them (4 E more, :330),
  held until it returns: W = E. Every Transformer Engine linear weight carries a partition_dim
  whatever the TP size (megatron/core/extensions/transformer_engine.py:116-123; the fp32 main
  parameter Muon steps copies it, optimizer.py:1012-1014), so this runs at tp = 1 too (a
  one-tensor all-gather and a copy); a matrix TP does not split at all (the router) takes the
  fallback, W = L (:317-319). Blockwise passes no partition_dim (emerging_optimizers.py
  :403): W = L, no gather; distributed keeps the shards (:334-341): W = L, no gather, and its
  Gram matrix is over the side TP does not split (transpose from partition_dim);
- `newton_schulz` (:199-274) normalises into a new fp32 tensor (4 W, :213-222) and, at
  --muon-fp32-matmul-prec medium (the default), casts it to bf16 (2 W, :262) while it is still
  held; each iteration (`newton_schulz_step`, :370-375) makes A = X X^T and B (s x s each, s
  the Gram side: min(rows, cols) but under the distributed mode) and a new X, while the old one
  is held; the cast back to fp32 (:269) holds both again. At high and highest the iterations run
  in fp32 and nothing is cast;
- the spectral scale `orth_grad * scale_factor * extra_scale_factor` (emerging_optimizers.py:237)
  makes two more tensors of the rank's shard (4 L each) beside the whole fp32 result (4 W), after
  the gathered ones are freed.

So a matrix's peak (`matrix_peak`), with G = 8 E where gathered: medium max(G + 6 W, G + 4 W +
4 s^2, 4 W + 8 L) (max(14 E, 12 E + 4 s^2) duplicated, 12 L blockwise); high and highest
max(G + 8 W + 8 s^2, 4 W + 8 L). With --muon-split-qkv an attention's QKV momentum is split
into Q (and its gate), K and V (emerging_optimizers.py:407-437): `reshape` copies each part of the
strided view (4 L of QKV, made first), each part's result is held while the next is
orthogonalised, and `torch.cat` joins them (4 L more) (`qkv_peak`). The stage's peak is its
largest matrix's (`working_set`). Nesterov momentum (--muon-nesterov, off by default:
OptimizerConfig.muon_nesterov, which Megatron hands the optimizer as `nesterov` by its name,
emerging_optimizers.py:533-559) orthogonalises `grad.lerp(exp_avg, momentum)`, a new fp32 tensor
of the parameter's shard (orthogonalized_optimizer.py:197; plain momentum passes the state
itself), held until the update: 4 L more through the matrix's peak (`nesterov_bytes`), of the
whole QKV shard where Q, K and V are split after it.
"""

from __future__ import annotations

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.job_memo import JobMemo
from planner.model.muon_time import Matrix, matrices, splits_qkv
from planner.model.schedule import Chunks

FP32, BF16 = 4.0, 2.0


def matrix_peak(job: Job, m: Matrix, gram: float, gathered: bool) -> float:
    """Bytes one matrix's orthogonalisation holds at its peak (module docstring): `m` as
    `muon_time.matrices` gives it, `gram` the distributed mode's Gram side, `gathered` whether
    the duplicated mode gathers it (TP splits it)."""
    rows, cols, r, c, _ = m
    local = r * c
    if job.muon_tp_mode == "duplicated" and gathered:
        work, held, side = rows * cols, 2 * FP32 * rows * cols, min(rows, cols)
    elif job.muon_tp_mode == "distributed" and gathered:
        work, held, side = local, 0.0, gram
    else:  # blockwise, or a matrix TP does not split
        work, held, side = local, 0.0, min(r, c)
    tail = FP32 * work + 2 * FP32 * local  # the whole result and the two scaled shards
    if job.muon_matmul_precision == "medium":
        cast = held + (FP32 + BF16) * work  # the normalised fp32 X and its bf16 cast
        step = held + 2 * BF16 * work + 2 * BF16 * side**2  # X, the new X, A and B
        return max(cast, step, tail)
    return max(held + 2 * FP32 * work + 2 * FP32 * side**2, tail)


def _sides(whole: Matrix, probe: Matrix) -> tuple[float, bool]:
    """(the Gram side under the distributed mode, whether TP splits the matrix): `probe` is the
    matrix at tp 2, whose smaller side is the one TP splits (`matrices` gives (K, N), the input
    and output widths: column-parallel weights split N, partition_dim 0, and the distributed
    mode's Gram matrix is then K x K; row-parallel ones split K, and it is N x N)."""
    rows, cols = whole[0], whole[1]
    if probe[2] < rows:
        return cols, True
    if probe[3] < cols:
        return rows, True
    return min(rows, cols), False


def qkv_peak(job: Job, parts: list[tuple[Matrix, Matrix]]) -> float:
    """The split QKV's peak (module docstring): `parts` (matrix, probe) in the order Megatron
    splits them (Q, its gate, K, V)."""
    total = sum(m[2] * m[3] for m, _ in parts)
    held, peak = FP32 * total, 2 * FP32 * total  # the parts' copies; with the joined result
    for m, probe in parts:
        gram, gathered = _sides(m, probe)
        peak = max(peak, held + matrix_peak(job, m, gram, gathered))
        held += FP32 * m[2] * m[3]  # its result, held until the concatenation
    return peak


def nesterov_bytes(job: Job, local: float) -> float:
    """Nesterov momentum's copy of a parameter's momentum shard of `local` elements (module
    docstring), held through its orthogonalisation; 0 with plain momentum."""
    return FP32 * local if job.muon_nesterov else 0.0


def _kind_peak(job: Job, layout: Layout, kind: LayerKind) -> float:
    arch, lay, split = job.arch, layout, job.muon_split_qkv
    dense, expert = matrices(arch, kind, lay.ep, lay.tp, lay.expert_tp, split)
    probe_d, probe_e = matrices(arch, kind, lay.ep, max(lay.tp, 2), max(lay.expert_tp, 2), split)
    pairs = list(zip(dense, probe_d, strict=True)) + list(zip(expert, probe_e, strict=True))
    peak = 0.0
    if kind.mixer == "attention" and splits_qkv(arch, split):
        (q, q_probe), (kv, kv_probe) = pairs[0], pairs[1]
        parts = [(q, q_probe)] * int(q[4]) + [(kv, kv_probe)] * 2
        whole = sum(m[2] * m[3] for m, _ in parts)  # the QKV parameter's shard
        peak = qkv_peak(job, parts) + nesterov_bytes(job, whole)
        pairs = pairs[2:]
    for m, probe in pairs:
        peak = max(peak, matrix_peak(job, m, *_sides(m, probe)) + nesterov_bytes(job, m[2] * m[3]))
    return peak


_PEAKS: JobMemo[tuple[object, ...], float] = JobMemo()
"""`_kind_peak` per job, TP, expert TP, EP and layer kind."""


def working_set(job: Job, layout: Layout, chunks: Chunks) -> float:
    """Bytes Muon's orthogonalisation holds at its peak on a GPU whose decoder layers are
    `chunks`: its largest matrix's (module docstring); 0 unless the job trains with Muon."""
    if job.optimizer != "muon" or job.frozen_model or job.framework != "megatron":
        return 0.0
    memo = _PEAKS.of(job)
    peak = 0.0
    for kind, n in zip(job.arch.kinds, job.arch.kind_counts(chunks), strict=True):
        if not n:
            continue
        key = (layout.tp, layout.expert_tp, layout.ep, kind)
        if key not in memo:
            memo[key] = _kind_peak(job, layout, kind)
        peak = max(peak, memo[key])
    return peak
