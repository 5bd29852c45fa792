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
the "mlp" projector, the language model's MLP module from the vision width to the language width
(pretrain_vlm.py:185, :198: a copy of the language config and of its MLP submodules), so fc1 is
twice as wide under a gated linear unit (mlp.py:205-206: 3 h F weights for SwiGLU, 2 h F
otherwise, `params.dense_mlp_params`), tensor-parallel, and its fc1 carries the norm Transformer
Engine fuses into it (gpt_layer_specs.py:542-543), whole on every rank. The encoder's layers
run the language model's recompute: full recompute's method and N per the encoder's block
(`stack_kept`). `Job.vision_encoder` = (layers, tokens per image,
patch size p); the language model's sequence (the text and the image embeddings) is the plan's
seq_length. One image per sample (the mock and LLaVA-pretraining datasets).
"""

from __future__ import annotations

import math
from dataclasses import replace

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import params
from planner.model.shard import Shard

PATCH_CHANNELS = 3
"""Input channels of the patch convolution (RGB)."""


def encoder_params(job: Job, tp: int) -> float:
    """Parameters of the vision encoder and projector on one GPU of the first pipeline rank (0
    without one): the layers and projector split over tp, the patch convolution, position
    embeddings, class token and the projector's fused norm whole."""
    if job.vision_encoder is None:
        return 0.0
    layers, tokens, patch = job.vision_encoder
    arch = job.arch
    h = arch.hidden_size
    split = layers * sum(params.kind_params(arch, False)) + params.dense_mlp_params(arch)
    whole = PATCH_CHANNELS * patch**2 * h + tokens * h + h + params.final_norm_params(arch)
    return split / tp + whole


def encoder_shard(job: Job, sh: Shard) -> Shard:
    """The vision encoder's split of one micro-batch: tokens per image x images, no sequence or
    context parallelism."""
    assert job.vision_encoder is not None
    tokens = job.vision_encoder[1]
    return replace(
        sh, tokens=tokens * sh.micro_batch_size, seq_per_cp_rank=tokens, sequence_parallel=False
    )


def recomputed_layers(lay: Layout, layers: int) -> int:
    """How many of an encoder block's `layers` rerun their forward in the backward: under block
    full recompute its first recompute_num_layers (Megatron-LM d98e8a64 recompute.py:167-181,
    counting the block's own layers, transformer_block.py:334); every one under uniform full,
    selective or per-op recompute; none without."""
    if lay.recompute == "none":
        return 0
    if lay.recompute == "full" and lay.recompute_method == "block":
        return min(lay.recompute_num_layers, layers)
    return layers


def stack_kept(lay: Layout, layers: int, kept: float, whole: float) -> float:
    """Bytes a block of `layers` like layers keeps for one micro-batch (`stage_activations.
    chunk_kept`'s rule for one chunk of one kind): `kept` each (a layer input under full
    recompute) but, under full recompute, uniform with N: one input per group of N
    (ceil(layers / N)); block N: the first N inputs and `whole` (a layer run without recompute)
    for each of the rest."""
    if lay.recompute != "full":
        return layers * kept
    n = lay.recompute_num_layers
    if lay.recompute_method == "uniform":
        return math.ceil(layers / n) * kept
    ran = recomputed_layers(lay, layers)
    return ran * kept + (layers - ran) * whole


def encoder_bytes(job: Job, sh: Shard, lay: Layout) -> float:
    """Activation bytes the vision encoder and projector keep for one micro-batch (0 without
    one): its layers' as dense transformer layers of the language model's shape at the
    encoder's split under the layout's recompute (`stack_kept`; pretrain_vlm.py:171 copies the
    language model's config, recompute included), the projector's as an MLP's."""
    if job.vision_encoder is None:
        return 0.0
    vsh = encoder_shard(job, sh)
    arch = job.arch
    kept, whole = act.layer_bytes(arch, False, vsh), act.layer_bytes(arch, False, vsh, False)
    layers = stack_kept(lay, job.vision_encoder[0], kept, whole)
    return layers + act.mlp_bytes(arch, arch.ffn_hidden_size, vsh)
