"""Seconds of the output layer and the loss per micro-batch (`output_layer_time`): the logits GEMM
(bf16, or FP8 with `Job.fp8_output_proj`) forward and backward, the cross entropy's HBM traffic
over the local logits (`loss_bytes_per_logit`: Megatron's unfused loss counted, the fused kernels
at the fitted `layer_time.ELEMENTWISE_PASSES`), and with logits gathered over TP their
all-gather. `planner.model.stage_time` adds it to the last stage (and to the stage holding the
MTP layers, once per MTP layer), and there each MTP depth's projection (`mtp_projection`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, embedding_grads, layer_time
from planner.model.fp32 import gemm_peak, value_bytes
from planner.model.gemm import Gpu, gemm_time, quant_bytes
from planner.model.linear_time import margin_slowdown

UNFUSED_LOSS_BYTES_PER_LOGIT = 52.0
"""HBM bytes per local logit of Megatron-LM's unfused vocab-parallel cross entropy (its default,
without --cross-entropy-loss-fusion; d98e8a64 megatron/core/tensor_parallel/cross_entropy.py),
counted kernel by kernel. Forward: the fp32 upcast of the bf16 logits (read 2, write 4), the max
(read 4), the in-place subtraction of the max (4 + 4), exp (4 + 4), the sum (4) and the in-place
division into the softmax kept for backward (4 + 4): 38. Backward: the in-place product with the
output gradient (4 + 4) and the cast back to bf16 for the output layer (4 + 2): 14. The fused
kernels the other runs use move about half of it (the compiled native one,
fusions/fused_cross_entropy.py: 6 + 8 + 8 forward, 6 backward = 28; Transformer Engine's,
TransformerEngine d0067d0d pytorch/triton/cross_entropy.py: the logits read twice and an fp32
gradient written, 8, then scaled in place, 8, and cast, 6 = 22), which the fitted
`layer_time.ELEMENTWISE_PASSES` x 4 bytes (23.3) stands for."""


def loss_bytes_per_logit(job: Job) -> float:
    """HBM bytes per logit of the job's cross entropy (fwd + bwd): UNFUSED_LOSS_BYTES_PER_LOGIT
    for Megatron's unfused vocab-parallel loss (`Job.loss_fusion` False), else ELEMENTWISE_PASSES
    fp32 passes."""
    if job.megatron_loss == "unfused":
        return UNFUSED_LOSS_BYTES_PER_LOGIT
    return layer_time.ELEMENTWISE_PASSES * 4  # read at call time: a refit reaches it


def output_layer_time(job: Job, lay: Layout, gpu: Gpu) -> float:
    """Seconds per micro-batch of the output layer and loss (fwd + bwd): on the last stage, and
    once more for each MTP layer on the stage that holds them. In bf16, or with
    `Job.fp8_output_proj` at the job's FP8 rate plus the MXFP8 quantisation of its input and
    output gradient (its weight's, once per step, is left out: h x V elements, under a
    millisecond)."""
    t = float(lay.micro_batch_size * job.seq_length // lay.cp)
    vocab = job.arch.padded_vocab(lay.tp) / lay.tp
    h = job.arch.hidden_size
    fp8 = job.output_layer_in_fp8
    fwd = logits_gemm(job, lay, gpu)
    quant = 0.0
    if fp8:  # the input forward, the logits' gradient backward
        per_element = quant_bytes(job.fp8_recipe, job.cluster.gpu.is_blackwell)
        quant = per_element * t * (h + vocab) / gpu.hbm
    gathered = job.cross_entropy == "gathered"
    loss_vocab = vocab * lay.tp if gathered else vocab
    ce = loss_bytes_per_logit(job) * t * loss_vocab / gpu.hbm  # the logits through the loss
    gather = 0.0
    if gathered and lay.tp > 1:
        # logits all-gathered forward, their gradient sliced backward
        word = value_bytes(job)  # the logits' dtype: fp32 in fp32 training
        gather = comms.all_gather(t * vocab * lay.tp * word, comms.place(job.cluster, 1, lay.tp))
    return (2 if job.frozen_model else 3) * fwd + ce + gather + quant


def deferred_wgrad(job: Job, lay: Layout, gpu: Gpu, m: int, calls_per_micro_batch: int) -> float:
    """Seconds per step of the output layer's weight-gradient GEMMs that Megatron's
    --defer-embedding-wgrad-compute moves from the last stage's backwards to the flush
    (`Layout.defer_embedding_wgrad_compute`): one `logits_gemm` (the wgrad has the forward's
    three dimensions) per deferred call of the step (`Layout.deferred_wgrad_calls`),
    `calls_per_micro_batch` per micro-batch (the output
    layer, and each MTP depth's logits on that stage: tensor_parallel/layers.py d98e8a64 defers
    per call of the output layer's linear). None with the model's weights frozen (no wgrad)."""
    deferred = lay.deferred_wgrad_calls(m * calls_per_micro_batch)
    if not deferred or job.frozen_model:
        return 0.0
    return deferred * logits_gemm(job, lay, gpu)


def logits_gemm(job: Job, lay: Layout, gpu: Gpu) -> float:
    """Seconds of one logits GEMM of the output layer per micro-batch (t local tokens x h x the
    TP shard of the padded vocabulary), at the bf16 rate (with fp32 parameters the TF32 one,
    `fp32.gemm_peak`) or, with `Job.output_layer_in_fp8`, the job's FP8 rate: the
    forward, and each of the backward's dgrad and wgrad."""
    t = float(lay.micro_batch_size * job.seq_length // lay.cp)
    vocab = job.arch.padded_vocab(lay.tp) / lay.tp
    fp8 = job.output_layer_in_fp8
    peak, e = (gpu.peak_linear, gpu.e_linear) if fp8 else (gemm_peak(job, gpu), gpu.e_bf16)
    return gemm_time(t, job.arch.hidden_size, vocab, peak, gpu.ridge, e)


def mtp_projection(job: Job, lay: Layout, gpu: Gpu) -> layer_time.Layer:
    """One MTP depth's projection per micro-batch, as a layer of the MTP rank's mix: Megatron's
    `eh_proj` (multi_token_prediction.py d98e8a64 `_concat_embeddings`), a column-parallel
    linear from the concatenated [embedding, hidden state] (2h) to h, its forward GEMM on the
    TP group's t tokens (M = t, K = 2h, N = h / tp; in the decoder's linear precision, the
    TE linear that it is) and, dgrad and wgrad, twice that backward; with tp > 1 its output is
    all-gathered over the last dimension and, with sequence parallelism, its 2h-wide input is
    gathered (and re-gathered, and its gradient reduce-scattered, backward) and its output's
    sequence scatter gathers the gradient backward; without, its input gradient is all-reduced.
    Every collective counted exposed: the module is one small GEMM with nothing else to hide
    under. Model FLOPs count the projection (`flops.mtp_forward`). The depth's own lookup of
    the word embedding (multi_token_prediction.py:1302) adds its dense backward
    (`embedding_grads.backward_time`)."""
    arch = job.arch
    t = float(lay.micro_batch_size * job.seq_length // lay.cp)
    h, tp = arch.hidden_size, lay.tp
    slower = margin_slowdown(job)
    fwd = slower * gemm_time(t, 2 * h, h / tp, gpu.peak_linear, gpu.ridge, gpu.e_linear)
    bwd = (1 if job.frozen_model else 2) * fwd + embedding_grads.backward_time(job, lay, gpu)
    comm = 0.0
    if tp > 1:
        grp = comms.place(job.cluster, 1, tp)
        wide, narrow = t * 2 * h * value_bytes(job), t * h * value_bytes(job)
        comm = comms.all_gather(narrow, grp)  # the output's gather over the last dimension
        if lay.sequence_parallel:  # input gather, its re-gather and gradient reduce-scatter
            comm += 2 * comms.all_gather(wide, grp) + comms.reduce_scatter(wide, grp)
            comm += comms.all_gather(narrow, grp)  # the sequence scatter's backward
        else:
            comm += comms.all_reduce(wide, grp)
    return layer_time.Layer(fwd=fwd, bwd=bwd, tp=comm, tp_traffic=comm, tp_plain=comm)
