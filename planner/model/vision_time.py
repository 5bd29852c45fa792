"""The vision encoder's time in Megatron-LM's LLaVA (`pretrain_vlm.py`): on the first pipeline
rank, each micro-batch runs the encoder's layers over the images' patch tokens before the language
model's first layer, and their backward after its last (`planner.model.vision` gives its shape:
a copy of the language model's layer configuration, tensor-parallel like it, without sequence or
context parallelism). Each encoder layer is timed as a dense layer of the language model's shape
over tokens per image x micro-batch tokens (`planner.model.layer_time`), floored by its host issue
(`planner.model.host_floor`), with the layout's recompute: each layer's rerun only in the layers
that recompute reruns (`vision.recomputed_layers`: under block full recompute the encoder
block's first N, Megatron-LM d98e8a64 recompute.py:167-181; pretrain_vlm.py:171 and
pretrain_t5.py:94-95 copy the language model's config, recompute included).

Not counted: the projector MLP and the patch convolution (two GEMMs and one of a layer's
~20, under a layer's time), and the encoder attention's lack of a causal mask (it attends to every
patch: the layer time's causal attention is half its work, a few percent of a layer at 577 tokens).
Nor is --freeze-ViT read (a frozen encoder would run no backward).

A T5 encoder (`planner.model.t5`) takes the same place: its layers over the encoder's tokens, before
the decoder's first layer, on the one pipeline rank T5 runs on."""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import t5
from planner.model.gemm import Gpu
from planner.model.host_floor import issued_layer
from planner.model.layer_time import layer_time
from planner.model.vision import recomputed_layers


@dataclass(frozen=True)
class EncoderTime:
    """Seconds per micro-batch of the vision encoder's layers on the first pipeline rank."""

    fwd: float = 0.0
    bwd: float = 0.0
    """The backward with the layers' recompute."""
    tp: float = 0.0
    """Their TP traffic as the layers' time shows it (`Layer.tp`)."""


def block_of(lay: Layout) -> int | None:
    """Block full recompute's N (recompute_num_layers), which `encoder_time` needs beside a
    layer key that fixes the recompute method (`stage_time._layer_key`); None otherwise."""
    block = lay.recompute == "full" and lay.recompute_method == "block"
    return lay.recompute_num_layers if block else None


def encoder_time(job: Job, lay: Layout, gpu: Gpu, block: int | None = None) -> EncoderTime:
    """The vision encoder's `EncoderTime`, or a T5 encoder's (`planner.model.t5`); zero without
    one. `block`: block full recompute's N where `lay` does not say it (`block_of`); None:
    `lay`'s own recompute method and N."""
    if block is not None:
        lay = lay.with_(recompute_method="block", recompute_num_layers=block)
    if job.t5_encoder is not None:
        return _stack(t5.encoder_job(job), lay, gpu, job.t5_encoder[0])
    if job.vision_encoder is None:
        return EncoderTime()
    layers, tokens, _ = job.vision_encoder
    vjob = replace(job, seq_length=tokens, vision_encoder=None)
    return _stack(vjob, lay.with_(cp=1, sequence_parallel=False), gpu, layers)


def _stack(job: Job, lay: Layout, gpu: Gpu, layers: int) -> EncoderTime:
    """`layers` dense layers of `job` (the encoder's tokens as its sequence) on `lay`, each
    floored by its host issue; the rerun in those recompute reruns (`vision.recomputed_layers`)."""
    one = issued_layer(layer_time(job, lay, gpu, DENSE), job, lay, DENSE)
    rerun = recomputed_layers(lay, layers) * one.recompute
    return EncoderTime(layers * one.fwd, layers * one.bwd + rerun, layers * one.tp)
