"""Tests for planner.model.cost's communication: TP overlap and windows, exposed DP traffic, the
EP all-to-all with and without overlap, and FP8 parameter gathers.

Oracles: monotonic properties any correct step-time model has (each could fail: a sign error, a
group placed on the wrong tier, a bubble or overlap computed the wrong way round), the breakdown's
own arithmetic, hand arithmetic in comments (the DP traffic of Llama 3.1 70B from its published
shape and NCCL's (n-1)/n S/B, the EP all-to-all by hand).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from cost_jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.model import (
    comms,
    cost,
    gemm_shapes,
    layer_time,
    layer_tp,
    stage_sync,
    stage_time,
)
from planner.model.layer_time import gpu_of


def test_tp_comm_overlap_hides_traffic() -> None:
    j = job("llama3.1-70b", num_gpus=64, gbs=64)
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True)
    off = cost.estimate(j, lay)
    on = cost.estimate(j, lay.with_(tp_comm_overlap=True))
    assert on.breakdown.tp_comm_exposed < off.breakdown.tp_comm_exposed
    # the same collectives (Layer.tp_traffic), split differently; userbuffers move them at the
    # link's point-to-point rate, NCCL's calls at its measured ring share of 8 H100 ranks (0.915,
    # nccl_shares.NCCL_NVLINK_SHARE) with its 16.8 us call each. What the layer shows: without the
    # overlap the exposed part plus the SMs the hidden part takes from the GEMMs under it
    # (comms.sm_share of it); with it the exposed part plus the SM margin its pipelined and bulk
    # overlaps hold on their GEMMs (tests/model/test_tp_overlap.py), not a share of the hidden
    f = comms.sm_share(j.cluster)
    gpu = gpu_of(j)
    a = layer_time.layer_time(j, lay, gpu, False)
    b = layer_time.layer_time(j, lay.with_(tp_comm_overlap=True), gpu, False)
    assert b.tp_traffic < a.tp_traffic
    assert a.tp == pytest.approx(a.tp_traffic - (1 - f) * a.tp_hidden)
    assert b.tp_hidden > a.tp_hidden


def test_slower_network_exposes_more_dp_traffic() -> None:
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True, micro_batch_size=1)
    fast = cost.estimate(job("llama3.1-70b", gbs=32, ib_gb_per_s=50), lay)
    slow = cost.estimate(job("llama3.1-70b", gbs=32, ib_gb_per_s=5), lay)
    assert slow.breakdown.dp_comm_exposed > fast.breakdown.dp_comm_exposed
    assert slow.tokens_per_s_per_gpu < fast.tokens_per_s_per_gpu


def test_dp_sync_after_the_backward_is_all_exposed() -> None:
    """Without --overlap-grad-reduce / --overlap-param-gather nothing hides the DP traffic: the
    exposed time is the whole reduce-scatter plus all-gather, the same total that the overlapped
    layout splits into exposed and hidden.

    By hand. Llama 3.1 70B at tp 8, pp 1: each GPU holds 1/8 of every decoder layer's matrices
    (QKV 8192 x (8192 + 2 x 1024) = 83,886,080, projection 8192^2 = 67,108,864, SwiGLU MLP
    3 x 8192 x 28672 = 704,643,072: 855,638,016 per layer), the layer's two RMSNorms whole
    (Megatron replicates them over TP: 16,384), 1/8 of the embedding and of the untied output
    layer (vocabulary 128,256 padded to a multiple of 128 x tp = 1024: 129,024 x 8192 each) and
    the final norm (8192):
        80 x 855,638,016 / 8 + 80 x 16,384 + 2 x 129,024 x 8192 / 8 + 8192 = 8,821,940,224.
    Its DP group is 8 ranks 8 apart, one per node: everything crosses the NICs, 5 GB/s x 0.92
    achieved. Without the overlap Megatron's DDP sends it in one bucket (bucket_size None,
    training.py:2192-2193 at d98e8a64), a ring (NCCL runs reduce-scatter and all-gather only as
    rings) of 7 steps of 5 us, and NCCL's call, 16.8 us (nccl_shares.NCCL_CALL_S):
        reduce-scatter of fp32 gradients  7/8 x 4 B x 8,821,940,224 / 4.6e9 B/s = 6.712347 s
        all-gather of bf16 parameters     7/8 x 2 B x 8,821,940,224 / 4.6e9 B/s = 3.356173 s
        latency                           2 x 1 x 7 x 5 us                    = 0.000070 s
        calls                             2 x 1 x 16.8 us                     = 0.000034 s
    10.068624 s in all. The model divides the norms by tp too (80 x 16,384 x 7/8 = 1,146,880
    parameters fewer, 0.013%): rel 2e-4. With the overlap the hidden part still takes
    comms.sm_share of the SMs from the compute it hides under: that much of it shows too."""
    j = job("llama3.1-70b", gbs=32, ib_gb_per_s=5)
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True)
    on = cost.estimate(j, lay).breakdown
    off = cost.estimate(j, lay.with_(overlap_grad_reduce=False, overlap_param_gather=False))
    whole = 10.068624
    assert off.breakdown.dp_comm_exposed == pytest.approx(whole, rel=2e-4)
    assert off.breakdown.dp_comm_hidden == 0
    f = comms.sm_share(j.cluster)
    total = on.dp_comm_exposed - f * on.dp_comm_hidden + on.dp_comm_hidden
    # overlapped, the same bytes go in buckets of max(40M, 1M x 8) parameters: ceil(8,821,940,224
    # / 40M) = 221 rings each way, 220 more latencies (7 x 5 us) and calls (16.8 us) each way:
    # 2 x 220 x 51.8 us = 0.022792 s more
    assert total - off.breakdown.dp_comm_exposed == pytest.approx(0.022792, rel=1e-6)
    assert on.dp_comm_exposed < total
    # the step grows by what the overlap hides, less the SMs the hidden part held and the
    # buckets' latencies it no longer pays
    grew = (1 - f) * on.dp_comm_hidden - 0.022792
    assert off.step_time_s - on.step_time == pytest.approx(grew, rel=1e-5)
    # only the gradient reduction exposed: the all-gather still hides in the first forward
    grad_only = cost.estimate(j, lay.with_(overlap_param_gather=False)).breakdown
    assert on.dp_comm_exposed < grad_only.dp_comm_exposed < total


def test_ep_all_to_all_is_counted_for_moe() -> None:
    j = job("mixtral-8x7b", num_gpus=64, gbs=256)
    lay = Layout(tp=1, pp=4, dp=16, ep=8, vpp=8)
    p = cost.estimate(j, lay)
    assert p.breakdown.ep_comm_exposed > 0
    assert cost.estimate(j, replace(lay, ep=1)).breakdown.ep_comm_exposed == 0


def test_ep_exposed_by_hand() -> None:
    lay = Layout(pp=4, vpp=2, dp=2, ep=8)
    f = 20 / 132  # comms.COMM_KERNEL_SMS of an H100's 132 SMs
    assert comms.sm_share(job().cluster) == pytest.approx(f)
    assert stage_time.ep_exposed(lay, 0, 8, 10.0, 4.0, f) == (10.0, 0.0)  # no overlap: all
    ov = lay.with_(ep_comm_overlap=True)
    # rank 3 runs 5 of its 16 chunk forwards (and backwards) alone (its warm-up (vpp - 1) x pp
    # = 4, and the overlap's one more): 5/16 x 10 + 11/16 x (10 - 4) shows, 11/16 x 4 = 2.75
    # hides and takes f of the SMs from the compute it hides under
    shown = 5 / 16 * 10 + 11 / 16 * 6
    assert stage_time.ep_exposed(ov, 3, 8, 10.0, 4.0, f) == pytest.approx((shown + 2.75 * f, 2.75))
    # a window longer than the all-to-all hides all of the merged share: 5/16 x 10 shows
    long = stage_time.ep_exposed(ov, 3, 8, 10.0, 40.0, f)
    assert long == pytest.approx((50 / 16 + 110 / 16 * f, 110 / 16))


def test_ep_overlap_hides_the_all_to_all_under_the_merged_compute() -> None:
    # Mixtral 8x7B, one stage, ep 8 inside a node: the all-to-all is shorter than a micro-batch's
    # compute, so only the first forward's and the last backward's show, 1/m of it; the rest
    # hides, slowing the compute under it by comms.sm_share of itself
    j = job("mixtral-8x7b", num_gpus=16, gbs=64)
    lay = Layout(tp=1, pp=1, dp=16, ep=8)
    m = lay.num_microbatches(64)
    f = comms.sm_share(j.cluster)
    off, on = cost.estimate(j, lay), cost.estimate(j, lay.with_(ep_comm_overlap=True))
    a2a = off.breakdown.ep_comm_exposed
    assert 0 < a2a < 0.5 * off.breakdown.compute
    hidden = a2a * (1 - 1 / m)
    assert on.breakdown.ep_comm_hidden == pytest.approx(hidden)
    assert on.breakdown.ep_comm_exposed == pytest.approx(a2a / m + f * hidden)
    assert off.step_time_s - on.step_time_s == pytest.approx(hidden * (1 - f))


def test_ep_overlap_longer_than_compute_shows_the_excess() -> None:
    # Qwen3-30B-A3B, ep 16 over two nodes on a 2 GB/s and a 1 GB/s network: the all-to-all
    # outlasts the compute, so a merged pair exposes all-to-all - compute; per step
    # A - (1 - 1/m) x W, W the stage's decoder compute: the hidden part (1 - 1/m) x W is the same
    # on both networks (W does not depend on them). No kernel beats the 989 TFLOP/s peak, so
    #   W leaves out the output layer: its logits GEMMs alone, forward and backward, take at
    #     least m x 3 x 2 x 4096 tokens x 2048 x 151,936 / 989e12 = 4 x 7.73 ms = 30.9 ms;
    #   W holds the decoder's linear layers: per token and layer 2 x (QKV 2048 x 5120 + proj
    #     4096 x 2048 + router 2048 x 128 + 8 experts x 3 x 2048 x 768) = 113,770,496 FLOPs
    #     forward, x 3 with the backward, x 48 layers x 4 x 4096 tokens / 989e12 >= 0.271 s
    hidden = []
    f = 20 / 132  # comms.sm_share on H100
    for ib in (2.0, 1.0):
        j = job("qwen3-30b-a3b", num_gpus=16, gbs=64, ib_gb_per_s=ib)
        lay = Layout(tp=1, pp=1, dp=16, ep=16)
        m = lay.num_microbatches(64)
        assert m == 4  # 64 sequences / dp 16
        off, on = cost.estimate(j, lay), cost.estimate(j, lay.with_(ep_comm_overlap=True))
        a2a = off.breakdown.ep_comm_exposed
        assert a2a > off.breakdown.compute
        hidden.append(on.breakdown.ep_comm_hidden)
        assert a2a - on.breakdown.ep_comm_exposed == pytest.approx(hidden[-1] * (1 - f))
        window = hidden[-1] / (1 - 1 / m)
        assert window >= 3 * 48 * 4 * 4096 * 113_770_496 / 989e12
        assert window <= off.breakdown.compute - 4 * 6 * 4096 * 2048 * 151_936 / 989e12
    assert hidden[0] == pytest.approx(hidden[1], rel=1e-9)


def test_megatron_hides_backward_tp_traffic_synchronous_code_does_not() -> None:
    # Megatron/TE overlap the column-parallel backward collectives with dgrad/wgrad GEMMs: same
    # traffic as a code whose TP collectives block (with Megatron's SP re-gather on both sides),
    # less of it exposed, so the step is faster
    j = job("llama3.1-70b", num_gpus=64, gbs=64)
    blocking = replace(j, tp_backward_overlap=False)
    for sp in (False, True):
        lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=sp)
        meg, sync = cost.estimate(j, lay).breakdown, cost.estimate(blocking, lay).breakdown
        assert sync.tp_comm_hidden == 0.0
        assert meg.tp_comm_hidden > 0.0
        assert meg.tp_comm_exposed < sync.tp_comm_exposed
        # the exposed part also holds the SMs the hidden part takes (comms.sm_share of it)
        f = comms.sm_share(j.cluster)
        total = meg.tp_comm_exposed - f * meg.tp_comm_hidden + meg.tp_comm_hidden
        assert total == pytest.approx(sync.tp_comm_exposed)
        assert cost.estimate(j, lay).step_time_s < cost.estimate(blocking, lay).step_time_s


@pytest.mark.parametrize(
    ("model", "attn_inputs"),
    [
        # [QKV, output projection]: QKV reads the layer input
        ("llama3.1-8b", (0,)),
        # MLA [q down, q up, kv down, kv up, output projection]: the two down-projections read it
        ("deepseek-v3", (0, 2)),
    ],
)
def test_backward_tp_windows_are_the_input_side_gemms(model: str, attn_inputs: tuple) -> None:
    arch = catalog.get_model(model)
    shapes = gemm_shapes.linear_gemms(arch, 4096.0, 2, 1, 1, moe=False)
    times = [float(10**i) for i in range(len(shapes))]  # 1, 10, 100, ...: each sum is unique
    n_attn = len(gemm_shapes.attention_gemms(arch, 4096.0, 2))
    attn, mlp = layer_tp.column_parallel_windows(arch, shapes, times, moe=False)
    assert attn == sum(times[i] for i in attn_inputs)
    assert mlp == times[n_attn]  # fc1
    assert layer_tp.column_parallel_windows(arch, shapes, times, moe=True)[1] == 0.0


def test_fp8_param_gather_gathers_the_decoder_weights_in_one_byte() -> None:
    """Llama 3.1 8B on one pipeline stage: 6,979,584,000 decoder parameters of 8,030,261,248 (the
    untied 128,256 x 4,096 embedding and output layer, 1,050,673,152, stay bf16), so the
    all-gather moves 2 - 6.98 / 8.03 = 1.131 bytes a parameter with --fp8-param-gather, 2 without
    (hand arithmetic on the zoo shape)."""
    from planner.model.stage_params import stage_params

    j = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, precision="fp8")
    lay = Layout(tp=1, pp=1, dp=8)
    chunks = lay.chunk_layers(j.arch.num_layers)[0]
    dense, expert = stage_params(j, lay, 0, chunks)
    got = stage_sync.gathered_param_bytes(j, lay, chunks, dense, expert)
    assert got[0] == pytest.approx(2 - 6_979_584_000 / 8_030_261_248, rel=1e-3)
    off = replace(j, fp8_param_gather=False)
    assert stage_sync.gathered_param_bytes(off, lay, chunks, dense, expert) == (2.0, 2.0)
