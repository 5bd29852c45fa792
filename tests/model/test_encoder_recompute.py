"""Encoders under the language model's recompute (Megatron-LM d98e8a64): pretrain_t5.py:94-95
and pretrain_vlm.py:171 build the T5 / vision encoder from a copy of the model's config,
recompute included, as a TransformerBlock of its own (transformer_block.py:334: its layer count
is len(self.layers)), so block full recompute checkpoints its first N layers only
(recompute.py:167-181) and leaves the rest whole; the decoder's cross-attention is kept in every
decoder layer past its first N. LLaVA's projector is the language model's MLP (pretrain_vlm.py
:185, :198; mlp.py:205-206 doubles fc1 under a gated linear unit), and its layer flags follow
validate_args (arguments.py:1304-1311) and pretrain_vlm.py:123-126."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_t5 import LINE as T5_LINE

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.hybrid import DENSE
from planner.inputs.plan import Plan, parse_plan
from planner.model import activations as act
from planner.model import host_floor, t5, vision, vision_time
from planner.model.layer_time import gpu_of, layer_time
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.model.stage_time import layout_times

BLOCK = " --recompute-granularity full --recompute-method block --recompute-num-layers 1"
UNIFORM = " --recompute-granularity full --recompute-method uniform --recompute-num-layers 5"


def t5_plan(extra: str) -> Plan:
    return parse_plan(megatron_args.read(T5_LINE + extra, "h100-sxm-80gb", 8, "t5").doc)


def rank0(p: Plan) -> float:
    """Rank 0's activations less the same model's without the encoder: what the encoder and
    the decoder's cross-attention add (pp 1: one micro-batch in flight)."""
    job, lay = p.job, p.require_layout()
    sh = shard(job, lay)
    per, chunks = per_layer(job.arch, sh), lay.chunk_layers(job.arch.num_layers)[0]
    bare = replace(job, t5_encoder=None)
    return stage_activations(job, lay, 0, chunks, sh, per) - stage_activations(
        bare, lay, 0, chunks, sh, per
    )


def test_t5_block_recompute_keeps_all_but_the_first_encoder_layers_whole() -> None:
    p = t5_plan(BLOCK)
    job, lay = p.job, p.require_layout()
    sh = shard(job, lay)
    esh = replace(sh, tokens=4 * 512, seq_per_cp_rank=512)
    # b 4 x Te 512 tokens x h 768 x 2 bytes (tp 1): a layer's input, and the encoder's output
    # the decoder's K/V projections read
    one = 2 * 4 * 512 * 768
    assert act.layer_bytes(job.arch, DENSE, esh) == one == 3_145_728
    whole = act.layer_bytes(job.arch, DENSE, esh, recompute=False)
    assert whole > 10 * one
    # block N = 1 over the encoder's 12 layers: 1 input + 11 whole layers + the output; the
    # decoder's 12 layers: cross-attention kept in the 11 past the first
    assert t5.encoder_bytes(job, sh, lay) == pytest.approx(one + 11 * whole + one)
    assert t5.cross_kept(job, sh, lay) == pytest.approx(11 * t5.cross_bytes(job, sh))
    assert rank0(p) == pytest.approx(one + 11 * whole + one + 11 * t5.cross_bytes(job, sh))


def test_t5_uniform_recompute_keeps_one_input_per_group() -> None:
    p = t5_plan(UNIFORM)
    one = 2 * 4 * 512 * 768
    # uniform N = 5 over 12 layers: groups 0-4, 5-9, 10-11 keep their inputs (ceil(12 / 5)),
    # no cross-attention kept
    assert rank0(p) == pytest.approx(3 * one + one)


