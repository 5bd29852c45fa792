"""Megatron-LM flags that change what a GPU holds (issue 21): the native fused cross entropy
(--cross-entropy-loss-fusion), the partial distributed optimizer
(--num-distributed-optimizer-instances), the RL step's rollout engine (--perform-rl-step) and
LLaVA's vision encoder (pretrain_vlm.py --img-h), and the dropouts' masks (--attention-dropout,
--hidden-dropout).

Oracles: hand arithmetic from the shapes in the comments (Llama 3.1 8B: vocabulary 128,256,
padded to 129,024, a multiple of 128 x t, at t = 8) and Megatron-LM d98e8a64 parallel_state.py
(instance i holds the i-th slice of dp x cp / N ranks of each data-parallel group); the 4 bytes
per logit of the fused loss are checked in
`planner.model.loss_activations.COMPILED_LOSS_EXTRA_BYTES_PER_LOGIT` against the functional
tests' measured pairs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.emit import bridge, megatron
from planner.inputs import megatron_args
from planner.inputs.layout import Layout
from planner.inputs.plan import parse_plan
from planner.inputs.units import GIB
from planner.model import activations as act
from planner.model import memory, rl_inference, scores, vision
from planner.model.loss_activations import logits_bytes
from planner.model.stage_activations import shard
from planner.model.stage_params import stage_params
from planner.search.rules import violations

LAYOUT = Layout(tp=8, pp=2, dp=4, sequence_parallel=True, zero_stage=1)


def test_native_loss_fusion_holds_one_more_fp32_copy_of_the_local_logits() -> None:
    base = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256)
    fused = replace(base, compiled_loss_fusion=True)
    sh, sh_fused = shard(base, LAYOUT), shard(fused, LAYOUT)
    vocab = base.arch.padded_vocab(LAYOUT.tp)
    # 4096 tokens x 129,024 / 8 local logits x 4 bytes = 264.2 MB more at the loss
    extra = logits_bytes(base.arch, vocab, sh_fused) - logits_bytes(base.arch, vocab, sh)
    assert extra == pytest.approx(4 * 4096 * 129_024 / 8)
    # the last stage's peak grows by at most that (its working set may be a layer's recompute)
    last = memory.estimate(base, LAYOUT).stages[-1].activations
    last_fused = memory.estimate(fused, LAYOUT).stages[-1].activations
    assert 0 <= last_fused - last <= extra * memory.fragmentation(base) + 1
    # TE's kernel and torchtitan's loss are untouched by the flag
    assert not shard(replace(fused, framework="torchtitan"), LAYOUT).compiled_loss


@pytest.mark.parametrize("instances", [2, 4])
def test_optimizer_instances_shard_the_states_over_their_slice(instances: int) -> None:
    # ZeRO 1 over dp = 4: 12 / 4 bytes of optimizer state per parameter; with N instances each
    # shards over 4 / N ranks, 12 N / 4: N times as much, weights and gradients unchanged
    base = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256)
    split = replace(base, optimizer_instances=instances)
    a, b = memory.estimate(base, LAYOUT).stages[0], memory.estimate(split, LAYOUT).stages[0]
    assert b.optimizer == pytest.approx(instances * a.optimizer)
    assert (b.weights, b.grads) == (a.weights, a.grads)
    # without the distributed optimizer (ZeRO 0) every rank holds all of its states anyway
    plain = LAYOUT.with_(zero_stage=0)
    assert memory.estimate(split, plain).stages[0].optimizer == pytest.approx(
        memory.estimate(base, plain).stages[0].optimizer
    )


@pytest.mark.parametrize("instances", [2, 4])
def test_hfsdp_shards_the_optimizer_states_over_the_instances_too(instances: int) -> None:
    """Megatron-FSDP (zero_stage 3) over dp = 4 in N instances: each instance's 4 / N ranks
    shard weights, gradients and the optimizer's 12 bytes per parameter; with
    --outer-dp-sharding-strategy optim the optimizer states shard over all 4 ranks (megatron_fsdp
    fully_shard.py, HFSDP): 12 / 4 against 12 N / 4, weights and gradients unchanged. A plan
    without FSDP is refused it (outer sharding builds on FSDP's)."""
    fsdp = LAYOUT.with_(zero_stage=3)
    hsdp = replace(
        job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256), optimizer_instances=instances
    )
    hfsdp = replace(hsdp, outer_dp_sharding_strategy="optim")
    a, b = memory.estimate(hsdp, fsdp).stages[0], memory.estimate(hfsdp, fsdp).stages[0]
    assert a.optimizer == pytest.approx(instances * b.optimizer)
    assert (b.weights, b.grads) == (a.weights, a.grads)
    assert [v.rule for v in violations(hfsdp, LAYOUT)] == ["outer_dp_sharding"]
    line = (
        "--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 32000 --use-megatron-fsdp --ckpt-format fsdp_dtensor "
        "--data-parallel-sharding-strategy "
        f"optim_grads_params --num-distributed-optimizer-instances {instances} "
        "--outer-dp-sharding-strategy optim"
    )
    reading = megatron_args.read(line, "h100-sxm-80gb", 8, "t")
    assert reading.doc["training"]["outer_dp_sharding_strategy"] == "optim"
    assert not reading.not_modelled


