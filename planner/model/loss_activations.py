"""The last pipeline stage's loss, in bytes on one GPU for the micro-batch at the loss: the final
norm's input and output (the output layer's input) and the cross entropy's peak over the logits,
per logit as each training code's loss kernel holds them (Megatron's vocab-parallel fused loss,
torch's cross_entropy, logits gathered over TP), what stays alive after it, and what Megatron's
deferred output-layer weight gradients hold until the pipeline flush (`deferred_wgrad_bytes`)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model import fp32
from planner.model.fp32 import norm_in, word
from planner.model.shard import FP32, Shard

GATHERED_LOSS_BYTES_PER_LOGIT = 24
"""Bytes per logit when the cross entropy runs on logits gathered over TP (no vocab-parallel
loss), at the peak of its backward pass: the gathered bf16 logits (2), their fp32 upcast (4), the
saved fp32 log-softmax (4), its fp32 gradient (4), the bf16 gradient (2), and the temporaries of
an unfused softmax. Fitted (range 16-32) by benchmarks/fit_memory.py on the Hagemann et al.
layouts, whose training code computes the loss this way (`cross_entropy = "gathered"`)."""

PYTORCH_LOSS_BYTES_PER_LOGIT = 12
"""Bytes per logit at the backward peak of torch's cross_entropy on the fp32 upcast of a rank's
logits (`cross_entropy = "pytorch"`: torchtitan, and its loss_parallel under TP), by hand from
autograd: forward keeps only the log-softmax output (4; the upcast input is freed, and the bf16
logits are freed before backward); backward adds the nll gradient (4) and the log-softmax input
gradient (4) before the first is released. Megatron's fused kernel keeps 2 + 4. At tp > 1 see
LOSS_PARALLEL_BYTES_PER_LOGIT."""

COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT = 6
"""The same loss at tp 1 under torch.compile's inductor (`[torchtitan] compile_loss`: e347b1e5
components/loss.py:20-35, b5bcd76c loss.py:32-62, :245-252; not measured), bounded by what its
graphs must hold. The bf16 logits (2) exist anyway, lm_head's output, as the graph's input. The
forward fuses the upcast, the log-softmax's row max and sum of exponentials and the label's gather
into reductions: no fp32 [T, V] tensor is needed there, only per-row values. What it saves for
the backward is the min-cut partitioner's choice (torch/_functorch/partitioners.py: the reductions'
row outputs are saved, the pointwise ops may be recomputed): the bf16 input (2, then alive until
the backward, as the eager loss's is not: e347b1e5 train.py:540-541 `del pred`), or an fp32 [T, V]
upcast or log-softmax (4, written while the bf16 logits are alive: 2 + 4 at the forward's end).
The backward is one pointwise kernel, (softmax - one-hot) x grad, over the saved tensor and the
row values, that writes the bf16 logits' gradient (2; the upcast's backward cast fused): the
nll backward's scatter into zeros is lowered to a pointwise select fused into it
(torch/_inductor/config.py optimize_scatter_upon_const_tensor, on by default), so no fp32
gradient is written. Peak: the saved tensor and the bf16 gradient, 2 + 2 if the bf16 input is
saved, 4 + 2 if an fp32 one is; the larger (6) is taken, since which one the partitioner's
weights pick (they favour nodes nearer the backward) is not bounded here. With the scatter pass
off the one-hot is an fp32 [T, V] buffer (4 more), not modelled. At tp > 1 the compiled loss
keeps LOSS_PARALLEL_BYTES_PER_LOGIT (its DTensor loss_parallel, or b5bcd76c's autograd Function
:65-216, under compile is not derived here; compile only fuses, so the eager figure bounds it)."""

LOSS_PARALLEL_BYTES_PER_LOGIT = 16
"""The same loss at tp > 1, where torchtitan runs it under PyTorch's loss_parallel on the
vocab-sharded logits (torch/distributed/tensor/parallel/loss.py, by hand): its backward,
`_nll_loss_and_log_softmax_backward`, computes (zeros_like(x) + exp(x)) x grad_output with x the
saved fp32 log-softmax, so x, the zeroed gradient, their sum and the product are alive at once (4
each; exp(x) is freed before the product: also 16 then); its forward, a decomposed log-softmax,
holds the fp32 input, its shifted copy and exp (12, with the bf16 logits 14)."""

MEGATRON_LOSS_BYTES_PER_LOGIT = 6
"""Bytes per local logit at the peak of Megatron's vocab-parallel cross entropy
(`cross_entropy = "fused"`, `Job.megatron_loss`; Megatron-LM d98e8a64 language_module.py:173-202
picks it). Unfused (megatron/core/tensor_parallel/cross_entropy.py): in the forward the bf16
logits (2) and their fp32 copy (4), which becomes the saved softmax in place; in the backward the
fp32 gradient written over the softmax (4) and its bf16 cast for the output layer (2).
Transformer Engine's (--cross-entropy-loss-fusion with --cross-entropy-fusion-impl te,
language_module.py:174-196): its forward writes the fp32 gradient beside the bf16 logits
(TransformerEngine d0067d0d transformer_engine/pytorch/triton/cross_entropy.py:57-58), 2 + 4.
The native fusion adds COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT."""

COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT = 4
"""Added per local logit by Megatron's --cross-entropy-loss-fusion, native (Megatron-LM d98e8a64
fusions/fused_cross_entropy.py): the unfused steps under `jit_fuser` = torch.compile (jit.py),
whose graphs write each in-place update of the fp32 logits to a new fp32 tensor while the input is
held. Check (103.3 M local logits, 0.385 GiB at 4 bytes): the functional tests
gpt3_mcore_te_tp2_pp2_resume_torch_dist_cross_entropy_loss_fusion and its twin without the flag,
..._no_create_attention_mask_in_dataloader (which adds --deterministic-mode and leaves the mask
out of the dataloader, neither on the peak), peak 0.33-0.39 GiB apart on A100, GB200 and H100."""

GATHERED_HELD_BYTES_PER_LOGIT = 4
"""Bytes per logit still alive on the last stage after the gathered loss's backward: the current
and the previous micro-batch's bf16 logits, both referenced by the pipeline's two output buffers
(Aleph-Alpha/scaling PipelineScheduleTrain.required_buffer_count = 2 on the last stage; its
PIPELINE_STAGE_OUTPUT is never taken there)."""


def logits_bytes(arch: ModelArch, padded_vocab: int, sh: Shard) -> float:
    """Last stage, for the micro-batch at the loss: the final norm's input and output (the output
    layer's input) and the loss kernel's peak over the local logits (Megatron's
    MEGATRON_LOSS_BYTES_PER_LOGIT; PyTorch's cross entropy PYTORCH_LOSS_BYTES_PER_LOGIT, compiled
    COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT, under TP LOSS_PARALLEL_BYTES_PER_LOGIT; with the
    logits gathered over TP every rank also holds the gathered logits' working set). In fp32
    training (`planner.model.fp32`) the norm's values are 4 bytes and Megatron's loss keeps
    fp32.LOSS_BYTES_PER_LOGIT."""
    T, h = sh.tokens, arch.hidden_size
    norm = norm_in(T, h, sh) + word(sh) * T * h
    norm = norm / sh.tp if sh.sequence_parallel else norm
    local = T * padded_vocab / sh.tp
    if sh.cross_entropy == "gathered":
        return norm + word(sh) * local + GATHERED_LOSS_BYTES_PER_LOGIT * T * padded_vocab
    if sh.cross_entropy == "pytorch":
        per = LOSS_PARALLEL_BYTES_PER_LOGIT if sh.tp > 1 else PYTORCH_LOSS_BYTES_PER_LOGIT
        if sh.compiled_loss and sh.tp == 1:  # inside each chunk too (b5bcd76c loss.py:557)
            per = COMPILED_PYTORCH_LOSS_BYTES_PER_LOGIT
        if sh.loss_chunks > 1:
            return norm + per * local / sh.loss_chunks + chunk_gradient_bytes(T, h)
        return norm + per * local
    extra = COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT if sh.compiled_loss else 0
    fused = fp32.LOSS_BYTES_PER_LOGIT if word(sh) == FP32 else MEGATRON_LOSS_BYTES_PER_LOGIT
    return norm + (fused + extra) * local


def chunk_gradient_bytes(tokens: int, hidden: int) -> float:
    """torchtitan's ChunkedLossWrapper (pytorch/torchtitan b5bcd76c
    torchtitan/components/loss.py:501-720): the decoder's output is split into `loss_chunks`
    chunks of tokens, and each chunk runs the output layer, the loss and its own backward in
    turn, so only one chunk's logits are alive (the same loss kernel on 1 / chunks of the
    tokens: `logits_bytes`); the chunks' input gradients gather in one fp32 [tokens, hidden]
    buffer (GradAccumulator, :383-432, made at :639-643 with dtype float32, over the rank's
    whole tokens: the output layer's input is replicated over TP, :529-531), alive until the
    decoder's backward starts."""
    return FP32 * tokens * hidden


def deferred_wgrad_bytes(arch: ModelArch, padded_vocab: int, sh: Shard, calls: int) -> float:
    """What `calls` output-layer calls whose weight gradient Megatron defers to the pipeline flush
    (--defer-embedding-wgrad-compute) hold on the last stage: each keeps its input, the
    final norm's bf16 output (the sequence-parallel shard with SP: ColumnParallelLinear appends
    `input_parallel`, before its all-gather), in `embedding_activation_buffer`, and its bf16
    gradient of the local logits in `grad_output_buffer`, both freed only by the flush's
    `drain_embedding_wgrad_compute` (Megatron-LM d98e8a64 tensor_parallel/layers.py,
    pipeline_parallel/schedules.py). Check: Megatron-LM's functional test
    gpt3_mcore_te_tp2_pp2_defer_embedding_wgrad_compute (limit 2 of 4 micro-batches of 4 x 1,024
    tokens, vocabulary 50,432 over tp 2, hidden 512) peaks 0.408 GiB above its twin without the
    flag (..._ddp_average_in_collective: 2,340,560,384 against 1,902,255,616 bytes on A100);
    2 x (4,096 x 512 + 4,096 x 25,216) x 2 bytes = 0.393 GiB."""
    T, h = sh.tokens, arch.hidden_size
    inputs = word(sh) * T * h / (sh.tp if sh.sequence_parallel else 1)
    grads = word(sh) * T * padded_vocab / sh.tp
    return calls * (inputs + grads)
