"""The pipeline hops with the MTP layers on their own stage (Megatron's `mtp_standalone`).

Oracles: Megatron-LM d98e8a64. The MTP block sends the main hidden states and each depth's
concatenated along the sequence (transformer/multi_token_prediction.py:2038, :2136-2139), the
loss stage splits them (:976): (1 + D) x s x h from the MTP rank to the loss stage, forward and
backward. Under `mtp_standalone` (pipeline_parallel_layer_layout.py:137-151) every `_communicate`
first swaps a (3,) int64 shape each way, waited on (pipeline_parallel/p2p_communication.py:327,
:191-283). The embedding group stays the first and the last pipeline rank
(parallel_state.py:560-566, :1269); finalize_model_grads reduces the first rank's model[0] and
the last rank's model[-1] (distributed/finalize_model_grads.py:145-147, :225-232), the MTP rank
between them takes no part. Hand arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, embedding_grads, mtp_hops, pipeline_p2p

# Llama 3.1 8B, one MTP depth, pp 3 on 3 H100 of one node: the MTP layer ends rank 1, the loss
# alone on rank 2 (`mtp_standalone`); 8 sequences of 4096, mbs 1: m = 8
ALONE = Layout(pp=3, dp=1, pipeline_layout=("E" + "t" * 16, "t" * 16 + "m", "L"))
# vpp 2: rank 1's second chunk holds only the MTP layer, rank 2's only the loss
ALONE_V = Layout(
    pp=3, dp=1, vpp=2, pipeline_layout=("E" + "t" * 8, "t" * 8, "t" * 8, "t" * 8, "m", "L")
)
# S = 4096 tokens x h 4096 x 2 bytes = 33,554,432; H100 NVLink 450 GB/s x 0.80 = 360 GB/s,
# alpha 2 us (catalog; comms.SCALEUP_BUS_EFFICIENCY, LATENCY_SCALE 1):
# p2p(S) = 93.2068 + 2 = 95.2068 us, p2p(2S) = 186.4135 + 2 = 188.4135 us,
# the shape swap p2p(24 B) = 2.0000667 us
P2P_S, P2P_2S, SHAPE = 33_554_432 / 360e9 + 2e-6, 2 * 33_554_432 / 360e9 + 2e-6, 24 / 360e9 + 2e-6


def _mtp_job() -> Job:
    j = job("llama3.1-8b", "h100-sxm-80gb", 3, 4096, 8)
    return replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": 1}))


def test_the_hop_to_the_loss_stage_carries_every_depth() -> None:
    # rank 1 (the slowest: 16 layers and the MTP layer) exchanges with rank 0 an ordinary
    # message and with rank 2 the (1 + 1) x S one, each after a shape swap, every micro-batch:
    # 8 x (95.2068 + 188.4135 + 2 x 2.0000667) us = 2.30096 ms (before: 8 x 2 x 95.2068 us =
    # 1.52331 ms)
    perf = cost.estimate(_mtp_job(), ALONE)
    assert perf.breakdown.pp_comm_exposed == pytest.approx(8 * (P2P_S + P2P_2S + 2 * SHAPE))
    assert perf.breakdown.pp_comm_exposed == pytest.approx(2.30096e-3, rel=1e-5)


def test_each_rank_hops() -> None:
    def at(nbytes: float) -> mtp_hops.Hops:  # a flat 1 GB/s link, no latency
        return ((nbytes / 1e9, nbytes / 1e9),) * 3

    j = _mtp_job()
    s = 1e6  # 1 ms a message, the shape swap 24 ns
    hops = mtp_hops.standalone_hops(j, ALONE, s, at)
    # (previous, next) per rank: wide from rank 1 on (rank 0's previous, rank 2's next unused)
    flat = [x for pair in hops for x in pair]
    assert flat == pytest.approx([1e-3 + 24e-9] * 3 + [2e-3 + 24e-9] * 3)
    # the MTP layer on the loss stage's own rank: nothing changes
    last = Layout(pp=3, dp=1, pipeline_layout=("E" + "t" * 11, "t" * 11, "t" * 10 + "mL"))
    assert mtp_hops.standalone_rank(j, last) is None
    assert mtp_hops.standalone_hops(j, last, s, at) == ()


def test_interleaved_exposes_the_wide_hop_and_the_shape_swaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one wide boundary (rank 1 -> 2), its excess p2p(2S) - p2p(S) = 93.2068 us on the fill and
    # on the drain; a blocking shape swap before each of 2 calls per micro-batch and chunk:
    # 2 x 8 x 2 x 2.0000667 us. 2 x 93.2068 + 64.0021 = 250.4157 us more than the ordinary
    # message's interleaved exposure (before: nothing more)
    j = _mtp_job()
    assert mtp_hops.standalone_rank(j, ALONE_V) == 1
    with_extra = cost.estimate(j, ALONE_V).breakdown.pp_comm_exposed
    monkeypatch.setattr(pipeline_p2p, "interleaved_extra", lambda *a: 0.0)
    without = cost.estimate(j, ALONE_V).breakdown.pp_comm_exposed
    extra = 2 * (P2P_2S - P2P_S) + 2 * 8 * 2 * SHAPE
    assert with_extra - without == pytest.approx(extra)
    assert extra == pytest.approx(250.4157e-6, rel=1e-5)


def test_standalone_mtp_rank_is_outside_the_embedding_group() -> None:
    # the all-reduce runs on ranks 0 and 2 only: V 128256 / tp 1 x h 4096 x 4 bytes (fp32 main
    # gradient) = 2,101,346,304 bytes; rank 1 (the MTP rank, neither first nor last) none
    j = _mtp_job()
    assert embedding_grads.sync_bytes(j, ALONE) == 128256 * 4096 * 4
    assert embedding_grads.sync_time(j, ALONE, 1) == 0.0
    assert embedding_grads.sync_time(j, ALONE, 0) == embedding_grads.sync_time(j, ALONE, 2) > 0