def test_rl_rollout_engine_adds_its_kv_cache_and_its_own_copy_of_the_weights() -> None:
    base = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256)
    kv = replace(base, rl_kv_cache_bytes=20 * GIB)
    stages = zip(
        memory.estimate(base, LAYOUT).stages, memory.estimate(kv, LAYOUT).stages, strict=True
    )
    for a, b in stages:
        assert b.allocated - a.allocated == pytest.approx(20 * GIB)
    # a tp 4, pp 1 rollout model of Llama 3.1 8B: 32 layers of 218,103,808 parameters (QKV
    # 4096 x 6144, projection 4096^2, SwiGLU 3 x 4096 x 14,336) / 4 and their two norms, 8,192,
    # whole on every rank (Megatron does not split norms), the embedding and output layer of
    # 128,512 (a multiple of 128 x 4) x 4096 each / 4, the final norm 4096:
    # 32 x 54,534,144 + 2 x 131,596,288 + 4096 = 2,008,289,280 bf16 weights per GPU
    separate = replace(base, rl_inference_parallel=(4, 1, 1, 4))
    assert rl_inference.inference_model_params(separate, LAYOUT) == pytest.approx(2_008_289_280)
    assert rl_inference.resident_bytes(separate, LAYOUT) == pytest.approx(2 * 2_008_289_280)


LLAVA = (
    "--num-layers 12 --hidden-size 624 --num-attention-heads 12 --seq-length 1024 "
    "--max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --bf16 "
    "--tokenizer-type NullTokenizer --vocab-size 8193 --img-h 336 --img-w 336 --patch-dim 14"
)


def test_llava_reads_the_text_and_image_sequence_and_counts_its_vision_encoder() -> None:
    plan = parse_plan(megatron_args.read(LLAVA, "h100-sxm-80gb", 8, "llava").doc)
    job = plan.job
    # (336 / 14)^2 = 576 patches and the class token: 1024 + 577 = 1601 language tokens, and
    # the position table grown to them (pretrain_vlm.py)
    assert job.seq_length == 1601 and job.arch.max_position_embeddings >= 1601
    assert job.vision_encoder == (12, 577, 14)
    # the vision transformer: 12 layers of the language model's shape (h 624, 4h MLP, biases,
    # LayerNorm): QKV 624 x 1872 + 1872, projection 624^2 + 624, MLP 2 x 624 x 2496 + 2496 +
    # 624, two norms 2 x 1248: 4,680,624 each, 56,167,488; the projector 2 x 624 x 2496 + 2496
    # + 624 = 3,118,128 and the LayerNorm TE fuses into its fc1, 1248 (whole); the patch
    # convolution 3 x 14^2 x 624 = 366,912, positions 577 x 624 = 360,048, the class token 624:
    # 60,014,448 (727,584 + 1248 = 728,832 whole)
    assert vision.encoder_params(job, 1) == pytest.approx(60_014_448)
    # on the first pipeline rank only, with the encoder's layers and projector split over tp
    two = plan.require_layout().with_(tp=2, pp=2, dp=2)
    first, last = (stage_params(job, two, r, c) for r, c in enumerate(two.chunk_layers(12)))
    alone = stage_params(replace(job, vision_encoder=None), two, 0, two.chunk_layers(12)[0])
    assert first[0] - alone[0] == pytest.approx((60_014_448 - 728_832) / 2 + 728_832)
    # head dimension 624 / 12 = 52, not a multiple of 8: TE's unfused attention (s^2 scores)
    assert not shard(job, plan.require_layout()).flash_attention
    assert last == stage_params(replace(job, vision_encoder=None), two, 1, two.chunk_layers(12)[1])


