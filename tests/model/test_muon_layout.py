"""The padding of Muon's layer-wise buffers (`planner.model.muon_layout`).

Oracles:
- Hand arithmetic on 64 x 64 matrices (4,096 elements) over 2 shards, following Megatron-LM
  d98e8a64 layer_wise_optimizer.py: the shard divisor lcm(64, lcm(2, 128) / 2) = 64 (:184-193);
  a bucket's cap 1.3 x the even share (:313-315), the emptiest shard where none fits (:326),
  every shard padded to the largest (:332); a bucket closes at max(bucket_size, int(0.9 x dp x
  largest)) when the next matrix is not absorbed (:409-411, :383-388).
- Llama 3.1 8B at TP 2 (per layer QKV 3,072 x 4,096, proj 4,096 x 2,048, fc1 14,336 x 4,096,
  fc2 4,096 x 7,168; 32 layers): the buffer sizes an independent re-derivation of the same
  lines gave (a read-only QA's script, lw_pad.py: 3,808,428,032 at dp 4, 3,758,096,384 at dp 8,
  4,093,640,704 at dp 16, against 3,489,660,928 elements of matrices; one bucket, as on a
  pipeline rank past the first, training.py:2508-2515: no padding at dp 4).
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import rank_states
from planner.model.muon_layout import buffer_numel, padding

SQ = (64, 64)
LLAMA_TP2 = [(3072, 4096), (4096, 2048), (14336, 4096), (4096, 7168)] * 32


def test_three_matrices_on_two_shards_by_hand() -> None:
    # cap 3 x 4096 / 2 x 1.3 = 7987.2: shard 0 then shard 1 take one each, the third fits
    # neither (8192 > 7987.2) and goes to the emptiest (shard 0): shards 8192 and 4096, padded
    # to 8192 each: 16384 for 12288 elements
    assert buffer_numel([SQ] * 3, None, 2) == 16384


def test_buckets_close_at_their_size_by_hand() -> None:
    # bucket_size 8192: two matrices fill one bucket (one a shard, no padding); the fifth
    # is a bucket alone, its other shard all padding: 3 buckets of 8192
    assert buffer_numel([SQ] * 4, 8192, 2) == 16384
    assert buffer_numel([SQ] * 5, 8192, 2) == 3 * 8192


@pytest.mark.parametrize(
    ("dp", "numel"), [(4, 3_808_428_032), (8, 3_758_096_384), (16, 4_093_640_704)]
)
def test_llama_8b_tp2_buckets(dp: int, numel: int) -> None:
    assert buffer_numel(LLAMA_TP2, max(40_000_000, 1_000_000 * dp), dp) == numel


def test_rank_states_count_the_padding() -> None:
    """Llama 3.1 8B, tp 2, dp 4, Muon with the distributed optimizer: 318,767,104 elements of
    padding, 4 B in the fp32 gradient buffer and 2 B in the bf16 parameter buffer (1.78 GiB,
    which planner counted none of); on pipeline rank 1 of pp 2 one bucket, none."""
    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, optimizer="muon")
    lay = Layout(tp=2, pp=1, dp=4, zero_stage=1)
    chunks = lay.chunk_layers(32)[0]
    assert padding(j, lay, 0, chunks) == (318_767_104, 0.0)
    base = Layout(tp=2, pp=1, dp=4, zero_stage=0)
    w, g = rank_states.rank_state(j, lay, 0, chunks)[:2]
    w0, g0 = rank_states.rank_state(j, base, 0, chunks)[:2]
    assert w - w0 == 2 * 318_767_104
    assert g - g0 == 4 * 318_767_104
    j2 = job("llama3.1-8b", "h100-sxm-80gb", 16, 4096, 64, optimizer="muon")
    pp2 = Layout(tp=2, pp=2, dp=4, zero_stage=1)
    assert padding(j2, pp2, 1, pp2.chunk_layers(32)[1]) == (0.0, 0.0)
