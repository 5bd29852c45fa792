"""torchtitan's validation loop: what one rank holds while it runs (`[torchtitan] validation_batch`,
a TOML's `[validation] enable`).

When it runs (torchtitan e347b1e5): after a training step (train.py:684-689), under
torch.no_grad (validate.py:158-166), while the step's gradients are still held (zero_grad only at
the next step's start, train.py:550) beside the weights and optimizer states: the model states as
the training step leaves them. The validation forward saves nothing for a backward; it runs the
whole validation local batch (validation.local_batch_size x validation.seq_len tokens, defaults
8 x 2048, job_config.py:960-966; split over cp, and over the schedule's micro-batches under
pipelining) through the layers one at a time, then the loss on all its logits at once
(validate.py:250-255: `loss_fn(predictions, labels)`).

`validation_bytes`, beside the states, the larger of
- one layer's forward: the residual stream in and out (2 T h) and the MLP's three [T, f / tp]
  tensors alive at its product (w1's output through silu, w3's, and their product: 3 T f / tp;
  a MoE layer's routed tokens, T x topk, through the expert width: each rank receives as many
  routed copies as it sends, on average, whatever ep), in bf16;
- on the last stage, the final norm's output (T h) and the loss over the local logits,
  VALIDATION_LOSS_BYTES_PER_LOGIT each (eager, tp 1), COMPILED_VALIDATION_LOSS_BYTES_PER_LOGIT
  (the loss compiled), LOSS_PARALLEL_FORWARD_BYTES_PER_LOGIT (loss_parallel at tp > 1), or with
  the logits gathered over TP (disable_loss_parallel) the eager figure on the whole vocabulary.
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.shard import BF16
from planner.model.torch_schedules import schedule_microbatches

VALIDATION_LOSS_BYTES_PER_LOGIT = 10
"""Counted, not fitted: e347b1e5 components/loss.py:20-27 cross_entropy_loss runs
F.cross_entropy(pred.flatten(0, 1).float(), ...) = nll_loss(log_softmax(x)) under no_grad: the
bf16 logits (2, held by validate.py's `predictions`), their fp32 upcast (4) and the fp32
log-softmax (4) alive together."""

COMPILED_VALIDATION_LOSS_BYTES_PER_LOGIT = 2
"""The same loss under torch.compile (compile.components "loss", components/loss.py:33-35), tp 1:
inductor fuses the upcast, the log-softmax's row reductions and the label's gather, so only the
bf16 logits, the graph's input, are [T, V] (as loss_activations.COMPILED_PYTORCH_LOSS_BYTES_PER_
LOGIT's forward; no_grad saves nothing for a backward)."""

LOSS_PARALLEL_FORWARD_BYTES_PER_LOGIT = 14
"""The forward of PyTorch's loss_parallel at tp > 1 on the vocab-sharded logits (torch/distributed/
tensor/parallel/loss.py, by hand, as loss_activations.LOSS_PARALLEL_BYTES_PER_LOGIT's forward):
the bf16 logits (2), the fp32 input, its shifted copy and its exp (4 each)."""


def tokens(job: Job, layout: Layout) -> float:
    """Validation tokens one rank runs through a layer at once: the validation local batch x
    its seq_len over cp, over one pipeline schedule's micro-batches under pipelining (the eval
    runs the training's schedule, validate.py:225-240)."""
    titan = job.titan
    t = titan.validation_batch * titan.validation_seq_len / layout.cp
    if layout.pp > 1:
        t /= schedule_microbatches(job, layout)
    return t


def validation_bytes(job: Job, layout: Layout, last: bool) -> float:
    """Bytes beyond the model states one rank holds at the validation forward's peak (module
    docstring); `last` the rank with the loss. 0 without validation."""
    if job.framework != "torchtitan" or not job.titan.validation_batch:
        return 0.0
    arch, tp = job.arch, layout.tp
    t = tokens(job, layout)
    h = arch.hidden_size
    if arch.num_moe_experts:
        mlp = 3 * t * arch.moe_router_topk * arch.expert_ffn / tp
    else:
        mlp = 3 * t * arch.ffn_hidden_size / tp
    layer = BF16 * (2 * t * h + mlp)
    if not last:
        return layer
    vocab = arch.padded_vocab(tp)
    if job.cross_entropy == "gathered":  # disable_loss_parallel: every rank the whole vocabulary
        loss = VALIDATION_LOSS_BYTES_PER_LOGIT * t * vocab + BF16 * t * vocab / tp
    elif tp > 1:
        loss = LOSS_PARALLEL_FORWARD_BYTES_PER_LOGIT * t * vocab / tp
    elif job.titan.compile_loss:
        loss = COMPILED_VALIDATION_LOSS_BYTES_PER_LOGIT * t * vocab
    else:
        loss = VALIDATION_LOSS_BYTES_PER_LOGIT * t * vocab
    return max(layer, BF16 * t * h + loss)
