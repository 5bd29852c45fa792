"""The vision encoder's time in Megatron-LM's LLaVA (planner/model/vision_time.py): on the first
pipeline rank, per micro-batch, its layers as dense layers of the language model's shape over the
images' patch tokens (no sequence or context parallelism), floored by their host issue.

Oracle: the layer model at the encoder's shape (`layer_time` of the same job at seq_length = tokens
per image, cp 1, no SP, with its host floor) times the encoder's layers; the step on one stage and
one data-parallel rank grows by exactly that per micro-batch, and by the optimizer's step over the
encoder's parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, host_floor
from planner.model.layer_time import gpu_of, layer_time
from planner.model.vision_time import EncoderTime, encoder_time

# a LLaVA-1.5-like encoder on a small language model: 12 layers over (336 / 14)^2 + 1 = 577
# tokens per image, 14-pixel patches (Megatron-LM's multimodal_llava functional test)
VISION = (12, 577, 14)
LAY = Layout(tp=1, pp=1, dp=1, micro_batch_size=4)


def llava(**kw: object) -> Job:
    return job("llama2-7b", "h100-sxm-80gb", 1, 4096, 8, vision_encoder=VISION, **kw)


def test_no_encoder_no_time() -> None:
    j = job("llama2-7b", "h100-sxm-80gb", 1, 4096, 8)
    assert encoder_time(j, LAY, gpu_of(j)) == EncoderTime()


def test_each_encoder_layer_is_a_dense_layer_over_the_images_tokens() -> None:
    j = llava()
    g = gpu_of(j)
    vj = replace(j, seq_length=577, vision_encoder=None)
    vlay = LAY.with_(cp=1, sequence_parallel=False)
    one = host_floor.issued_layer(layer_time(vj, vlay, g, DENSE), vj, vlay, DENSE)
    got = encoder_time(j, LAY, g)
    assert (got.fwd, got.bwd) == pytest.approx((12 * one.fwd, 12 * (one.bwd + one.recompute)))
    # 4 images x 577 tokens per micro-batch: a quarter of them takes less
    small = encoder_time(j, LAY.with_(micro_batch_size=1), g)
    assert small.fwd < got.fwd


def test_one_stage_pays_it_every_micro_batch() -> None:
    # one stage, one data-parallel rank (no gradient sync to re-window): the step grows by
    # m x (forward + backward + TP) of the encoder, m = 8 / 4 = 2 micro-batches, and by the
    # optimizer's step over the encoder's parameters
    j = llava()
    plain = replace(j, vision_encoder=None)
    vis = encoder_time(j, LAY, gpu_of(j))
    with_it, without = cost.estimate(j, LAY), cost.estimate(plain, LAY)
    extra = with_it.step_time_s - without.step_time_s
    optimizer = with_it.breakdown.optimizer - without.breakdown.optimizer
    assert optimizer > 0
    assert extra == pytest.approx(2 * (vis.fwd + vis.bwd + vis.tp) + optimizer, rel=1e-6)
    assert vis.fwd > 0 and vis.bwd > vis.fwd
