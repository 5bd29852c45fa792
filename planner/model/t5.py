"""Megatron-LM's T5 (its example pretrain_t5.py, in examples, t5; megatron/core/models/T5;
Megatron-LM d98e8a64): an encoder and a decoder of the same layer configuration.
`Job.t5_encoder` = (encoder layers, encoder tokens per sample Te); the model's num_layers are the
decoder's, over seq_length = Td decoder tokens (Megatron --decoder-seq-length). Megatron runs T5
on one pipeline rank and planner models it without context parallelism
(`planner.search.rules.t5`): every layer, the encoder's with the decoder's, is on that rank.

- Encoder: a dense transformer layer of the model's shape per encoder layer, over Te tokens,
  tensor- and sequence-parallel like the decoder, and its final norm (t5_spec.py: encoder
  self-attention with a padding mask, i.e. no causal mask).
- Decoder: each layer adds a cross-attention block between its self-attention and its MLP
  (`get_t5_decoder_with_transformer_engine_block_spec`: pre-cross-attention norm, CrossAttention
  with linear_q on the decoder tokens, linear_kv on the encoder's output, core attention, output
  projection): an attention block's parameters and one more norm.
- The shared word and learned position embeddings and the output layer are the decoder's (the
  model's own); the loss runs on the decoder tokens.

Per micro-batch of b samples the encoder's layers run before the decoder (`encoder_job`, timed
by `vision_time.encoder_time` on the first rank like a vision encoder) and every decoder layer
runs its cross-attention (`cross_attention`, added to the layer's time): the Q and output
projections over b x Td tokens, the K/V projection over b x Te, and the attention of each
decoder query over all Te keys (flash attention timed as a causal sequence of 2 Te, which has Te
keys per query; the unfused one as its two batched GEMMs). Its TP collectives are one block's
pair, half a layer's; its host issue an attention block (`planner.model.host`). Not counted: the
encoder's lack of a causal mask (its attention is timed as the decoder's, half the work at
Te = 512: a few percent of its layer)."""

from __future__ import annotations

from dataclasses import replace

from planner.inputs.hybrid import DENSE
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import attention_time, gemm_shapes, params, vision
from planner.model import layer_time as lt
from planner.model.gemm import Gpu, gemm_time
from planner.model.layer_time import Layer
from planner.model.scores import score_bytes
from planner.model.shard import Shard


def encoder_job(job: Job) -> Job:
    """The job as the encoder's layers see it: Te tokens per sample, no cross-attention."""
    assert job.t5_encoder is not None
    return replace(job, seq_length=job.t5_encoder[1], t5_encoder=None)


def encoder_params(job: Job, tp: int) -> float:
    """Parameters of the encoder's layers and final norm on one GPU (split over tp), and the
    decoder layers' cross-attention blocks (0 without an encoder)."""
    if job.t5_encoder is None:
        return 0.0
    arch = job.arch
    layer = params.kind_params(arch, DENSE)[0]
    norm = params.final_norm_params(arch)
    split = job.t5_encoder[0] * layer + arch.num_layers * (params.attention_params(arch) + norm)
    return split / tp + norm


def cross_bytes(job: Job, sh: Shard) -> float:
    """Activation bytes one decoder layer's cross-attention keeps for one micro-batch (`sh` the
    decoder's split): its norm's input and the Q projection's, Q, the K and V of the encoder's
    tokens, the attention output (and an unfused attention's scores over Td x Te), the residual's
    dropout mask."""
    assert job.t5_encoder is not None
    arch = job.arch
    te = job.t5_encoder[1] * sh.micro_batch_size
    td, h, d = sh.tokens, arch.hidden_size, arch.head_dim
    rep = act.norm_input(td, h, sh) + act.linear_in(act.BF16 * td * h, sh) + act.masks(td, h, sh)
    q = act.BF16 * td * arch.num_attention_heads * d
    kv = act.BF16 * te * 2 * arch.query_groups * d
    part = q + kv + (q if sh.flash_attention else act.linear_in(q, sh))
    if not sh.flash_attention:
        s = job.t5_encoder[1]
        heads, b = arch.num_attention_heads, sh.micro_batch_size
        kernel = (sh.unfused_attention, sh.masked_softmax_fusion, sh.tp)
        scores = score_bytes(heads, s, b, sh.attention_dropout, *kernel)
        part += scores * sh.seq_per_cp_rank / s
    return act.split(rep, part, sh)


