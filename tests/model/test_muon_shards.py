"""Muon's optimizer states on the fullest GPU: the layer-wise optimizer's whole-matrix shards
(`planner.model.muon_layout.largest_shards`, `planner.model.optimizer_states`) and the legacy
whole-parameter deal (`planner.model.muon_shards`).

Oracles:
- Hand arithmetic (comments) on a 2-layer GPT, h 256, 4 heads, FFN 1,024, no linear biases,
  GPT-2's 50,257 tokens padded to 50,304, 1,024 learned positions, tied, at dp 4, following
  Megatron-LM d98e8a64 layer_wise_optimizer.py: matrices sorted by Newton-Schulz cost
  max x min^2 (:258-273, :316), each to the least-loaded shard whose cursor stays within 1.3 x
  the even share (:313-324), rank r keeping shard r's states (:667-703); the norms' weights and
  biases on Adam (emerging_optimizers.py:145-147, `_is_muon_excluded`: not 2-D).
- Brute force: a re-implementation, written here from layer_wise_optimizer.py:242-421 (the
  layout) and :724-754 (the ping-pong deal), over random matrix lists.
"""

from __future__ import annotations

import math
import random

import pytest

from planner.inputs import megatron_args
from planner.inputs.plan import Plan, parse_plan
from planner.model import muon_layout, stage_params
from planner.model.muon_layout import lay_out
from planner.model.muon_shards import ping_pong_max
from planner.model.optimizer_states import muon_optimizer_bytes

LINE = (
    "--num-layers 2 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 1024 "
    "--micro-batch-size 1 --global-batch-size 16 --seq-length 1024 "
    "--max-position-embeddings 1024 --disable-bias-linear --bf16 "
    "--tokenizer-type GPT2BPETokenizer --optimizer muon "
)


def plan(extra: str) -> Plan:
    return parse_plan(megatron_args.read(LINE + extra, "h100-sxm-80gb", 4, "t", 50_257).doc)


def bytes_of(p: Plan) -> float:
    job, lay = p.job, p.layout
    assert lay is not None
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    dense, expert = stage_params.stage_params(job, lay, 0, chunks)
    decoder = stage_params.decoder_params(job, lay, chunks)
    words = job.arch.padded_vocab(lay.tp) * job.arch.hidden_size / lay.tp
    largest = min(dense - decoder[0], words)  # as rank_states passes it
    shards = (lay.dense_dp, lay.expert_dp)
    return muon_optimizer_bytes(job, lay, (dense, expert), decoder, largest, shards, (0, chunks))


# per layer: QKV 768 x 256 = 196,608, proj 256 x 256 = 65,536, fc1 1,024 x 256 and fc2
# 256 x 1,024 = 262,144 each: 786,432; 2 layers 1,572,864, a quarter 393,216, cap 511,180.8.
# By cost (fc 1,024 x 256^2 > QKV 768 x 256^2 > proj 256^3) the four FCs take shards 0-3,
# the QKVs shards 0 and 1 (458,752 each), the projections cannot join them (524,288 > cap) and
# go to shards 2 and 3 (327,680): the fullest shard holds 458,752, 65,536 over the even share
MATRICES = 1_572_864
FULLEST = 458_752
# on Adam: the word embedding 50,304 x 256, positions 1,024 x 256, the final norm 2 x 256 and
# the layers' two norms' weights and biases, 2 x 2 x 2 x 256 = 2,048
NORMS = 2_048
EDGE = 50_304 * 256 + 1_024 * 256 + 512


def test_the_small_model_is_as_the_comments_say() -> None:
    p = plan("--use-distributed-optimizer")
    assert p.layout is not None and p.layout.dense_dp == 4
    chunks = p.layout.chunk_layers(2)[0]
    assert muon_layout.matrix_elements(p.job, p.layout, chunks) == (MATRICES, 0)
    dense = stage_params.stage_params(p.job, p.layout, 0, chunks)[0]
    assert dense == MATRICES + NORMS + EDGE


def test_fullest_shard_by_hand_at_dp_4() -> None:
    p = plan("--use-distributed-optimizer")
    assert p.layout is not None
    chunks = p.layout.chunk_layers(2)[0]
    assert muon_layout.largest_shards(p.job, p.layout, 0, chunks) == (FULLEST, 0)
    # 8 bytes on the fullest shard's matrices, 12 on a quarter of everything else:
    # 8 x 458,752 + 12 x (2,048 + 13,140,480) / 4 = 3,670,016 + 39,427,584
    # (before: every decoder parameter at 8 bytes, an even quarter of each:
    # 8 x (1,572,864 + 2,048) / 4 + 12 x 13,140,480 / 4 = 42,571,264)
    assert bytes_of(p) == pytest.approx(43_097_600)


def test_norms_take_adams_bytes_without_sharding() -> None:
    p = plan("")
    # 8 x 1,572,864 + 12 x (2,048 + 13,140,480); before, the norms at 8: 8,192 bytes fewer
    assert bytes_of(p) == pytest.approx(8 * MATRICES + 12 * (NORMS + EDGE))


