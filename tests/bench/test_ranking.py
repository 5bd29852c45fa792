"""The helpers of benchmarks/ranking.py (which prints the ranking figures) and the training
code's own data-parallel sync of benchmarks/hagemann.py.

Oracles: Spearman's rank correlation by hand (the textbook 1 - 6 sum d^2 / (n (n^2 - 1)) where
there are no ties); the matched-pair rule restated on the real Hagemann rows; the bubble identity
(a pair that runs exactly as predicted implies the schedule's pp - 1 micro-batch times).
"""

from __future__ import annotations

import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import ranking
from benchmarks.hagemann import Assumptions, estimate, serial_dp_sync
from benchmarks.runs import load_hagemann
from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.model import cost
from planner.model.stage_params import stage_params


def test_spearman_matches_the_no_ties_formula() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    y = [2.0, 1.0, 4.0, 3.0, 5.0]
    # rank differences d = (-1, 1, -1, 1, 0): 1 - 6 * 4 / (5 * 24) = 0.8
    assert ranking.spearman(x, y) == pytest.approx(0.8)
    assert ranking.spearman(x, x[::-1]) == pytest.approx(-1.0)


def test_ties_share_their_mean_rank() -> None:
    assert ranking.ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]


@pytest.mark.parametrize("vary", ["tp", "pp"])
def test_twins_differ_only_in_the_varied_degree(vary: str) -> None:
    cases = load_hagemann()
    pairs = ranking.twins(cases, vary)
    assert pairs
    other = "pp" if vary == "tp" else "tp"
    for i, j in pairs:
        a, b = cases[i], cases[j]
        assert getattr(a.layout, vary) > 1 and getattr(b.layout, vary) == 1
        assert a.group == b.group and a.job.fused_norm == b.job.fused_norm
        assert getattr(a.layout, other) == getattr(b.layout, other)
        assert a.layout.micro_batch_size == b.layout.micro_batch_size
        assert a.layout.recompute == b.layout.recompute
        if vary == "pp" and a.layout.tp > 1:
            assert a.layout.sequence_parallel == b.layout.sequence_parallel


def test_a_pair_that_runs_as_predicted_implies_the_1f1b_bubble() -> None:
    cases = load_hagemann()
    i, j = ranking.twins(cases, "pp")[0]
    pipe, flat = (cases[x].estimate() for x in (i, j))
    pp = cases[i].layout.pp
    k = ranking.bubble_micro_batches(pipe, flat, pipe.step_time_s / flat.step_time_s, pp)
    assert k == pytest.approx(pp - 1)
    # 10% slower than predicted is more than the schedule's bubble
    assert (
        ranking.bubble_micro_batches(pipe, flat, 1.1 * pipe.step_time_s / flat.step_time_s, pp)
        > pp - 1
    )


def test_the_codes_own_dp_sync_is_never_faster() -> None:
    # --dp-sync fp32_after_backward: the fp32 all-reduce + bf16 all-gather after the backward
    # exposes more than Megatron's overlapped bf16 reduce-scatter + all-gather can (its exposed
    # part is at most the whole bf16 reduce-scatter, half the bytes of one fp32 all-reduce phase)
    base = load_hagemann()
    code = load_hagemann(assume=Assumptions(dp_sync="fp32_after_backward"))
    assert [c.id for c in code] == [c.id for c in base]
    for a, b in zip(base, code, strict=True):
        assert b.dp_sync == "fp32_after_backward"
        fast, slow = (c.estimate().tokens_per_s_per_gpu for c in (a, b))
        assert slow < fast if a.layout.dp > 1 else slow == fast


def test_serial_dp_sync_by_hand() -> None:
    # Aleph-Alpha/scaling's optimizer step on Llama 3.1 70B, tp 8, dp 8 on 64 H100 (one DP rank
    # per node, 8 nodes; InfiniBand 50 GB/s at 0.92 bus efficiency, 5 us per message), P the
    # parameters one GPU holds:
    #   fp32 all-reduce, S = 4P:  2 * (7/8 * 4P / B_out + ceil(log2 8) * 5 us)  (NCCL's tree)
    #   bf16 all-gather, S = 2P:       7/8 * 2P / B_out + 7 * 5 us           (a ring: n-1 steps)
    # all exposed; without ZeRO only the all-reduce.
    job = Job(
        arch=catalog.get_model("llama3.1-70b"),
        cluster=resolve_cluster(ClusterSection(gpu="h100-sxm-80gb", num_gpus=64), None),
        seq_length=4096,
        global_batch_size=32,
    )
    lay = Layout(tp=8, pp=1, dp=8, sequence_parallel=True, zero_stage=1)
    p, expert = stage_params(job, lay, 0, (range(job.arch.num_layers),))
    assert expert == 0
    # (and NCCL's call on an NVLink cluster, nccl_shares.NCCL_CALL_S: all-reduce 21.6 us, ring
    # 16.8 us)
    b_out = 50e9 * 0.92
    all_reduce = 2 * (7 / 8 * 4 * p / b_out + 3 * 5e-6) + 21.6e-6
    all_gather = 7 / 8 * 2 * p / b_out + 7 * 5e-6 + 16.8e-6
    exposed, optimizer = serial_dp_sync(job, lay)
    assert exposed == pytest.approx(all_reduce + all_gather)
    assert serial_dp_sync(job, lay.with_(zero_stage=0))[0] == pytest.approx(all_reduce)
    # the optimizer step is the model's own; Megatron's sync moves fewer bytes (a reduce-scatter
    # of 4P, half the all-reduce's two phases of 4P, and the same all-gather), and hides some
    megatron = cost.estimate(job, lay).breakdown
    assert optimizer == pytest.approx(megatron.optimizer)
    assert megatron.dp_comm_exposed + megatron.dp_comm_hidden < exposed
    # the step grows by exactly the difference, and the rates shrink with it
    serial = estimate(job, lay, "fp32_after_backward")
    grown = exposed - megatron.dp_comm_exposed
    assert serial.step_time_s == pytest.approx(cost.estimate(job, lay).step_time_s + grown)
    ratio = cost.estimate(job, lay).step_time_s / serial.step_time_s
    assert serial.mfu == pytest.approx(cost.estimate(job, lay).mfu * ratio)


def test_assumptions_scale_the_named_tier_and_reject_nonsense() -> None:
    half_ib = load_hagemann(assume=Assumptions(ib_scale=0.5))
    for a, b in zip(load_hagemann(), half_ib, strict=True):
        assert b.job.cluster.tiers[0] == a.job.cluster.tiers[0]  # NVLink untouched
        assert b.job.cluster.tiers[1].bandwidth_gb_per_s_per_gpu == pytest.approx(
            0.5 * a.job.cluster.tiers[1].bandwidth_gb_per_s_per_gpu
        )
        # a slower network never makes a layout faster
        slow, fast = (cost.estimate(c.job, c.layout).step_time_s for c in (b, a))
        assert slow >= fast
    for bad in ({"split": "random"}, {"nvlink_scale": 0.0}, {"ib_scale": -1.0}):
        with pytest.raises(ValueError):
            Assumptions(**bad)  # type: ignore[arg-type]
