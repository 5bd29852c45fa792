"""What a multi-token-prediction (MTP) depth keeps for one micro-batch besides its transformer
layer (Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py): its norms'
and projection's activations and its loss's saved softmax; the stage that holds the MTP layers
adds them (`planner.model.stage_activations`)."""

from __future__ import annotations

from planner.inputs.arch import ModelArch
from planner.model import fp32
from planner.model.shard import FP32, Shard


def mtp_extra_bytes(arch: ModelArch, sh: Shard) -> float:
    """What an MTP layer keeps besides its transformer layer (multi_token_prediction.py): the
    inputs of enorm and hnorm (2h each), their concatenated outputs that eh_proj keeps (4h),
    and its final norm's input and output (4h): 12 bytes per hidden element (24 in fp32
    training: six values, `fp32.word`)."""
    nbytes = 6 * fp32.word(sh) * sh.tokens * arch.hidden_size
    return nbytes / sh.tp if sh.sequence_parallel else nbytes


def saved_loss_bytes(vocab: int, sh: Shard) -> float:
    """What a cross entropy's forward leaves until its backward: the fp32 softmax of the local
    logits (4 bytes each)."""
    return FP32 * sh.tokens * vocab / sh.tp