def test_whole_parameter_deal_against_the_full_parameter_list() -> None:
    p = plan("--use-distributed-optimizer --no-use-layer-wise-param-layout")
    assert p.job.muon_whole_params
    # Megatron's list on this GPU (:736-740): ten 256-element norm weights and biases (Adam),
    # the matrices and the 1,024 x 256 positions (2-D, not tagged an embedding,
    # language_module.py:229-236: Muon's), the tied word embedding (Adam); dealt ping-pong
    items = [(256, 12)] * 10 + [(65_536, 8)] * 2 + [(196_608, 8)] * 2 + [(262_144, 8)] * 5
    items += [(50_304 * 256, 12)]
    loop = [0, 1, 2, 3, 3, 2, 1, 0]
    ranks = [0] * 4
    for i, (n, per) in enumerate(sorted(items, key=lambda item: item[0])):
        ranks[loop[i % 8]] += n * per
    exact = max(ranks)  # 156,637,184: rank 3, the embedding's
    # planner deals the matrices and the embedding from position 10 (the ten norm tensors) as
    # Megatron does; it spreads the positions' and norms' states evenly at 12 bytes:
    # 12 x (262,144 + 2,560) / 4 = 794,112 on rank 3 in place of the positions' nothing there
    # and the two norm tensors rank 3 is dealt (positions 3 and 4 of the loop), 12 x 2 x 256
    # (before: a quarter of all but the embedding, 158,471,680)
    assert bytes_of(p) == pytest.approx(exact + 794_112 - 12 * 2 * 256)


# --- brute force ----------------------------------------------------------------------------


def pad64(x: int) -> int:
    return (x + 63) // 64 * 64


def reference_rank_elements(
    shapes: list[tuple[int, int]], bucket: int | None, dp: int
) -> list[int]:
    """Each rank's matrix elements under _compute_per_buffer_param_layout (:242-421)."""
    divisor = math.lcm(64, math.lcm(dp, 128) // dp)
    compute = [0] * dp
    owned = [0] * dp

    def cost(s: tuple[int, int]) -> int:
        return max(s) * min(s) ** 2

    def emit(chunk: list[tuple[int, int]]) -> None:
        if not chunk:
            return
        cap = sum(a * b for a, b in chunk) / dp * 1.3
        cursor = [0] * dp
        for s in sorted(chunk, key=lambda s: -cost(s)):
            n = s[0] * s[1]
            ok = [i for i in range(dp) if pad64(cursor[i]) + n <= cap]
            i = min(ok, key=lambda i: compute[i]) if ok else min(range(dp), key=lambda i: cursor[i])
            cursor[i] = pad64(cursor[i]) + n
            compute[i] += cost(s)
            owned[i] += n

    chunk: list[tuple[int, int]] = []
    total = biggest = 0
    est = [0] * dp
    for s in reversed(shapes):
        n = s[0] * s[1]
        if bucket is not None and chunk:
            thresh = max(bucket, int(dp * biggest * 0.9))
            target = -(-max(est) // divisor) * divisor
            if total >= thresh and not pad64(min(est)) + n <= target:
                emit(chunk)
                chunk, total, biggest, est = [], 0, 0, [0] * dp
        j = min(range(dp), key=lambda i: est[i])
        est[j] = pad64(est[j]) + n
        chunk.append(s)
        total += n
        biggest = max(biggest, n)
    emit(chunk)
    return owned


def test_fullest_shard_matches_a_reimplementation_on_random_lists() -> None:
    rng = random.Random(7)
    for _ in range(300):
        dp = rng.choice([2, 3, 4, 8, 16])
        shapes = [
            (64 * rng.randint(1, 24), 64 * rng.randint(1, 24)) for _ in range(rng.randint(1, 30))
        ]
        shapes += [(rng.randint(1, 900), rng.randint(1, 900)) for _ in range(rng.randint(0, 5))]
        bucket = rng.choice([None, 50_000, 200_000, 1_000_000])
        want = reference_rank_elements(shapes, bucket, dp)
        held = lay_out(shapes, bucket, dp)[1]
        assert held == want
        assert sum(held) == sum(a * b for a, b in shapes)


def test_ping_pong_is_the_worst_over_the_unlisted_small_parameters() -> None:
    rng = random.Random(11)
    for _ in range(200):
        dp = rng.choice([1, 2, 3, 4, 8])
        items = [
            (float(rng.randint(10, 10_000)), rng.choice([8.0, 12.0]))
            for _ in range(rng.randint(1, 40))
        ]
        worst = 0.0
        for small in range(2 * dp):  # k tiny parameters (no states here) dealt first, :740
            listed = [(1.0, 0.0)] * small + items
            order = sorted(listed, key=lambda x: x[0])
            loop = list(range(dp)) + list(range(dp))[::-1]
            ranks = [0.0] * dp
            for i, (n, b) in enumerate(order):
                ranks[loop[i % len(loop)]] += n * b
            worst = max(worst, *ranks)
            assert ping_pong_max(items, dp, small) == pytest.approx(max(ranks))
        assert ping_pong_max(items, dp) == pytest.approx(worst)
