"""Tests for planner.model.cost: the breakdown, the bubble, recompute, power caps, memory
bandwidth, GEMM ceilings, FP8, uneven stages and the layer memo.

Oracles: monotonic properties any correct step-time model has (each could fail: a sign error, a
group placed on the wrong tier, a bubble or overlap computed the wrong way round), the breakdown's
own arithmetic, hand arithmetic in comments (the bubble's (p-1)/(m+p-1)), the simulated Megatron
schedule as a brute-force reference for the interleaved hops. The regression guard on published
runs is tests/model/test_fidelity_rows.py.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from cost_jobs import job

from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import (
    cost,
    layer_time,
    schedule,
    stage_time,
)
from planner.model.layer_time import gpu_of


def tok(j: Job, lay: Layout) -> float:
    return cost.estimate(j, lay).tokens_per_s_per_gpu


def test_breakdown_adds_up_and_mfu_is_consistent() -> None:
    j = job("llama3.1-70b", num_gpus=64, gbs=256)
    lay = Layout(tp=4, pp=4, dp=4, vpp=2, sequence_parallel=True, recompute="selective")
    p = cost.estimate(j, lay)
    b = p.breakdown
    assert p.step_time_s == pytest.approx(b.step_time)
    assert p.tokens_per_s_per_gpu == pytest.approx(256 * 4096 / (p.step_time_s * 64))
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu * 1e12 / 989e12)
    assert 0 < p.mfu < 1
    assert p.hardware_flops_per_step > p.model_flops_per_step
    assert p.bottleneck() in {
        "recompute",
        "TP traffic",
        "CP traffic",
        "EP traffic",
        "PP traffic",
        "DP traffic",
        "bubble",
        "optimizer",
        "other",
    }
    assert all(getattr(b, f) >= 0 for f in b.__dataclass_fields__)


def test_more_data_parallel_at_fixed_batch_does_not_raise_per_gpu_throughput() -> None:
    # same global batch spread over twice the replicas: fewer micro-batches to hide DP traffic
    # behind and more GPUs in the DP ring
    a = tok(job(num_gpus=32, gbs=64), Layout(tp=1, dp=32, micro_batch_size=1))
    b = tok(job(num_gpus=64, gbs=64), Layout(tp=1, dp=64, micro_batch_size=1))
    assert b <= a


def test_more_microbatches_shrink_the_bubble() -> None:
    lay = Layout(tp=8, pp=8, dp=1, sequence_parallel=True)
    small = cost.estimate(job("llama3.1-70b", gbs=16), lay)
    large = cost.estimate(job("llama3.1-70b", gbs=128), lay)
    frac = [p.breakdown.bubble / p.step_time_s for p in (small, large)]
    assert frac[1] < frac[0]
    # (p-1)/(m + p-1) with m = 16: 7/23
    assert frac[0] == pytest.approx(7 / 23, rel=0.15)


def test_interleaving_shrinks_the_bubble() -> None:
    j = job("llama3.1-70b", gbs=64)
    base = Layout(tp=8, pp=8, dp=1, sequence_parallel=True)
    p1 = cost.estimate(j, base)
    p2 = cost.estimate(j, base.with_(vpp=2))
    assert p2.breakdown.bubble < p1.breakdown.bubble
    assert p2.tokens_per_s_per_gpu > p1.tokens_per_s_per_gpu


def test_interleaved_p2p_matches_the_simulated_schedule() -> None:
    # Llama 3.1 70B (h 8192), seq 4096, tp 8 with SP, pp 8 at stride tp x dp = 8: each stage on
    # its own node, so a hop is one InfiniBand message of 4096 x 8192 x 2 bytes / 8 = 8 MiB.
    # 1F1B: two blocking exchanges per micro-batch on the middle stages, one on the last (its
    # send_forward_recv_backward returns without communicating: Megatron-LM d98e8a64
    # p2p_communication.py:549-550), the slowest: m = 64 of them exposed.
    # Interleaved: what the hops add to the simulated schedule of the model's own stage times
    # (brute force). The last stage, with the output layer, is ~9% slower, and its slack hides
    # the chunk wraps' hops up to vpp 5: only the 2 (pp - 1) hops of the first pass and the last
    # stay exposed; at vpp 10 and 20 more show, never more than one per chunk boundary.
    # The hop by hand: 8,388,608 bytes over a NIC at 50 GB/s x 0.92 (NCCL's achieved share
    # across nodes) plus the InfiniBand tier's 5 us: 182.361 + 5 = 187.361 us.
    j = job("llama3.1-70b", gbs=64)
    base = Layout(tp=8, pp=8, dp=1, sequence_parallel=True)
    hop = 4096 * 8192 * 2 / 8 / (50e9 * 0.92) + 5e-6
    assert hop == pytest.approx(187.361e-6, rel=1e-5)
    p1 = cost.estimate(j, base)
    assert p1.p2p_hop == 0  # blocking: in the stage times, not a delay between them
    assert p1.breakdown.pp_comm_exposed == pytest.approx(64 * 1 * hop)
    for vpp in (2, 5, 10, 20):
        p = cost.estimate(j, base.with_(vpp=vpp))
        assert p.p2p_hop == pytest.approx(hop)
        fwd, bwd = zip(*p.stages, strict=True)
        plain = schedule.simulate(8, 64, fwd, bwd, vpp)
        sent = schedule.simulate(8, 64, fwd, bwd, vpp, p2p=hop)
        extra = max(op.end for r in sent for op in r) - max(op.end for r in plain for op in r)
        # and the last stage's waits on its vpp - 1 forward sends a micro-batch past pp
        # micro-batches (schedules.py:1811-1815, tests/model/test_send_waits.py)
        exposed = p.breakdown.pp_comm_exposed - (64 - 8) * (vpp - 1) * hop
        assert exposed == pytest.approx(extra, rel=1e-6)
        assert 2 * hop * (8 - 1) <= exposed * (1 + 1e-9) <= 2 * hop * (8 * vpp - 1) * (1 + 1e-9)
        if vpp <= 5:
            assert exposed == pytest.approx(2 * hop * (8 - 1))
        else:
            assert exposed > 2 * hop * (8 - 1) * 1.5


def test_recompute_costs_time_in_order() -> None:
    j = job("llama3.1-8b", num_gpus=8, gbs=64)
    base = Layout(tp=1, dp=8, micro_batch_size=1)
    t_none = tok(j, base)
    t_sel = tok(j, base.with_(recompute="selective"))
    t_full = tok(j, base.with_(recompute="full"))
    assert t_full < t_sel < t_none


def test_per_op_selective_recomputes_half_the_linear_forward() -> None:
    # Megatron's selective re-runs core attention only; PyTorch's per-op policy re-runs half the
    # matmuls and the elementwise forward: more recompute time, between "selective" and "full"
    j = job("llama3.1-8b", num_gpus=8, gbs=64)
    lay = Layout(tp=1, dp=8, micro_batch_size=1, recompute="selective")
    core = cost.estimate(j, lay).breakdown.recompute
    per_op = cost.estimate(replace(j, selective_recompute="per_op"), lay).breakdown.recompute
    full = cost.estimate(j, lay.with_(recompute="full")).breakdown.recompute
    assert core < per_op < full


def test_power_cap_lowers_the_compute_peaks_by_the_cube_root() -> None:
    # P ~ f^3 along the DVFS curve: a 350 W cap on a 700 W H100 runs at (1/2)^(1/3) = 0.794 of
    # the peak; a step gets slower, by less than 1/0.794 (communication is not slowed)
    j = job("llama3.1-8b", num_gpus=8, gbs=64)
    capped = replace(j, cluster=j.cluster.model_copy(update={"power_limit_w": 350.0}))
    assert gpu_of(capped).peak_bf16 == pytest.approx(989e12 * 0.5 ** (1 / 3))
    lay = Layout(tp=1, dp=8, micro_batch_size=1)
    slow, fast = cost.estimate(capped, lay).step_time_s, cost.estimate(j, lay).step_time_s
    assert fast < slow <= fast / 0.5 ** (1 / 3) + 1e-9


def test_hbm_override_moves_the_ridge_point() -> None:
    # H100 with 2.4 TB/s HBM2e instead of 3.35 TB/s HBM3: ridge 989e12 / 2.4e12 = 412 FLOP/B
    j = job("llama3.1-8b", num_gpus=8, gbs=64)
    hbm2e = replace(j, cluster=j.cluster.model_copy(update={"hbm_bandwidth_tb_per_s": 2.4}))
    assert gpu_of(hbm2e).ridge == pytest.approx(989 / 2.4)
    lay = Layout(tp=1, dp=8, micro_batch_size=1)
    assert tok(hbm2e, lay) < tok(j, lay)


def test_tp_across_nodes_pays_more_than_inside_one() -> None:
    j = job("llama3.1-70b", num_gpus=64, gbs=64)
    inside = cost.estimate(j, Layout(tp=8, pp=1, dp=8, sequence_parallel=True))
    across = cost.estimate(j, Layout(tp=16, pp=1, dp=4, sequence_parallel=True))
    per_gpu_in = inside.breakdown.tp_comm_exposed
    per_gpu_out = across.breakdown.tp_comm_exposed
    assert per_gpu_out > 2 * per_gpu_in


def test_gemms_never_beat_the_measured_matmul_ceiling() -> None:
    """GEMM_EFFICIENCY_MAX of the peak, capped at the part's measured best matmul: MI300X's
    668.4 of 1300 TFLOP/s (51.4%) and H100 FP8's 1402.6 of 1979 (70.9%, of which FP8 GEMMs at
    training shapes reach FP8_CEILING_FRACTION) are below 0.7594, A100's 271.2 of 312 (86.9%) and
    H100 bf16's 794.5 of 989 (80.3%) are above it."""
    assert gpu_of(job(gpu="mi300x-192gb")).e_linear == pytest.approx(668.4 / 1300)
    fp8 = layer_time.FP8_CEILING_FRACTION * 1402.6 / 1979
    assert gpu_of(job(precision="fp8")).e_linear == pytest.approx(fp8)
    assert gpu_of(job(precision="fp8")).e_bf16 == layer_time.GEMM_EFFICIENCY_MAX
    assert gpu_of(job(gpu="a100-sxm-80gb")).e_linear == layer_time.GEMM_EFFICIENCY_MAX
    assert gpu_of(job(gpu="l40s-48gb")).e_linear == layer_time.GEMM_EFFICIENCY_MAX  # unmeasured


