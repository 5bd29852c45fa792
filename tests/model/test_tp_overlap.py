"""Megatron's --tp-comm-overlap in time (planner.model.tp_overlap). Oracle: hand arithmetic on
Transformer Engine's default userbuffer configuration as its docstring cites it (ring exchanges in
tp chunks, pipelined reduce-scatters in 4, bulk overlaps whole; FP8 all-gathers in 1 byte)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import comms, cost, tp_overlap
from planner.model.activations import BF16
from planner.model.layer_time import gpu_of, layer_time
from planner.search.rules import check_plan

TRAINING = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
PARALLEL = "[parallel]\ntp = 8\nsequence_parallel = true\nzero_stage = 1\n"


def _plan(tmp_path: Path, extra: str = "", training: str = TRAINING) -> tuple[Job, Layout]:
    text = plan_text(training=training, parallel=PARALLEL + extra)
    plan = check_plan(load_plan(write(tmp_path, text)))
    return plan.job, plan.require_layout()


def test_layer_traffic_by_hand(tmp_path: Path) -> None:
    job, _ = _plan(tmp_path, "tp_comm_overlap = true\n")
    size = 8192 * 4096 * BF16
    grp = comms.place(job.cluster, 1, 8)
    rs = comms.reduce_scatter(size, grp)
    # long GEMMs (1 s each): per block the forward all-gather shows one of 8 chunks, the forward
    # reduce-scatter one of 4, the backward output-gradient gather one of 8, the two bulk
    # collectives nothing: 2 blocks x (1/8 + 1/4 + 1/8) x rs
    exposed, hidden, _ = tp_overlap.layer_traffic(
        job.cluster, 8, size, 1, (1.0, 1.0), (1.0, 1.0), False
    )
    assert exposed == pytest.approx(2 * (rs / 8 + rs / 4 + rs / 8))
    assert exposed + hidden == pytest.approx(2 * 5 * rs)
    # full recompute repeats the two forward collectives of each block
    exposed2, hidden2, _ = tp_overlap.layer_traffic(
        job.cluster, 8, size, 2, (1.0, 1.0), (1.0, 1.0), False
    )
    assert exposed2 == pytest.approx(exposed + 2 * (rs / 8 + rs / 4))
    assert exposed2 + hidden2 == pytest.approx(2 * 7 * rs)
    # an MoE block (windows 0): its 5 collectives fully exposed
    exposed, _, _ = tp_overlap.layer_traffic(job.cluster, 8, size, 1, (1.0, 0.0), (1.0, 0.0), False)
    assert exposed == pytest.approx(rs / 8 + rs / 4 + rs / 8 + 5 * rs)
    # FP8: the three all-gathers move half the bytes (comms.all_gather of S / 2)
    ag8 = comms.all_gather(size / 2, grp)
    _, hidden8, _ = tp_overlap.layer_traffic(job.cluster, 8, size, 1, (1.0, 1.0), (1.0, 1.0), True)
    exposed8, _, _ = tp_overlap.layer_traffic(job.cluster, 8, size, 1, (1.0, 1.0), (1.0, 1.0), True)
    assert exposed8 == pytest.approx(2 * (ag8 / 8 + rs / 4 + ag8 / 8))
    assert exposed8 + hidden8 == pytest.approx(2 * (3 * ag8 + 2 * rs))
    # a collective longer than its GEMM shows the excess plus one chunk of what hides
    exposed, _, _ = tp_overlap.layer_traffic(job.cluster, 8, size, 1, (0.0, 0.0), (0.0, 0.0), False)
    assert exposed == pytest.approx(2 * 5 * rs)


def test_overlap_shows_less_than_blocking_and_keeps_the_traffic(tmp_path: Path) -> None:
    plain_job, plain = _plan(tmp_path)
    job, lay = _plan(tmp_path, "tp_comm_overlap = true\n")
    gpu = gpu_of(job)
    a, b = layer_time(plain_job, plain, gpu, False), layer_time(job, lay, gpu, False)
    assert b.tp < a.tp
    # each collective in its own window: the layer shows at least one chunk of each forward
    # all-gather (QKV's, fc1's), a lower bound no pooling of windows could go under
    arch, t = job.arch, 8192.0
    ag = comms.all_gather(t * arch.hidden_size * BF16, comms.place(job.cluster, 1, 8))
    assert b.tp >= 2 * ag / 8
    assert cost.estimate(job, lay).step_time_s < cost.estimate(plain_job, plain).step_time_s


def test_overlap_sm_margin_by_hand(tmp_path: Path) -> None:
    """Transformer Engine's pipelined and bulk overlaps launch their GEMMs on the SMs left after
    num_sm 16 (set_sm_margin): on H100's 132 SMs a GEMM of g seconds takes 16 / 116 x g more.
    Per block: the forward row-parallel GEMM (once per forward pass), the column-parallel dgrad
    and wgrad (each as long as the column forward GEMM); ring exchanges hold no SMs."""
    job, lay = _plan(tmp_path, "tp_comm_overlap = true\n")
    size = 8192 * 4096 * BF16
    margin = 16 / 116
    assert tp_overlap.margin_share(job.cluster) == pytest.approx(margin)
    cols, rows = (1.0, 2.0), (3.0, 4.0)
    _, _, held = tp_overlap.layer_traffic(job.cluster, 8, size, 1, cols, rows, False)
    assert held == pytest.approx(margin * ((3 + 2 * 1) + (4 + 2 * 2)))
    _, _, held2 = tp_overlap.layer_traffic(job.cluster, 8, size, 2, cols, rows, False)
    assert held2 == pytest.approx(margin * ((2 * 3 + 2 * 1) + (2 * 4 + 2 * 2)))
    # the floor share under every charge: one of tp 8 chunks (0.125) is below 16 / 116 and
    # 20 / 132 (comms.sm_share); at tp 2 the margin's 16 / 116 is the least
    assert tp_overlap.floor_share(job.cluster, 8) == pytest.approx(1 / 8)
    assert tp_overlap.floor_share(job.cluster, 2) == pytest.approx(margin)
    # the layer: exposed + held shown, exposed + hidden the traffic, at least the floor share of it
    layer = layer_time(job, lay, gpu_of(job), False)
    assert layer.tp_traffic > layer.tp_hidden > 0
    assert layer.tp >= tp_overlap.floor_share(job.cluster, 8) * layer.tp_traffic
