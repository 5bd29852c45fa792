"""The vision encoder and projector of Megatron-LM's LLaVA (`pretrain_vlm.py`, Megatron-LM
d98e8a64), on the first pipeline rank (the one that embeds): parameters and one micro-batch's
activations (their time: `planner.model.vision_time`).

pretrain_vlm.py builds the vision transformer as a copy of the language model's configuration
(`vision_transformer_config = deepcopy(language_transformer_config)`) with --encoder-num-layers
layers (default --num-layers, arguments.py), tensor-parallel like the language model but without
sequence or context parallelism (it turns both off), over the image's patch tokens: (img_h / p) x
(img_w / p) plus one class token (CLIPViTModel; the class token is dropped from the output with
--disable-vision-class-token, not from the encoder). Around its layers: the patch convolution
(3 p^2 h), learned position embeddings (tokens x h) and the class token (h), replicated; after it
the "mlp" projector, the language model's MLP shape from the vision width to the language width
(h F + F h with biases), tensor-parallel. `Job.vision_encoder` = (layers, tokens per image,
patch size p); the language model's sequence (the text and the image embeddings) is the plan's
seq_length. One image per sample (the mock and LLaVA-pretraining datasets).
"""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import params
from planner.model.shard import Shard

PATCH_CHANNELS = 3
"""Input channels of the patch convolution (RGB)."""


def encoder_params(job: Job, tp: int) -> float:
    """Parameters of the vision encoder and projector on one GPU of the first pipeline rank (0
    without one): the layers and projector split over tp, the patch convolution, position
    embeddings and class token whole."""
    if job.vision_encoder is None:
        return 0.0
    layers, tokens, patch = job.vision_encoder
    arch = job.arch
    h, F = arch.hidden_size, arch.ffn_hidden_size
    split = layers * sum(params.kind_params(arch, False)) + 2 * h * F + F + h
    whole = PATCH_CHANNELS * patch**2 * h + tokens * h + h
    return split / tp + whole


def encoder_shard(job: Job, sh: Shard) -> Shard:
    """The vision encoder's split of one micro-batch: tokens per image x images, no sequence or
    context parallelism."""
    assert job.vision_encoder is not None
    tokens = job.vision_encoder[1]
    return replace(
        sh, tokens=tokens * sh.micro_batch_size, seq_per_cp_rank=tokens, sequence_parallel=False
    )


def encoder_bytes(job: Job, sh: Shard) -> float:
    """Activation bytes the vision encoder and projector keep for one micro-batch (0 without
    one): each layer's as a dense transformer layer of the language model's shape at the
    encoder's split, the projector's as an MLP's."""
    if job.vision_encoder is None:
        return 0.0
    vsh = encoder_shard(job, sh)
    arch = job.arch
    layers = job.vision_encoder[0] * act.layer_bytes(arch, False, vsh)
    return layers + act.mlp_bytes(arch, arch.ffn_hidden_size, vsh)
