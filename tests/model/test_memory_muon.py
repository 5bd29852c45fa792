"""Megatron's Muon optimizer (--optimizer muon): its states, and the layer-wise distributed
optimizer's whole-parameter sharding (planner.model.optimizer_states).

Oracle: hand arithmetic from the shapes in the comments. The model is the functional test
moe/gpt3_moe_mcore_te_ep8_*'s: 12 layers, h 512, 8 heads, 8 experts of width 1024 (ep 8, one per
GPU), no linear biases, learned positions, GPT-2's 50,257 tokens padded to 50,304, tied. Megatron
(d98e8a64 emerging_optimizers.py) puts the 2-D decoder matrices on Muon (fp32 master + fp32
momentum, 8 bytes) and the rest on Adam (12 bytes); layer_wise_optimizer.py
`_shard_params_ping_pong` deals whole parameters, largest last, to the data-parallel ranks."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.plan import Plan, parse_plan
from planner.model import memory

LINE = (
    "--num-layers 12 --hidden-size 512 --num-attention-heads 8 --micro-batch-size 4 "
    "--global-batch-size 32 --seq-length 1024 --max-position-embeddings 1024 "
    "--disable-bias-linear --bf16 --expert-model-parallel-size 8 --num-experts 8 "
    "--moe-router-topk 2 --moe-ffn-hidden-size 1024 --moe-grouped-gemm "
    "--moe-token-dispatcher-type allgather --tokenizer-type GPT2BPETokenizer "
)

# per layer on Muon: QKV 1536 x 512 + projection 512 x 512 + router 8 x 512 = 1,052,672 (the
# two norms' 2 x 1024 weights and biases stay on Adam in Megatron; planner counts them with the
# layer, 2,048 of 1,054,720); one expert's fc1 + fc2, 2 x 512 x 1024 = 1,048,576
DENSE_DECODER = 12 * 1_054_720
EXPERT = 12 * 1_048_576
# on Adam: the word embedding 50,304 x 512, positions 1024 x 512, the final norm 2 x 512
WORDS = 50_304 * 512
EDGE = WORDS + 1024 * 512 + 1024


def plan(extra: str) -> Plan:
    return parse_plan(megatron_args.read(LINE + extra, "h100-sxm-80gb", 8, "t", 50_257).doc)


def optimizer_bytes(extra: str) -> float:
    p = plan(extra)
    assert p.layout is not None
    return memory.estimate(p.job, p.layout).stages[-1].optimizer


def test_the_reader_reads_muon_and_its_sharding_path() -> None:
    assert plan("").job.optimizer == "adam"
    muon = plan("--optimizer muon --use-distributed-optimizer")
    assert (muon.job.optimizer, muon.job.muon_whole_params) == ("muon", False)
    legacy = plan("--optimizer muon --use-distributed-optimizer --no-use-layer-wise-param-layout")
    assert legacy.job.muon_whole_params
    # Muon is modelled (no note); other optimizers keep the note
    reading = megatron_args.read(LINE + "--optimizer muon", "h100-sxm-80gb", 8, "t", 50_257)
    assert not any(n.startswith("--optimizer") for n in reading.not_modelled)
    reading = megatron_args.read(LINE + "--optimizer sgd", "h100-sxm-80gb", 8, "t", 50_257)
    assert any(n.startswith("--optimizer") for n in reading.not_modelled)


def test_muon_keeps_eight_bytes_per_decoder_matrix_element_without_sharding() -> None:
    adam = 12 * (DENSE_DECODER + EXPERT + EDGE)
    assert optimizer_bytes("") == pytest.approx(adam)
    # 4 bytes fewer per decoder matrix element; the layers' 2,048 norm elements each stay on Adam
    # (emerging_optimizers.py:140-147 `_is_muon_excluded`): 4 x (25,239,552 - 24,576)
    muon_matrices = DENSE_DECODER - 12 * 2048 + EXPERT
    assert optimizer_bytes("--optimizer muon") == pytest.approx(adam - 4 * muon_matrices)


def test_layer_wise_layout_path_shards_like_the_distributed_optimizer() -> None:
    # Adam's states (norms and the edge) over dp = 8; the experts' over their data-parallel
    # group, 8 / ep 8 = 1. Muon's matrices are dealt whole (layer_wise_optimizer.py:258-345, one
    # bucket without --overlap-grad-reduce), by Newton-Schulz cost, descending: the 12 QKVs
    # (786,432 each) one to every shard, then four more to shards 0-3; the 12 projections
    # (262,144) to shards 4-7, three each; the 12 routers (4,096) two each to shards 0-3 at the
    # cheapest: the fullest holds 2 x 786,432 + 2 x 4,096 = 1,581,056 (even share 1,579,008)
    want = 8 * 1_581_056 + 12 * (12 * 2048 + EDGE) / 8 + 8 * EXPERT
    assert optimizer_bytes("--optimizer muon --use-distributed-optimizer") == pytest.approx(want)


def test_whole_parameter_path_keeps_the_word_embedding_whole_on_one_rank() -> None:
    dist = "--optimizer muon --use-distributed-optimizer"
    legacy = optimizer_bytes(dist + " --no-use-layer-wise-param-layout")
    # every dense parameter dealt whole by size, ascending, over ranks 0..7,7..0
    # (`_shard_params_ping_pong`, :726, :740, :744-754): 50 norm tensors of 512, 12 routers,
    # 12 projections, the positions, 12 QKVs, then the word embedding at index 87 -> rank 7,
    # which also takes indices 55-56 (two routers) and 71-72 (two projections). planner spreads
    # the small tensors and the positions (Adam's, 12 B) evenly over the 8 ranks.
    rank7 = 12 * WORDS + 8 * (2 * 4096 + 2 * 262_144) + 12 * (50 * 512 + 1024 * 512) / 8
    assert legacy == pytest.approx(rank7 + 8 * EXPERT)
    # the same sharding under Adam is Megatron's distributed optimizer: no whole parameters
    assert optimizer_bytes("--use-distributed-optimizer --no-use-layer-wise-param-layout") == (
        pytest.approx(12 * (DENSE_DECODER + EDGE) / 8 + 12 * EXPERT)
    )