def test_fp8_is_faster_but_not_twice() -> None:
    lay = Layout(tp=4, pp=1, dp=16, sequence_parallel=True)
    bf16 = tok(job("llama3.1-70b", gbs=64), lay)
    fp8 = tok(job("llama3.1-70b", gbs=64, precision="fp8"), lay)
    assert bf16 < fp8 < 2 * bf16


def test_uneven_stages_slowest_sets_the_pace() -> None:
    j = job("llama3.1-8b", num_gpus=32, gbs=64)  # 32 layers
    even = Layout(tp=1, pp=4, dp=8)
    uneven = even.with_(pipeline_layers=(6, 6, 6, 14))
    assert tok(j, uneven) < tok(j, even)


def test_layer_memo_gives_the_uncached_times() -> None:
    # the memo keys layer times by the layout without its pipeline, DP, ZeRO and overlap-schedule
    # fields: estimates after other layouts filled it equal estimates from an empty memo
    j = job("mixtral-8x7b", num_gpus=64, gbs=256)
    lays = [
        Layout(tp=1, pp=4, dp=16, ep=8, vpp=8),
        Layout(tp=1, pp=4, dp=16, ep=8, vpp=8, ep_comm_overlap=True, zero_stage=2),
        Layout(
            tp=1,
            pp=2,
            dp=32,
            ep=8,
            pipeline_layers=(15, 17),
            overlap_grad_reduce=False,
            overlap_param_gather=False,
        ),
        Layout(tp=2, pp=2, dp=16, ep=4, sequence_parallel=True, recompute="full"),
        Layout(tp=2, pp=1, dp=32, ep=8, sequence_parallel=True, micro_batch_size=2),
    ]
    warm = [cost.estimate(j, lay) for lay in lays]
    for lay, w in zip(lays, warm, strict=True):
        stage_time.LAYER_TIMES.clear()
        assert cost.estimate(j, lay) == w


