"""What a multi-token-prediction (MTP) depth keeps for one micro-batch besides its transformer
layer (Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py): its norms'
and projection's activations on the stage that holds the MTP layers, and its loss's saved
softmax on the loss stage (`planner.model.stage_activations` adds them).

The loss stage computes every depth's logits and loss (gpt_model.py:728-746, process_mtp_loss
:932-1052), also where the MTP layers sit on an earlier stage (Megatron's `mtp_standalone`,
pipeline_parallel_layer_layout.py:138-151). There the MTP stage sends [main, depth 1..D]
hidden states concatenated (multi_token_prediction.py:2139, (1 + D) x s x h) and frees its
output (Megatron deallocates pipeline outputs), and the loss stage keeps the received tensor
for its output layer's weight gradient: each depth's final-norm output moves from the MTP
stage's count to the loss stage's."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import fp32
from planner.model.shard import FP32, Shard


def mtp_extra_bytes(arch: ModelArch, sh: Shard) -> float:
    """What an MTP layer keeps besides its transformer layer (multi_token_prediction.py): the
    inputs of enorm and hnorm (2h each), their concatenated outputs that eh_proj keeps (4h),
    and its final norm's input and output (4h): 12 bytes per hidden element (24 in fp32
    training: six values, `fp32.word`)."""
    return 6 * _hidden_value(arch, sh)


def _hidden_value(arch: ModelArch, sh: Shard) -> float:
    """One hidden-state value per token (2 bytes, 4 in fp32 training), over TP with sequence
    parallelism: an MTP depth's final-norm output, its output layer's saved input."""
    nbytes = fp32.word(sh) * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def saved_loss_bytes(vocab: int, sh: Shard) -> float:
    """What a cross entropy's forward leaves until its backward: the fp32 softmax of the local
    logits (4 bytes each)."""
    return FP32 * sh.tokens * vocab / sh.tp


def _standalone(job: Job, layout: Layout) -> bool:
    """The MTP layers sit on a rank other than the loss stage's (`mtp_standalone`)."""
    arch = job.arch
    mtp = layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    return mtp is not None and mtp != layout.output_rank


def mtp_kept(job: Job, layout: Layout, sh: Shard, last: bool) -> float:
    """What the MTP layers' rank (`last`: also the loss stage) keeps per micro-batch besides
    their transformer layers: each depth's `mtp_extra_bytes`, less its final-norm output where
    that is sent on to the loss stage (`_standalone`)."""
    arch = job.arch
    sent = 0.0 if last or not _standalone(job, layout) else _hidden_value(arch, sh)
    return arch.mtp_num_layers * (mtp_extra_bytes(arch, sh) - sent)


def mtp_loss_kept(job: Job, layout: Layout, sh: Shard) -> float:
    """What the loss stage keeps per micro-batch for the MTP depths' losses: each depth's saved
    softmax, and where the MTP layers ran on another stage each depth's received hidden state
    (its output layer's saved input)."""
    arch = job.arch
    if not arch.mtp_num_layers:
        return 0.0
    received = _hidden_value(arch, sh) if _standalone(job, layout) else 0.0
    return arch.mtp_num_layers * (saved_loss_bytes(arch.padded_vocab(layout.tp), sh) + received)
