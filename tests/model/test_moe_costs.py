"""The MoE layer's router GEMM and token permutations are timed (no model FLOPs count them).

Oracle: hand arithmetic. Mixtral 8x7B (h 4096, 8 experts, top-2) on H100, tp 1, one micro-batch of
4096 tokens, routing load L (routing_load.memory_load): the permutations move 16 bytes per routed
element, 16 x 4096 x 2 x L x 4096 bytes at the achieved HBM bandwidth where they handle what
arrives (the fused dispatchers); Megatron's alltoall dispatcher permutes the rank's own 4096 x 2
copies at load 1 (token_dispatcher.py @ d98e8a64 :556, :671-675, num_out_tokens = tokens x top_k)
and, where a rank holds more than one expert, sorts the arrived copies by local expert and back
(`sort_chunks_by_idxs` whenever num_local_experts > 1; with experts split over etp ranks, the
copies its etp group gathered), those at L;
the router is a 4096 x 4096 x 8 GEMM on the additive roofline (gemm.gemm_time).
"""

from __future__ import annotations

import pytest
from jobs import job

from planner.inputs.hybrid import layer_kind
from planner.inputs.layout import Layout
from planner.model import layer_time, moe_time
from planner.model.activations import layer_bytes
from planner.model.gemm import gemm_time
from planner.model.layer_time import gpu_of
from planner.model.routing_load import memory_load, step_load
from planner.model.shard import Shard


def test_router_and_permutation_by_hand() -> None:
    j = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 8)
    lay = Layout(tp=1, pp=1, dp=8)
    gpu = gpu_of(j)
    load = memory_load(j, Layout(tp=1, pp=1, dp=8))
    perm = 16 * 4096 * 2 * load * 4096 / gpu.hbm
    own = perm / load  # the alltoall dispatcher's permute of the rank's own copies, at load 1
    # ep 1: all 8 experts are local, so the alltoall dispatcher sorts: own + the arrived copies
    assert moe_time.permute_time(j, lay, gpu, 4096.0, load) == pytest.approx(own + perm)
    # one expert per rank (ep 8): its own copies alone; a fused dispatcher permutes on arrival
    one_each = Layout(tp=1, pp=1, dp=8, ep=8)
    assert moe_time.permute_time(j, one_each, gpu, 4096.0, load) == pytest.approx(own)
    flex = Layout(tp=1, pp=1, dp=8, ep=4, moe_token_dispatcher_type="flex")
    assert moe_time.permute_time(j, flex, gpu, 4096.0, load) == pytest.approx(perm)
    router = gemm_time(4096, 4096, 8, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)
    assert moe_time.router_time(j, lay, gpu, 4096.0) == pytest.approx(router)
    # with sequence parallelism over tp 2 each rank routes and permutes half the tokens, and
    # with the experts split over etp 2 (Megatron's default etp = tp) it sorts the copies its
    # etp pair gathered: its own half at load 1, both halves at L once more, own / 2 + perm
    sp = Layout(tp=2, pp=1, dp=4, sequence_parallel=True)
    assert moe_time.permute_time(j, sp, gpu, 4096.0, load) == pytest.approx(own / 2 + perm)
    # at etp 1 the sort is of its own half only: (own + perm) / 2
    sp_etp1 = Layout(tp=2, pp=1, dp=4, etp=1, sequence_parallel=True)
    assert moe_time.permute_time(j, sp_etp1, gpu, 4096.0, load) == pytest.approx((own + perm) / 2)
    # a fused dispatcher over etp 2 x ep 2 permutes on arrival the copies of both etp ranks
    flex_etp = Layout(
        tp=2, pp=1, dp=4, ep=2, sequence_parallel=True, moe_token_dispatcher_type="flex"
    )
    assert moe_time.permute_time(j, flex_etp, gpu, 4096.0, load) == pytest.approx(2 * perm / 2)


def test_permutations_split_half_forward(monkeypatch: pytest.MonkeyPatch) -> None:
    # doubling the bytes per element adds one more permutation time P: the forward's permute and
    # unpermute move the same bytes as their reverses in the backward, so P / 2 each way; and
    # recomputing the MoE block (--recompute-modules moe) re-runs the forward's P / 2
    j = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 8)
    lay = Layout(tp=1, pp=1, dp=8)
    gpu = gpu_of(j)
    # ep 1: every rank permutes exactly its own tokens' copies (routing_load.step_load = 1)
    perm = moe_time.permute_time(j, lay, gpu, 4096.0, 1.0)
    rec = lay.with_(recompute="selective", recompute_modules=("moe",))
    base, base_rec = (layer_time.layer_time(j, x, gpu, True) for x in (lay, rec))
    monkeypatch.setattr(moe_time, "PERMUTE_BYTES_PER_ELEMENT", 32.0)
    double, double_rec = (layer_time.layer_time(j, x, gpu, True) for x in (lay, rec))
    assert double.fwd - base.fwd == pytest.approx(perm / 2)
    assert double.bwd - base.bwd == pytest.approx(perm / 2)
    assert double_rec.recompute - base_rec.recompute == pytest.approx(perm / 2)


def test_elementwise_traffic_counts_the_step_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # The elementwise proxy (ELEMENTWISE_PASSES x the layer's saved bytes) counts the routed
    # pairs at the step's load (routing_load.step_load), as the GEMMs and permutations do, not at
    # memory's planning bound. Mixtral 8x7B, tp 1, 4096 tokens: each routed pair saves fc1's input
    # 2h, fc1's gated output 2 x 2F, the activation 2F and the fp32 probability 4
    # (activations module docstring): 2 x 4096 + 6 x 14336 + 4 = 94,212 bytes. At ep 1 the step
    # load is 1 where memory plans 1.2: the proxy is 0.2 x 2 x 4096 pairs x 94,212 bytes lighter.
    # Of what is left the proxy leaves out each pair's fc1 input (2h = 8,192 bytes of the 2 x 4096
    # pairs at load 1), which only the token permutation writes and reads (priced there).
    # One pass more (ELEMENTWISE_PASSES + 1) lengthens the layer's forward + backward by the
    # proxy's bytes at the HBM rate, so the step-time layer must grow by the lighter count.
    j = job("mixtral-8x7b", "h100-sxm-80gb", 8, 4096, 8)
    lay = Layout(tp=1, pp=1, dp=8)
    assert step_load(j, lay) == 1.0
    assert memory_load(j, lay) == pytest.approx(1.2)
    kind = layer_kind(True)
    sh = Shard(tokens=4096, tp=1, etp=1, seq_per_cp_rank=4096, micro_batch_size=1)
    planned = layer_bytes(j.arch, kind, sh, recompute=False)  # Shard's default load, 1.2
    pair = 2 * 4096 + 6 * 14336 + 4
    at_step = planned - 0.2 * 2 * 4096 * pair - 2 * 4096 * (2 * 4096)
    gpu = gpu_of(j)
    base = layer_time.layer_time(j, lay, gpu, kind)
    monkeypatch.setattr(layer_time, "ELEMENTWISE_PASSES", layer_time.ELEMENTWISE_PASSES + 1)
    more = layer_time.layer_time(j, lay, gpu, kind)
    grown = (more.fwd + more.bwd) - (base.fwd + base.bwd)
    assert grown == pytest.approx(at_step / gpu.hbm, rel=1e-9)
