"""The pinned blocks of the CPU-offloaded optimizer and of checkpoint staging
(planner.model.host_pinned, planner.model.host_checkpoint), and their lines in check / explain.

Oracles: hand arithmetic from the source lines at Megatron-LM d98e8a64 —
cpu_offloading/hybrid_optimizer.py:108-112 (a pinned fp32 gradient buffer a piece) and
:274-280 (a pinned fp32 master a piece); distrib_optimizer.py:506-584 with
optimizer/param_layout.py:19-42 (backprop order, 64-element starts, bucket ends at multiples of
lcm(dp, 128), each bucket split evenly over dp); dist_checkpointing/strategies/
filesystem_async.py:227-246 (every written tensor copied to the CPU, non-blocking, pinned) —
and PyTorch's CachingHostAllocator's power-of-two blocks."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from jobs import job

from planner.cli.host_text import host_line
from planner.inputs.layout import Layout
from planner.inputs.units import GIB
from planner.model import host_checkpoint, host_memory, host_pinned
from planner.model.muon_layout import layer_shapes
from planner.model.stage_params import stage_params

JOB = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)
TP8 = Layout(tp=8, pp=1, dp=1, zero_stage=1)
MIB = 2**20

# Llama 3.1 8B on one GPU of tp 8, fp32 bytes of each parameter and its power-of-two block:
# QKV (4096 + 2 x 8 x 128) x 4096 / 8 = 3,145,728 elements, 12 MiB -> 16 MiB;
# the output projection 4096 x 4096 / 8, 8 MiB -> 8; fc1 2 x 14336 x 4096 / 8, 56 MiB -> 64;
# fc2 14336 x 4096 / 8, 28 MiB -> 32: 104 MiB a layer in 120 MiB of blocks. The word embedding
# and the output layer: 128,256 padded to a multiple of 128 x 8 = 129,024 rows, / 8 = 16,128 x
# 4096 = 66,060,288 elements, 252 MiB -> 256 each. The norms (2 x 4096 a layer, 4096 at the end)
# take the matrices' ratio.
RATIO = (32 * 120 + 2 * 256) / (32 * 104 + 2 * 252)
PARAMS = 32 * (27_262_976 + 2 * 4096) + 2 * 66_060_288 + 4096


def test_the_rank_holds_the_hand_counted_parameters() -> None:
    # the count the two figures below are per parameter of
    assert sum(stage_params(JOB, TP8, 0, TP8.chunk_layers(32)[0])) == PARAMS


def test_the_offloaded_optimizer_pins_a_block_a_piece() -> None:
    # hybrid_optimizer.py:274-280 and :108-112: two pinned fp32 blocks a parameter (dp 1: the
    # pieces are whole parameters); torch AdamW's two moments are pageable, exact
    assert host_pinned.rank_rounding(JOB, TP8, 0, TP8.chunk_layers(32)[0]) == (
        pytest.approx(RATIO, rel=1e-12),
        1.0,
    )
    off = replace(JOB, optimizer_offload_fraction=1.0)
    want = PARAMS * (8 + 2 * 4 * RATIO)  # 15.99 GiB (16 bytes flat: 14.97)
    assert host_memory.optimizer_bytes(off, TP8) == pytest.approx(want, rel=1e-12)
    assert 15.98 < want / GIB < 16.0


def test_pieces_follow_the_distributed_optimizer_buckets() -> None:
    # params [100, 200] in forward order, dp 2, one bucket: backprop order puts the 200 at
    # [0, 200), the 100 at 256 (64-aligned) to 356; the bucket ends at 384 (a multiple of
    # lcm(2, 128)), each rank 192: rank 0 takes [0, 192), rank 1 the 200's last 8 and the 100
    assert host_pinned.pieces([100, 200], None, 2) == [[192], [8, 100]]
    # bucket_size 150: the 200 closes a bucket at 256 (rank parts of 128: 128 and 72); the 100
    # starts the next at 256, which ends at 384 (parts of 64: 64 and 36)
    assert host_pinned.pieces([100, 200], 150, 2) == [[128, 64], [72, 36]]
    # the fullest rank's blocks over its even share: rank 0's 128 + 64 elements in blocks of
    # 512 + 256 bytes against 4 x 300 / 2 = 600
    assert host_pinned.rounding([100, 200], 150, 2) == pytest.approx((512 + 256) / 600)


def test_a_save_stages_its_share_in_pinned_blocks() -> None:
    # filesystem_async.py:243: every tensor the rank writes is copied to a pinned CPU tensor,
    # a block each; at dp 1 the rank writes all of its stage: the 16-bit weights (2 bytes) and
    # the fp32 master and two fp32 moments (4 + 8), whole parameters, each block's round-up the
    # ratio above (a power-of-two factor of the bytes leaves it as it is)
    assert host_checkpoint.split_bytes(JOB, 1) == (2.0, 12.0)
    assert host_checkpoint.staging_bytes(JOB, TP8) == pytest.approx(PARAMS * 14 * RATIO, rel=1e-12)
    # the offloaded optimizer's state is already host tensors (distrib_optimizer.py:1104-1106),
    # not staged again: the weights alone, 2.13 GiB
    off = replace(JOB, optimizer_offload_fraction=1.0)
    staged = host_checkpoint.staging_bytes(off, TP8)
    assert staged == pytest.approx(PARAMS * 2 * RATIO, rel=1e-12)
    h = host_memory.estimate(off, TP8)
    assert h.checkpoint == staged and h.total == pytest.approx(h.optimizer + staged)


def test_the_save_is_spread_over_the_data_parallel_group() -> None:
    # dp 8 at tp 1: each GPU writes an eighth (fully parallel save); the blocks round up, each
    # under twice its bytes
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=1)
    even = sum(stage_params(JOB, lay, 0, lay.chunk_layers(32)[0])) * 14 / 8
    assert even < host_checkpoint.staging_bytes(JOB, lay) < 2 * even


def test_only_saves_that_stage_pinned_are_counted() -> None:
    # torchtitan's DCP writer copies to pageable memory, a tensor at a time; Megatron-FSDP's
    # synchronous save too; its asynchronous one is counted
    titan = replace(JOB, framework="torchtitan")
    assert host_checkpoint.staging_bytes(titan, TP8) == 0.0
    z3 = Layout(tp=1, pp=1, dp=8, zero_stage=3)
    assert host_checkpoint.staging_bytes(JOB, z3) == 0.0
    assert host_checkpoint.staging_bytes(replace(JOB, async_save=True), z3) > 0.0


def test_the_host_line_names_the_checkpoint_staging() -> None:
    off = replace(JOB, optimizer_offload_fraction=1.0)
    line = host_line(off, host_memory.estimate(off, TP8))
    assert line is not None
    assert "optimizer 16.0" in line and "checkpoint staging 2.1)" in line  # 15.99, 2.13


def test_the_ceiling_is_never_below_the_walk() -> None:
    """`rounding_ceiling` (what the pooled search's caps take without the walk) is no less than
    `rounding` (the walk of the pieces, the oracle) on random parameter lists, bucket sizes and
    data-parallel sizes."""
    rng = random.Random(5)
    for _ in range(300):
        sizes = [rng.choice((1, 7, 64, 4096, rng.randint(1, 3_000_000))) for _ in range(40)]
        bucket = rng.choice((None, 1000, 100_000, 2_000_000))
        dp = rng.choice((1, 2, 3, 8, 64, 128, 512))
        walk = host_pinned.rounding(sizes, bucket, dp)
        assert walk <= host_pinned.rounding_ceiling(sizes, bucket, dp)


def test_a_frozen_model_stages_its_weights_alone() -> None:
    # QA: Megatron's DDP and optimizer skip parameters without requires_grad
    # (distributed_data_parallel.py:180-181, optimizer/__init__.py:332): no optimizer state is
    # saved for a frozen model; the bf16 weights alone, 2 B a parameter, each tensor whole in its
    # block: 2 x PARAMS x RATIO (the ratio of the whole tensors at tp 8, above)
    frozen = replace(JOB, frozen_model=True)
    staged = host_checkpoint.staging_bytes(frozen, TP8)
    assert staged == pytest.approx(2 * PARAMS * RATIO, rel=1e-3)
    assert staged < host_checkpoint.staging_bytes(JOB, TP8) / 5


def test_without_the_distributed_optimizer_the_state_is_staged_whole() -> None:
    # QA: at ZeRO 0 the fp32 masters and moments are saved as whole tensors shaped like the
    # parameters (optimizer.py:1194-1215), so they round as the weights do, not as the
    # distributed optimizer's pieces. tp 4 dp 2, fp32 sizes and blocks a layer: QKV 6,291,456
    # elements 24 MiB -> 32, proj 4,194,304 16 -> 16, fc1 29,360,128 112 -> 128, fc2 14,680,064
    # 56 -> 64: 208 in 240; the embedding and output layer 128,256 padded to 128 x 4 = 128,512
    # rows / 4 x 4096 = 131,596,288 elements, 502 MiB -> 512 each. 14 B a parameter
    # (2 + 4 + 8) over dp 2, the fully parallel save's share
    ratio = (32 * 240 + 2 * 512) / (32 * 208 + 2 * 502)
    params = 32 * (54_525_952 + 2 * 4096) + 2 * 131_596_288 + 4096
    zero0 = Layout(tp=4, pp=1, dp=2, zero_stage=0)
    staged = host_checkpoint.staging_bytes(JOB, zero0)
    assert staged == pytest.approx(14 * params / 2 * ratio, rel=1e-3)


def test_the_layer_sizes_memo_keeps_apart_what_layer_shapes_reads() -> None:
    # chunk_sizes memoises a layer's sizes per job, kind, tp, ep and expert tp, all that
    # muon_layout.layer_shapes reads (its matrices call): asked after other degrees, each
    # layout's sizes equal layer_shapes' own, layer by layer (the oracle)
    moe = job("deepseek-v3", "h800-sxm-80gb", 256, 4096, 512)
    lays = [
        Layout(tp=tp, pp=4, dp=256 // (tp * 4), ep=ep, etp=etp, zero_stage=1)
        for tp, ep, etp in ((1, 8, 1), (2, 8, 1), (2, 16, 2), (4, 8, 1), (1, 32, 1))
    ]
    for lay in lays + lays[::-1]:
        chunks = lay.chunk_layers(moe.arch.num_layers)[1]
        dense, expert = host_pinned.chunk_sizes(moe, lay, 1, 0, chunks)
        want_d: list[int] = []
        want_e: list[int] = []
        for layer in chunks[0]:
            d, e = layer_shapes(moe, lay, layer)
            want_d += [r * c for r, c in d]
            want_e += [r * c for r, c in e]
        assert (dense, expert) == (want_d, want_e), lay.describe()
