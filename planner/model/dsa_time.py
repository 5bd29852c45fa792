"""Seconds of DeepSeek sparse attention's core (the lightning indexer, its top-k, the absorbed
attention and the indexer's loss) for one layer and micro-batch on one GPU, by the kernels that
run (`planner.model.dsa`, whose docstring says what each does). `planner.model.layer_parts` takes
it in place of the flash-attention kernel (`planner.model.attention_time`) for a DSA model's
attention layers; the MLA projections around it (q_up, W_uk and W_uv, which have kv_up's FLOPs,
the output projection) are the layer's linear GEMMs.

No DSA step time or kernel benchmark is in the repository: the rates are the model's own, read
off the code's operations (a prediction, not a calibration).
- The indexer's projections (wq_b, wk, weights_proj) are GEMMs on the whole local sequence on
  every TP rank (under sequence parallelism it gathers its inputs), at the decoder's linear
  rate; with its loss on, their weight gradients once more (their inputs are detached).
- Scoring every key (backend none, and cuDNN past its 1 GiB chunk): an fp32 einsum, which Megatron
  runs on the CUDA cores (it never enables TF32), 2 n_i d_i FLOPs per query-key pair at the FP32
  peak, then NAIVE_INDEX_TRAFFIC bytes per head and pair (the einsum's fp32 output, the ReLU, the
  head weights, the sum). The fused indexers score the causal half (TileLang's 256-key padding)
  on the tensor cores at the large-GEMM rate and write fp32 logits.
- Top-k: TOPK_BYTES per query-key pair of the fp32 logits.
- Backend none's attention is dense: QK^T in fp32 on the CUDA cores over every key (the top-k and
  causal bounds are masks), the value product in bf16 at the large-GEMM rate, and
  DENSE_SOFTMAX_BYTES per score and direction of elementwise traffic; the backward twice the
  forward's matmuls. The fused kernels run the absorbed widths (2 (576 + 512) FLOPs per head and
  key forward) over their key slots (`dsa.key_slots`) and padded heads (cuDNN's by the GPU
  generation, `dsa.cudnn_heads`), at the flash-attention
  kernels' rate for the GPU at that span and head width (`attention_time.fractions`): TileLang's
  backward recomputes its forward and runs 2 (3 x 576 + 2 x 512) per head and key; cuDNN's
  backward 2.5 x its forward, as flash attention's.
- The dense indexer loss recomputes dense fp32 attention scores and the indexer's every-key
  scores forward and again in the backward (2.5 x); the sparse and cuDNN losses work over the
  top k on the tensor cores.
"""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.model import attention_time, dsa
from planner.model.attention_time import Core
from planner.model.gemm import Gpu, fp32_peak, gemm_time

NAIVE_INDEX_TRAFFIC = 24.0
"""HBM bytes per indexer head and query-key pair of the PyTorch scoring's elementwise ops
(dsa.py `_compute_index_scores`): the einsum writes fp32 (4), the ReLU and the head weights each
read and write it (16), the head sum reads it (4)."""
TOPK_BYTES = 12.0
"""HBM bytes per query-key pair of the top-k over fp32 logits (read about three times)."""
DENSE_SOFTMAX_BYTES = 70.0
"""Backend none: HBM bytes per fp32 score and direction of the elementwise ops between the two
matmuls (dsa.py `_unfused_absorbed_dsa_fn`, dsa_masking.masked_softmax): forward, the product's
fp32 output written (4), scaled (8), the index mask added (8), masked (9), the row max, shift,
exponential, sum and division (28), the bf16 copy (6), and the masks' bytes, ~70; the backward's
gradients through the same ops, about as many."""
TILELANG_BWD_Q, TILELANG_BWD_V = 3.0, 2.0
"""TileLang's backward kernel per head and key slot: 2 (3 q_w + 2 v_w) FLOPs
(ops/tilelang_sparse_mla_bwd.py: the scores recomputed, dQ and dK against the query / key width;
dP and dV against the value's), after recomputing its forward."""
FLASH_BWD_RATIO = 2.5
"""A flash-attention backward's matmuls over its forward's (cuDNN's sparse backward)."""


