"""Muon's working memory at the optimizer step (`muon_step`), held with the step's gradient
copies (`rank_states.step_bytes`), and the copies under its whole-parameter dealing.

Oracles (Megatron-LM d98e8a64 megatron/core/optimizer/emerging_optimizers.py; NVIDIA-NeMo/
Emerging-Optimizers fd77292 orthogonalized_optimizers/muon_utils.py), per matrix of E whole
elements, L on this rank, s its short side, bytes:
- duplicated TP mode: the fp32 all-gather into tp tensors and their torch.cat (4 E + 4 E,
  muon_utils.py:328-330), even at tp 1 (every TE linear weight has a partition_dim,
  extensions/transformer_engine.py:116-123); `newton_schulz` normalises into fp32 (4 E, :216)
  and casts to bf16 (2 E, :262) at the default "medium" precision: 14 E; each iteration holds X,
  A = X X^T, B and the new X (2 E + 2 s^2 + 2 s^2 + 2 E, :370-375): 12 E + 4 s^2; the spectral
  scale makes two more shard-size fp32 tensors (emerging_optimizers.py:237). Peak max(14 E,
  12 E + 4 s^2); at "high" precision nothing is cast and the iteration is fp32: 16 E + 8 s^2;
  blockwise (partition_dim None, :403) gathers nothing: 12 L.
- --muon-split-qkv (:407-437): the reshaped Q, K, V copies (4 L of QKV) held while each part
  is orthogonalised after the ones before it, whose results are held (4 L each).
- Hand arithmetic, Llama 3.1 8B (h 4096, ffn 14336, 32 heads, 8 query groups, 128-dim heads):
  fc1 is 28672 x 4096, E = 117,440,512, 14 E = 1,644,167,168 B; the dp 8 shard is
  8,030,261,248 / 8 = 1,003,782,656 parameters, whose fp32 gradient copies are 4,015,130,624 B.
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.emit import megatron
from planner.inputs import megatron_args
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import memory, muon_step, muon_time, rank_states

PARAMS = 8_030_261_248
FC1 = 28672 * 4096  # E = 117,440,512
H = 4096


def _muon(**kw: object) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 128, optimizer="muon", **kw)


LAYOUT = Layout(dp=8, zero_stage=1, recompute="full")


def _working_set(layout: Layout = LAYOUT, **kw: object) -> float:
    j = _muon(main_grad_dtype="bf16", **kw)
    chunks = layout.chunk_layers(j.arch.num_layers)[0]
    return muon_step.working_set(j, layout, chunks)


def test_the_worked_example() -> None:
    """/tmp/s31/q1/muon8b_s2k.toml (tp 1, dp 8, bf16 gradients, seq 2048, full recompute on 8
    H100): the step holds the shard's copies and fc1's working set,
    4 x 1,003,782,656 + 1,644,167,168 = 5,659,297,792 B, x 1.10 = 5.798 GiB, above the 2.208 GiB
    of activations: the stage's total goes from 43.401 GiB (copies alone) to 45.085 GiB, and
    to 47.085 GiB with the layer-wise buffers' padding (`muon_layout`: 7,516,192,768 elements of
    buffer for 6,979,321,856 of matrices at dp 8, 536,870,912 x (2 + 2) B = 2 GiB; the QA's
    independent re-derivation, /tmp/qa2s36/lw_pad.py, gives the same), and 47.210 GiB with the
    fullest shard's Muon states: the layer-wise deal (layer_wise_optimizer.py:258-345, brute-forced
    in test_muon_shards) gives one rank 889,192,448 matrix elements, a 4096 x 4096 projection
    (16,777,216) over the even 6,979,321,856 / 8, x 8 B = 0.125 GiB; that rank's step copies
    the projection's gradient too, 4 B x 1.10: 47.279 GiB."""
    assert _working_set() == 14 * FC1 == 1_644_167_168
    j = _muon(main_grad_dtype="bf16")
    st = memory.estimate(j, LAYOUT).stages[0]
    # the copies are of the fullest layer-wise shard's parameters: one 4096 x 4096 projection
    # (16,777,216) over the even share (below)
    step = 4 * (PARAMS / 8 + 16_777_216) + 14 * FC1
    assert step == 5_726_406_656
    assert st.grad_copy == pytest.approx(step * memory.FRAGMENTATION)
    assert round(st.grad_copy / 2**30, 3) == 5.866  # 5.798 GiB for the even shard
    assert st.at_step
    extra = 16_777_216 * (8 + 4 * memory.FRAGMENTATION) / 2**30
    assert round(st.total / 2**30, 3) == round(47.085 + extra, 3) == 47.279


def test_fp32_gradients_make_no_copy_but_the_working_set_stays() -> None:
    """With fp32 gradient buffers `.float()` returns the buffer (no copy), but Newton-Schulz
    still allocates fc1's 14 E."""
    j = _muon(main_grad_dtype="fp32")
    chunks = LAYOUT.chunk_layers(j.arch.num_layers)[0]
    assert rank_states.step_grad_copy(j, LAYOUT, 0, chunks) == 0.0
    assert rank_states.step_bytes(j, LAYOUT, 0, chunks) == 14 * FC1