def test_t5_encoder_time_reruns_only_the_first_n_layers() -> None:
    p = t5_plan(BLOCK)
    job, lay = p.job, p.require_layout()
    g = gpu_of(job)
    ej = t5.encoder_job(job)
    one = host_floor.issued_layer(layer_time(ej, lay, g, DENSE), ej, lay, DENSE)
    assert one.recompute > 0
    got = vision_time.encoder_time(job, lay, g)
    # 12 backward passes, 1 rerun (block N = 1)
    assert got.bwd == pytest.approx(12 * one.bwd + one.recompute)
    # a layer key that fixes the method to uniform (stage_time._layer_key) and N beside it
    key = lay.with_(recompute_method="uniform", recompute_num_layers=1)
    assert vision_time.encoder_time(job, key, g, vision_time.block_of(lay)) == got
    every = vision_time.encoder_time(job, key, g)
    assert every.bwd == pytest.approx(12 * (one.bwd + one.recompute))
    # and the estimate's own layout times carry it (stage_time keys the encoder on N too): the
    # encoder's backward there is the first N layers' rerun (plus the lookup's backward, which
    # does not depend on N), at N = 1 eleven reruns fewer than at N = 12
    n12 = lay.with_(recompute_num_layers=12)
    diff = layout_times(job, n12).encoder.bwd - layout_times(job, lay).encoder.bwd
    assert diff == pytest.approx(11 * one.recompute)


LLAVA = (
    "--hidden-size 624 --ffn-hidden-size 1664 --num-attention-heads 12 --swiglu "
    "--normalization RMSNorm --disable-bias-linear --seq-length 1024 "
    "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --bf16 "
    "--tokenizer-type NullTokenizer --vocab-size 8193 --img-h 336 --img-w 336 --patch-dim 14"
)


def llava(extra: str) -> Plan:
    return parse_plan(megatron_args.read(LLAVA + extra, "h100-sxm-80gb", 8, "llava").doc)


def test_the_swiglu_projector_has_fc1s_gated_half() -> None:
    job = llava(" --num-layers 12").job
    h, f = 624, 1664
    # a layer (RMSNorm, no biases): QKV h x 3h, projection h^2, SwiGLU MLP 3hF, two norms 2h
    layer = h * 3 * h + h * h + 3 * h * f + 2 * h  # 4,673,760
    projector = 3 * h * f  # fc1 h -> 2F (gate and up), fc2 F -> h: 3,115,008
    fused_norm = h  # fc1's RMSNorm (TELayerNormColumnParallelLinear), whole
    whole = 3 * 14**2 * h + 577 * h + h + fused_norm  # patch conv, positions, class token
    assert vision.encoder_params(job, 1) == 12 * layer + projector + whole == 59_928_336
    assert vision.encoder_params(job, 2) == pytest.approx((12 * layer + projector) / 2 + whole)


def test_llava_vision_block_recompute() -> None:
    p = llava(" --num-layers 12" + BLOCK)
    job, lay = p.job, p.require_layout()
    sh = shard(job, lay)
    vsh = vision.encoder_shard(job, sh)
    one = 2 * 4 * 577 * 624  # b 4 images x 577 tokens x h, bf16, tp 1
    assert act.layer_bytes(job.arch, False, vsh) == one
    whole = act.layer_bytes(job.arch, False, vsh, recompute=False)
    mlp = act.mlp_bytes(job.arch, 1664, vsh)
    assert vision.encoder_bytes(job, sh, lay) == pytest.approx(one + 11 * whole + mlp)


def test_llava_layer_flags_follow_validate_args() -> None:
    with pytest.raises(InputError, match="cannot be given with --num-layers"):
        llava(" --num-layers 12 --encoder-num-layers 8")
    # --encoder-num-layers sizes the ViT (and num_layers), --decoder-num-layers the language model
    job = llava(" --encoder-num-layers 8 --decoder-num-layers 12").job
    assert job.arch.num_layers == 12 and job.vision_encoder == (8, 577, 14)
    job = llava(" --encoder-num-layers 8").job
    assert job.arch.num_layers == 8 and job.vision_encoder == (8, 577, 14)
    job = llava(" --num-layers 12").job
    assert job.arch.num_layers == 12 and job.vision_encoder == (12, 577, 14)