def indexer_time(job: Job, gpu: Gpu, t: float, s: int, tp: int) -> tuple[float, float]:
    """(forward, backward) seconds of the indexer and its top-k for t local queries over s keys a
    sequence: projections, scoring, top-k, and with its loss on its weight gradients and the
    loss (module docstring)."""
    arch = job.arch
    kernels = dsa.backend(job, tp)
    loss = dsa.loss_mode(job, kernels)
    n_i, d_i, topk = dsa.indexer_dims(arch)
    k = min(topk, s)
    h, r_q = arch.hidden_size, arch.q_lora_rank or arch.hidden_size
    proj = sum(
        gemm_time(t, kk, n, gpu.peak_linear, gpu.ridge, gpu.e_linear)
        for kk, n in ((r_q, n_i * d_i), (h, d_i), (h, n_i))
    )
    pairs = t * s
    score_flops = 2.0 * n_i * d_i
    tensor = gpu.peak_bf16 * gpu.e_bf16
    naive = kernels == "none" or (kernels == "cudnn" and 4.0 * pairs > dsa.CUDNN_SCORE_CHUNK)
    if naive:
        score = score_flops * pairs / fp32_peak(job.cluster.gpu, gpu)
        score += NAIVE_INDEX_TRAFFIC * n_i * pairs / gpu.hbm
    else:
        causal = t * (s + 256) / 2.0
        score = score_flops * causal / tensor + 8.0 * causal / gpu.hbm
    fwd = proj + score + TOPK_BYTES * pairs / gpu.hbm
    if loss == "off":
        return fwd, 0.0
    bwd = proj  # the weight gradients
    q_w, _ = dsa.widths(arch)
    heads = arch.num_attention_heads / tp
    if loss == "dense":
        dense = 2.0 * q_w * heads * pairs / fp32_peak(job.cluster.gpu, gpu)
        dense += DENSE_SOFTMAX_BYTES * heads * pairs / gpu.hbm + score
        fwd += dense
        bwd += FLASH_BWD_RATIO * dense
    else:  # the target over the top k, the indexer's gradients over them
        target = 2.0 * 2.0 * q_w * heads * k * t / tensor
        grads = 3.0 * score_flops * k * t / tensor
        if loss == "fused":
            fwd += target + grads  # cuDNN computes the indexer's gradients in the forward
        else:
            fwd += target
            bwd += grads
    return fwd, bwd


def attention_seconds(
    job: Job, gpu: Gpu, t: float, s: int, tp: int, efficiency: float
) -> tuple[float, float]:
    """(forward, backward) seconds of the absorbed attention for t local queries over s keys a
    sequence (module docstring)."""
    arch = job.arch
    kernels = dsa.backend(job, tp)
    q_w, v_w = dsa.widths(arch)
    if kernels == "none":
        heads = arch.num_attention_heads / tp
        scores = t * s * heads
        qk = 2.0 * q_w * scores / fp32_peak(job.cluster.gpu, gpu)
        pv = 2.0 * v_w * scores / (gpu.peak_bf16 * gpu.e_bf16)
        soft = DENSE_SOFTMAX_BYTES * scores / gpu.hbm
        return qk + pv + soft, 2.0 * (qk + pv) + soft
    heads = dsa.local_heads(arch, tp, kernels, job.cluster.gpu.is_blackwell)
    slots = dsa.key_slots(arch, s, kernels)
    fe, be = attention_time.fractions(job, slots, (q_w + v_w) / 2.0, efficiency)
    work = 2.0 * (q_w + v_w) * slots * t * heads
    fwd = work / (gpu.peak_bf16 * fe)
    if kernels == "tilelang":
        kernel = 2.0 * (TILELANG_BWD_Q * q_w + TILELANG_BWD_V * v_w) * slots * t * heads
        return fwd, fwd + kernel / (gpu.peak_bf16 * be)
    return fwd, FLASH_BWD_RATIO * work / (gpu.peak_bf16 * be)


def core_time(job: Job, gpu: Gpu, t: float, s: int, tp: int, efficiency: float) -> Core:
    """The DSA core as `layer_parts` takes an attention kernel's: its forward and backward, the
    indexer's included."""
    i_fwd, i_bwd = indexer_time(job, gpu, t, s, tp)
    a_fwd, a_bwd = attention_seconds(job, gpu, t, s, tp, efficiency)
    return Core(i_fwd + a_fwd, i_bwd + a_bwd, 0.0, False)
