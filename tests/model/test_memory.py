"""Per-stage memory.

Oracles: model states against the ZeRO paper's worked example (Rajbhandari et al. 2020) and
Megatron's distributed-optimizer table and theoretical-memory estimator (transcribed below);
activations against Korthikanti et al. 2022 (34sbh/t per layer); in-flight micro-batches against
Megatron's 1F1B / interleaved warm-up counts (Narayanan et al. 2021); hand arithmetic in comments
for the rest (Mixtral's stage parameters from its published shape, whose total is the released
checkpoint's 46,702,792,704; a tiny model's last-stage activations). The rest are properties any
correct estimate has (more sharding never costs memory, the worst stage decides)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import memory, rank_states
from planner.model.in_flight import in_flight
from planner.model.shard import Shard
from planner.model.stage_activations import shard

GB = 1e9


@pytest.mark.parametrize(
    ("stage", "expected_gb"),
    # Rajbhandari et al. 2020 (ZeRO), Figure 1 / section 5: Psi = 7.5B, N_d = 64, K = 12,
    # 16-bit gradients: 120 GB unsharded, 31.4 GB P_os, 16.6 GB P_os+g, 1.9 GB P_os+g+p.
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_paper_example(stage: int, expected_gb: float) -> None:
    w, g, o = rank_states.state_bytes_per_param(stage, grad_bytes=2.0, shard_group=64)
    assert (w + g + o) * 7.5e9 / GB == pytest.approx(expected_gb, abs=0.05)


def test_megatron_distributed_optimizer_bytes() -> None:
    # docs/user-guide/features/dist_optimizer.md: bf16 params + fp32 grads: 18 bytes without,
    # 6 + 12/d with the distributed optimizer.
    assert sum(rank_states.state_bytes_per_param(0, 4.0, 8)) == 18
    assert sum(rank_states.state_bytes_per_param(1, 4.0, 8)) == pytest.approx(6 + 12 / 8)


def test_bf16_adam_moments_shrink_the_optimizer() -> None:
    # Megatron --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16:
    # K = 4 (fp32 master) + 2 + 2 = 8 instead of 12. ZeRO's 7.5B example at stage 1, N_d = 64:
    # 7.5 x (2 + 2 + 8/64) = 30.94 GB (31.4 with K = 12).
    j = job("llama3.1-8b", "h100-sxm-80gb", 64, 4096, 64, optimizer_state_dtype="bf16")
    assert j.optimizer_bytes == 8.0
    w, g, o = rank_states.state_bytes_per_param(1, 2.0, 64, j.optimizer_bytes)
    assert (w + g + o) * 7.5e9 / GB == pytest.approx(30.94, abs=0.01)


def megatron_theoretical(
    j: Job, lay: Layout
) -> tuple[float, float]:  # (weights+optimizer bytes, activation bytes) on stage 0
    """Megatron-LM megatron/training/theoretical_memory_usage.py, transcribed in
    here for a GPT (MHA, 4h GELU, LayerNorm, tied embeddings)
    with the distributed optimizer, sequence parallelism and selective recompute:
      per layer params 2hQ(1 + nq/a) + 2hF + 2h*2 ; embedding hV ; stage 0 holds L/p layers + hV,
      all / t ; bytes (6 + 12/dp) per parameter;
      activations  L * sbh(18 + 4F/h) + 8sbp + sbhp, x min(1, M/p) when p > 1, all / t.
    It counts neither biases nor the learned position embeddings (max_positions x h, replicated
    over tp); we add the latter here and compare within 0.1% (the biases)."""
    a = j.arch
    # Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by (128) x t
    V = -(-a.vocab_size // (128 * lay.tp)) * 128 * lay.tp
    h, L, F = a.hidden_size, a.num_layers, a.ffn_hidden_size
    per_layer = 2 * h * h * 2 + 2 * h * F + 2 * h * 2
    shard = (per_layer * L / lay.pp + h * V) / lay.tp + h * (a.max_position_embeddings or 0)
    states = shard * (6 + 12 / lay.dp)
    s, b, p = j.seq_length, lay.micro_batch_size, lay.pp
    m = j.global_batch_size // (lay.dp * b)
    acts = L * s * b * h * (18 + 4 * F / h) + 8 * s * b * p + s * b * h * p
    if p > 1:
        acts *= min(1, m / p)
    return states, acts / lay.tp


@pytest.mark.parametrize(
    ("model", "n", "lay"),
    [
        # GPT-3 175B on 1024 A100: tp 8, pp 16 (Megatron-LM's example script shape)
        (
            "gpt3-175b",
            1024,
            Layout(tp=8, pp=16, dp=8, sequence_parallel=True, recompute="selective"),
        ),
        # SC21 18.4B on 256 GPUs: tp 8, pp 2
        (
            "gpt-sc21-18.4b",
            256,
            Layout(tp=8, pp=2, dp=16, sequence_parallel=True, recompute="selective"),
        ),
    ],
)
def test_megatron_theoretical_memory(model: str, n: int, lay: Layout) -> None:
    j = job(model, "a100-sxm-80gb", n, 2048, 1024)
    want_states, want_acts = megatron_theoretical(j, lay)
    st = memory.estimate(j, lay).stages[0]
    assert st.weights + st.grads + st.optimizer == pytest.approx(want_states, rel=1e-3)
    # our layer activations (before fragmentation) equal Megatron's 34sbh/t per layer exactly;
    # our embedding term keeps the bf16 output too (3sbh vs sbh per micro-batch): a little more
    sh = Shard(tokens=2048, tp=lay.tp, sequence_parallel=True, recompute="core_attn")
    ours_layers = j.arch.num_layers * act.layer_bytes(j.arch, False, sh)
    assert ours_layers == pytest.approx(j.arch.num_layers * 34 * 2048 * j.arch.hidden_size / lay.tp)
    assert st.activations / memory.FRAGMENTATION >= want_acts
    assert st.activations / memory.FRAGMENTATION == pytest.approx(want_acts, rel=0.01)


@pytest.mark.parametrize(
    ("pp", "vpp", "rank", "expected"),
    [
        # 1F1B: rank r holds pp - r micro-batches (Narayanan et al. 2021, section 2.2)
        (4, 1, 0, 4),
        (4, 1, 3, 1),
        # interleaved: warm-up 2(pp - r - 1) + (vpp - 1)pp, plus the one in flight
        # (megatron/core/pipeline_parallel/schedules.py): pp 4, vpp 2, rank 0: 6 + 4 + 1 = 11
        (4, 2, 0, 11),
        (4, 2, 3, 5),
    ],
)
def test_in_flight(pp: int, vpp: int, rank: int, expected: int) -> None:
    assert in_flight(Layout(pp=pp, vpp=vpp), rank, 64) == expected


def test_interleaving_factor_matches_korthikanti() -> None:
    # Korthikanti et al. section 4.2.3: interleaving multiplies the first stage's activations by
    # 1 + (p - 1)/(p m) for m chunks per rank. Chunks in flight x layers per chunk, divided by
    # the L layers of plain 1F1B: (11 chunks x 2 layers) / 16 layers = 1 + 3/8.
    pp, vpp, L = 4, 2, 16
    chunks = in_flight(Layout(pp=pp, vpp=vpp), 0, 64)
    assert chunks * (L // (pp * vpp)) / L == pytest.approx(1 + (pp - 1) / (pp * vpp))


def test_few_microbatches_cap_in_flight() -> None:
    assert in_flight(Layout(pp=8), 0, 3) == 3


def test_ep_overlap_holds_one_layer_more_not_one_micro_batch_more() -> None:
    # Megatron's EP overlap runs one more warm-up forward, then each forward merged with an
    # earlier micro-batch's backward layer by layer (schedules.py:964-970, combined 1F1B): the
    # micro-batch being built and the one being released hold one micro-batch and one layer.
    # Counts unchanged; a stage without the loss holds one MoE layer's whole activations more,
    # beside the dispatcher's tokens, and, as the merged op ends (post_forward and post_backward
    # inside it), two pipeline messages more: the gradient its backward took and the input
    # gradient before it (early_receives.held_counts; replayed in test_p2p_blocking_held.py),
    # s x h x 2 B = 4096 x 4096 x 2 = 32 MiB each (tp 1, bf16) (all x 1.10).
    assert in_flight(Layout(ep=8, ep_comm_overlap=True), 0, 64) == 1
    assert in_flight(Layout(pp=4, vpp=2, ep=8, ep_comm_overlap=True), 0, 64) == 11
    j = job("mixtral-8x7b", "h100-sxm-80gb", 16, 4096, 64)
    lay = Layout(tp=1, pp=2, vpp=2, dp=8, ep=8)
    plain = memory.estimate(j, lay).stages[0]
    merged = memory.estimate(j, lay.with_(ep_comm_overlap=True)).stages[0]
    sh = shard(j, lay)
    one_layer = act.layer_bytes(j.arch, True, sh, recompute=False)
    extra = merged.activations - plain.activations
    messages = 2 * 4096 * 4096 * 2
    assert extra == pytest.approx((one_layer + messages) * memory.FRAGMENTATION, rel=1e-9)


def test_expert_parameters_shard_over_expert_data_parallel() -> None:
    # Mixtral 8x7B on 64 GPUs, tp 1, pp 4, ep 8: dense dp = 16, expert dp = 64/(1*8*4) = 2.
    # Stage 1 holds layers 8-15 and no embedding or output layer. By hand, per layer (h 4096,
    # 32 heads of 128, 8 query groups, 8 SwiGLU experts of width 14336, RMSNorm, no biases):
    #   dense: QKV 4096 x (4096 + 2 x 1024) = 25,165,824 + proj 4096^2 = 16,777,216
    #          + 2 norms 8,192 + router 4096 x 8 = 32,768                 -> 41,984,000
    #   experts: 8 x 3 x 4096 x 14336 = 8 x 176,160,768                    -> 1,409,286,144
    # (32 such layers + 2 x 32000 x 4096 embeddings + the final norm 4096 = 46,702,792,704, the
    # released checkpoint). Per GPU: dense 8 x 41,984,000 = 335,872,000; experts split over
    # ep 8: 8 layers x 1,409,286,144 / 8 = 1,409,286,144 (8 expert MLPs).
    j = job("mixtral-8x7b", "h100-sxm-80gb", 64, 4096, 256)
    st = memory.estimate(j, Layout(tp=1, pp=4, dp=16, ep=8, zero_stage=1)).stages[1]
    dense, expert = 335_872_000, 1_409_286_144
    # bf16 weights 2 and fp32 main grads 4 bytes, unsharded at ZeRO 1
    assert st.weights == 2 * (dense + expert) == 3_490_316_288
    assert st.grads == 4 * (dense + expert) == 6_980_632_576
    # optimizer: 12 bytes per parameter over dp x cp = 16 (dense) or expert dp = 2 (experts):
    # 251,904,000 + 8,455,716,864
    assert st.optimizer == pytest.approx(8_707_620_864, rel=1e-12)


def test_more_sharding_never_costs_memory() -> None:
    j = job("llama3.1-70b", "h100-sxm-80gb", 64, 8192, 256)
    peaks = [
        memory.estimate(j, Layout(tp=8, pp=2, dp=4, sequence_parallel=True, zero_stage=z)).peak
        for z in (0, 1, 2, 3)
    ]
    assert peaks == sorted(peaks, reverse=True)
    assert peaks[0] > peaks[3]


def test_worst_stage_decides() -> None:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    rep = memory.estimate(j, Layout(tp=1, pp=4, dp=2))
    assert rep.peak == max(st.total for st in rep.stages)
    # 1F1B: stage 0 holds 4 micro-batches in flight, the last stage 1 (plus the logits)
    assert rep.stages[0].activations > rep.stages[3].activations


def test_uneven_pipeline_layers_move_memory() -> None:
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    even = memory.estimate(j, Layout(tp=1, pp=4, dp=2)).stages[0]
    light = memory.estimate(j, Layout(tp=1, pp=4, dp=2, pipeline_layers=(6, 9, 9, 8))).stages[0]
    assert light.layers == 6
    assert light.total < even.total


def test_headroom_lowers_capacity() -> None:
    # the H100's 79.64 GiB (81,559 MiB as nvidia-smi reports it, rounded down), 10% kept free
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
    lay = Layout(tp=8, dp=1, sequence_parallel=True)
    rep = memory.estimate(j, lay, 10)
    assert rep.capacity == pytest.approx(79.64 * 2**30 * 0.9)
    assert rep.physical == pytest.approx(79.64 * 2**30)


# A tiny GPT (h 64, 2 layers, 4 heads of 16, GELU MLP of 4h, LayerNorm) on one stage: its
# activations by hand, in bytes per token, with T = seq 128 x mbs 2 = 256 tokens, tp 1.
TINY = {
    "name": "tiny",
    "num_layers": 2,
    "hidden_size": 64,
    "ffn_hidden_size": 256,
    "num_attention_heads": 4,
    "activation": "gelu",
    "make_vocab_size_divisible_by": 1,
}


@pytest.mark.parametrize(
    ("vocab", "gathered", "fused"),
    [
        # Per token, one micro-batch in flight (1F1B on one stage):
        #   full recompute keeps each layer's input 2h = 128: 2 layers            -> 256
        #   first stage: token ids 8 + the embedding's dropout mask h (its output is the first
        #     layer's input, counted there)                                       -> 72
        #   last stage: final norm input and output 4h = 256, then by loss kernel
        #     gathered: bf16 local logits 2V + the gathered working set 24V
        #     fused:    Megatron's 6V
        #   the layer recomputed in the backward holds all of it (Korthikanti 34h = 2176, and the
        #   flash kernel's fp32 log-sum-exp, 4 bytes x 4 heads = 16: 2192) after the loss
        #   backward: the larger of the two counts; on the gathered path the two bf16 logits
        #   buffers the pipeline still holds (4V) come on top of the recomputed layer
        # V = 64: gathered max(256 + 128 + 1536, 2192 + 256) = 2448: 256 + 72 + 2448 = 2776;
        #   fused max(256 + 384, 2192) = 2192: 256 + 72 + 2192 = 2520
        (64, 2776, 2520),
        # V = 1000: gathered max(256 + 2000 + 24000, 2192 + 4000) = 26256: 26584;
        #   fused max(256 + 6000, 2176) = 6256: 256 + 72 + 6256 = 6584
        (1000, 26584, 6584),
    ],
)
def test_gathered_loss_buffers_are_free_before_the_last_layer_is_recomputed(
    vocab: int, gathered: int, fused: int
) -> None:
    # Last stage, full recompute: the recomputed layer's working set comes after the loss
    # backward has freed the loss buffers (Megatron's kernel; on the gathered path all but the two
    # bf16 logits buffers). Both x FRAGMENTATION (1.10).
    arch = ModelArch.model_validate({**TINY, "vocab_size": vocab})
    j = Job(
        arch=arch,
        cluster=job("llama3.1-8b", "a100-sxm-80gb", 8, 128, 64).cluster,
        seq_length=128,
        global_batch_size=64,
        cross_entropy="gathered",
    )
    lay = Layout(tp=1, pp=1, dp=8, micro_batch_size=2, recompute="full")
    tokens = 128 * 2
    got = memory.estimate(j, lay).stages[0].activations
    assert got == pytest.approx(gathered * tokens * 1.10, rel=1e-12)
    got_fused = memory.estimate(replace(j, cross_entropy="fused"), lay).stages[0].activations
    assert got_fused == pytest.approx(fused * tokens * 1.10, rel=1e-12)


def test_expandable_segments_count_less_fragmentation() -> None:
    # Llama 3.1 8B on 8 H100, tp 2: with expandable segments the allocator's allowance on
    # activations is 1.02 instead of 1.10, nothing else changes: activations scale by 1.02 / 1.10
    # and the weights, gradients and optimizer states stay
    plain = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128)
    grown = replace(plain, expandable_segments=True)
    lay = Layout(tp=2, dp=4, sequence_parallel=True)
    a, b = memory.estimate(plain, lay).stages[0], memory.estimate(grown, lay).stages[0]
    assert b.activations == pytest.approx(a.activations * 1.02 / 1.10, rel=1e-12)
    assert (b.weights, b.grads, b.optimizer) == (a.weights, a.grads, a.optimizer)
    assert b.total < a.total
    # what the allocator counts (max_memory_allocated) does not depend on it
    assert b.allocated == pytest.approx(a.allocated, rel=1e-12)