def test_duplicated_tp_gathers_the_whole_matrix() -> None:
    """At tp 2 each rank still gathers and orthogonalises all of fc1: 14 E, not 14 E / 2."""
    assert _working_set(Layout(tp=2, dp=4, zero_stage=1, recompute="full")) == 14 * FC1


def test_blockwise_orthogonalises_the_shard_alone() -> None:
    """Blockwise at tp 2: fc1's shard, 14336 x 4096 = 58,720,256 elements, no gather: 12 L =
    704,643,072 B (the tail: the fp32 result and the two scaled copies; the normalised copy
    and its cast, 6 L, and the iteration, 4 L + 4 s^2 with s^2 <= L, are below it)."""
    lay = Layout(tp=2, dp=4, zero_stage=1, recompute="full")
    assert _working_set(lay, muon_tp_mode="blockwise") == 12 * 14336 * 4096 == 704_643_072


def test_high_precision_iterates_in_fp32() -> None:
    """--muon-fp32-matmul-prec high: 8 E gathered + X and the new X in fp32 (8 E) + A and B in
    fp32 (8 s^2): 16 x 117,440,512 + 8 x 4096^2 = 1,879,048,192 + 134,217,728."""
    got = _working_set(muon_matmul_precision="high")
    assert got == 16 * FC1 + 8 * H * H == 2_013_265_920


def test_the_split_qkv_holds_its_parts() -> None:
    """Llama 3.1 8B's QKV split at tp 1: Q 4096 x 4096 (16,777,216), K and V 1024 x 4096
    (4,194,304 each), 25,165,824 in all. While Q is orthogonalised the three copies are held
    (4 x 25,165,824 = 100,663,296) and Q's own peak is 12 E + 4 s^2 = 16 x 16,777,216 =
    268,435,456 (square: s^2 = E, above its 14 E): 369,098,752 B, below fc1's."""
    j = _muon()
    kind = j.arch.kinds[0]
    q, kv = muon_time.matrices(j.arch, kind, 1, 1, 1, True)[0][:2]
    probe = muon_time.matrices(j.arch, kind, 1, 2, 2, True)[0]
    parts = [(q, probe[0]), (kv, probe[1]), (kv, probe[1])]
    got = muon_step.qkv_peak(j, parts)
    assert got == 4 * 25_165_824 + 16 * 4096 * 4096 == 369_098_752


def test_whole_params_copies_the_largest_parameter_whole() -> None:
    """--no-use-layer-wise-param-layout (`muon_whole_params`): every parameter is dealt whole,
    sorted ascending, over ranks 0..7,7..0 (layer_wise_optimizer.py:726, :740, :744-754), and the
    step copies the gradients of those a rank updates. After the 65 norms (indices 0-64, spread
    evenly here: 65 x 4,096 / 8 = 33,280) come 32 each of the projection (16,777,216), QKV
    (25,165,824), fc2 (58,720,256) and fc1 (117,440,512): 4 of each to every rank, 872,415,232;
    then the word embedding and the output layer (128,256 x 4,096 = 525,336,576 each) at
    indices 193 and 194 -> ranks 1 and 2 whole: 4 x (872,448,512 + 525,336,576) = 5,591,140,352
    B on the fullest (the even shard copied 4,015,130,624)."""
    j = _muon(main_grad_dtype="bf16", muon_whole_params=True)
    chunks = LAYOUT.chunk_layers(j.arch.num_layers)[0]
    got = rank_states.step_grad_copy(j, LAYOUT, 0, chunks)
    assert got == pytest.approx(4 * (872_448_512 + 525_336_576)) == 5_591_140_352


def test_nesterov_holds_a_copy_of_the_momentum_shard() -> None:
    """--muon-nesterov: Emerging-Optimizers fd77292 orthogonalized_optimizer.py:197 orthogonalises
    `grad.lerp(exp_avg, momentum)`, a new fp32 tensor of the parameter's shard held until the
    update (plain momentum hands over the state itself). fc1 at tp 1: 14 E + 4 E = 18 E; the split
    QKV's peak (369,098,752, above) grows by its whole shard, 4 x 25,165,824, and stays below."""
    assert _working_set(muon_nesterov=True) == 18 * FC1 == 2_113_929_216
    assert _working_set(muon_nesterov=True) - _working_set() == 4 * FC1
    # read from a Megatron-LM line and written back (Megatron-LM d98e8a64 arguments.py:2633,
    # OptimizerConfig.muon_nesterov, handed to TensorParallelMuon as `nesterov`)
    line = (
        "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 "
        "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 8 --bf16 "
        "--vocab-size 32000 --optimizer muon --muon-nesterov"
    )
    plan = parse_plan(megatron_args.to_plan(line, "h100-sxm-80gb", 8))
    assert plan.job.muon_nesterov
    assert ("--muon-nesterov",) in megatron.arguments(plan).flat_args()