def test_unfused_scores_by_softmax_path_and_dropout() -> None:
    # TE's fused softmax kernel (s_k a multiple of 8, 16 < s_k < 16384): its bf16 output 2 bytes
    # per score; its torch fallback: fp32 softmax 4, then the dropout's mask and output 1 + 2
    # (the bf16 probabilities before the dropout kept by nothing: 7), or without attention
    # dropout the bf16 probabilities 2, which the second GEMM saves (torch's dropout at p = 0
    # returns its input). 12 heads, micro-batch 4 (tests/model/test_local_softmax.py: the rest):
    assert scores.score_bytes(12, 1024, 4) == 5 * 12 * 1024**2 * 4  # Korthikanti's 5as^2b
    assert scores.score_bytes(12, 1024, 4, dropout=False) == 2 * 12 * 1024**2 * 4
    assert scores.score_bytes(12, 1601, 4) == 7 * 12 * 1601**2 * 4
    assert scores.score_bytes(12, 1601, 4, dropout=False) == 6 * 12 * 1601**2 * 4
    # --attention-dropout 0.0 is read (Megatron's default is 0.1)
    plan = parse_plan(megatron_args.read(LLAVA, "h100-sxm-80gb", 8, "llava").doc)
    assert plan.job.attention_dropout
    line = LLAVA + " --attention-dropout 0.0"
    assert not parse_plan(
        megatron_args.read(line, "h100-sxm-80gb", 8, "llava").doc
    ).job.attention_dropout


def test_hidden_dropout_off_keeps_no_residual_masks() -> None:
    # Megatron's default --hidden-dropout 0.1: the embedding's dropout and each layer's two
    # residual adds (after attention, after the MLP) keep a 1-byte mask per hidden element. At
    # 0 torch's dropout returns its input and keeps none. Llama 3.1 8B (h 4096) at tp 8 with
    # sequence parallelism and 4096 tokens: 2 x 4096 x 4096 / 8 = 4 MiB per layer, and the
    # embedding's 4096 x 4096 / 8 = 2 MiB on the first stage
    on = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 256)
    off = replace(on, hidden_dropout=False)
    sh_on, sh_off = shard(on, LAYOUT), shard(off, LAYOUT)
    arch = on.arch
    per_layer = act.attention_bytes(arch, sh_on) + act.mlp_bytes(arch, arch.ffn_hidden_size, sh_on)
    per_layer_off = act.attention_bytes(arch, sh_off) + act.mlp_bytes(
        arch, arch.ffn_hidden_size, sh_off
    )
    assert per_layer - per_layer_off == 2 * 4096 * 4096 / 8
    assert act.embedding_bytes(arch, sh_on) - act.embedding_bytes(arch, sh_off) == 4096 * 4096 / 8
    # the whole stage: its layers' masks for every micro-batch in flight, and never more memory
    first_on = memory.estimate(on, LAYOUT).stages[0]
    first_off = memory.estimate(off, LAYOUT).stages[0]
    assert first_off.activations < first_on.activations
    assert first_off.weights == first_on.weights


def test_hidden_dropout_is_read_and_launched_as_megatron_spells_it() -> None:
    plan = parse_plan(megatron_args.read(LLAVA, "h100-sxm-80gb", 8, "llava").doc)
    assert plan.job.hidden_dropout  # Megatron's default is 0.1
    line = LLAVA + " --hidden-dropout 0.0 --attention-dropout 0"
    off = parse_plan(megatron_args.read(line, "h100-sxm-80gb", 8, "llava").doc)
    assert not off.job.hidden_dropout and not off.job.attention_dropout
    # launch asks for the dropouts the plan's memory counted no masks for, and nothing else
    assert "--hidden-dropout" not in megatron.arguments(plan).flat()
    flags = megatron.arguments(off).flat()
    assert flags[flags.index("--hidden-dropout") + 1] == "0.0"
    assert flags[flags.index("--attention-dropout") + 1] == "0.0"
    model = bridge.sections(off)["model"]
    assert model["hidden_dropout"] == model["attention_dropout"] == 0.0
    assert "hidden_dropout" not in bridge.sections(plan)["model"]