def encoder_bytes(job: Job, sh: Shard, lay: Layout) -> float:
    """Activation bytes the encoder's layers keep for one micro-batch (`sh` the decoder's split)
    under the layout's recompute, and its output, which every decoder layer's K/V projection
    reads (kept once); 0 without an encoder. pretrain_t5.py:94-95 builds the encoder from a copy
    of the decoder's config, recompute included, as a block of its own: under block recompute
    its first N layers keep their inputs and the rest everything (`vision.stack_kept`)."""
    if job.t5_encoder is None:
        return 0.0
    tokens = job.t5_encoder[1]
    esh = replace(sh, tokens=tokens * sh.micro_batch_size, seq_per_cp_rank=tokens)
    out = act.linear_in(act.BF16 * esh.tokens * job.arch.hidden_size, esh)
    kept = act.layer_bytes(job.arch, DENSE, esh)
    whole = act.layer_bytes(job.arch, DENSE, esh, recompute=False)
    return vision.stack_kept(lay, job.t5_encoder[0], kept, whole) + out


def cross_kept(job: Job, sh: Shard, lay: Layout) -> float:
    """What the decoder layers' cross-attention blocks keep for one micro-batch (T5 runs on one
    pipeline rank: every decoder layer): none in a layer full recompute reruns (its input is
    all it keeps), `cross_bytes` in each other one (block recompute's layers after the first
    N, every layer without full recompute)."""
    n = job.arch.num_layers
    if lay.recompute == "full":
        n -= vision.recomputed_layers(lay, n)
    return n * cross_bytes(job, sh)


def cross_attention(job: Job, lay: Layout, gpu: Gpu, layer: Layer) -> Layer:
    """`layer` (a decoder layer's time) with its cross-attention block added: forward, backward,
    a full recompute's rerun, and half the layer's TP charges (one block's collectives)."""
    assert job.t5_encoder is not None
    arch = job.arch
    b, tp = lay.micro_batch_size, lay.tp
    td, te = b * job.seq_length, b * job.t5_encoder[1]
    h, d, heads = arch.hidden_size, arch.head_dim, arch.num_attention_heads
    q_w, kv_w = heads * d / tp, 2 * gemm_shapes.kv_heads(arch, tp) * d  # K/V replicated past g
    peak, ridge, e = gpu.peak_linear, gpu.ridge, gpu.e_linear
    gemms = (
        gemm_time(td, h, q_w, peak, ridge, e)
        + gemm_time(te, h, kv_w, peak, ridge, e)
        + gemm_time(td, q_w, h, peak, ridge, e)
    )
    # the saved bytes as the proxy for the elementwise traffic, as for a layer (the unfused
    # attention's score passes apart, below); the constants read at call time, where a refit
    # sets them (`planner.model.calibratable`)
    sh = Shard(tokens=td, tp=tp, micro_batch_size=b, seq_per_cp_rank=job.seq_length)
    ew_bytes = cross_bytes(job, sh)
    if job.flash_attention:
        core = attention_time.core_attention(
            job, gpu, td, 2 * job.t5_encoder[1], tp, lt.ATTENTION_EFFICIENCY
        )
        attn_fwd, attn_bwd = core.fwd, core.bwd
    else:
        bmm = gemm_time(td, d, job.t5_encoder[1], gpu.peak_bf16, ridge, gpu.e_bf16, 2 * heads / tp)
        attn_fwd, attn_bwd = bmm, 2 * bmm
        ew_bytes += 5 * heads / tp * td * job.t5_encoder[1]  # the softmax path's score passes
    ew = lt.ELEMENTWISE_PASSES * ew_bytes / gpu.hbm
    fwd = gemms + attn_fwd + ew / 3
    bwd = 2 * gemms + attn_bwd + 2 * ew / 3
    rerun = fwd if job.recompute_policy(lay.recompute) == "full" else 0.0
    return replace(
        layer,
        fwd=layer.fwd + fwd,
        bwd=layer.bwd + bwd,
        recompute=layer.recompute + rerun,
        tp=1.5 * layer.tp,
        tp_hidden=1.5 * layer.tp_hidden,
        tp_traffic=1.5 * layer.tp_traffic,
        tp_plain=1.5 * layer.tp_plain,
    )


def model_flops_per_sample(job: Job) -> float:
    """Model FLOPs per sample the decoder-only count leaves out (0 without an encoder): the
    encoder's layers over Te tokens (their linear layers 6 x params, their attention over every
    key: 12 x Te x the attention width) and each decoder layer's cross-attention (Q and output
    projections over Td, K/V over Te, attention of Td queries over Te keys)."""
    if job.t5_encoder is None:
        return 0.0
    arch = job.arch
    layers, te = job.t5_encoder
    td, h, d = job.seq_length, arch.hidden_size, arch.head_dim
    q_w, kv_w = arch.num_attention_heads * d, 2 * arch.query_groups * d
    linear = params.kind_params(arch, DENSE)[0]
    encoder = layers * (6 * linear * te + 12 * te * te * q_w)
    cross = 6 * (2 * td * h * q_w + te * h * kv_w) + 12 * td * te * q_w
    return encoder + arch.num_layers * cross