def test_estimate_is_fast() -> None:
    j = job("llama3.1-405b", num_gpus=16384, gbs=2048, seq=8192)
    lay = Layout(tp=8, pp=16, dp=128, vpp=2, sequence_parallel=True)
    cost.estimate(j, lay)
    n = 200
    t0 = time.perf_counter()
    for _ in range(n):
        cost.estimate(j, lay)
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 2e-3  # target 200 us; loose bound for slow CI machines


def test_mi350x_is_mi355x_under_a_1000_w_cap() -> None:
    # oracle: stas00's note 22 (MI350X is MI355X's silicon at 1000 W) and the power-cap physics
    # above: the catalog's MI350X matmul ceiling (derived, hardware_catalog/gpus/mi350x-288gb.toml)
    # is MI355X's measured 1565.0 TFLOP/s x (1000 / 1400)^(1/3) = 1399.0, so a large GEMM runs at
    # the same rate on an MI350X as on an MI355X capped to 1000 W (to the catalog's 0.1 TFLOP/s)
    def large_gemm_rate(gpu: str, **cluster: float) -> float:
        j = job("llama3.1-8b", num_gpus=8, gbs=64)
        spec = catalog.get_gpu(gpu)
        on = j.cluster.model_copy(update={"gpu": spec, "memory_gib": spec.memory_gib, **cluster})
        g = gpu_of(replace(j, cluster=on))
        return g.peak_bf16 * g.e_bf16

    capped = large_gemm_rate("mi355x-288gb", power_limit_w=1000.0)
    assert large_gemm_rate("mi350x-288gb") == pytest.approx(capped, rel=1e-4)
    assert capped == pytest.approx(1565.0e12 * (1000 / 1400) ** (1 / 3), rel=1e-4)
