"""Megatron's --tp-comm-overlap in time (planner.model.tp_overlap). Oracle: hand arithmetic on
Transformer Engine's default userbuffer configuration as its docstring cites it (ring exchanges in
tp chunks, pipelined reduce-scatters in 4, bulk overlaps whole; FP8 all-gathers in 1 byte)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.inputs.userbuffers import TE_DEFAULT, UbSlot, resolve, slot_map
from planner.model import comms, cost, tp_overlap
from planner.model.layer_time import gpu_of, layer_time
from planner.model.shard import BF16
from planner.search.rules import check_plan

TRAINING = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
PARALLEL = "[parallel]\ntp = 8\nsequence_parallel = true\nzero_stage = 1\n"


def _plan(tmp_path: Path, extra: str = "", training: str = TRAINING) -> tuple[Job, Layout]:
    text = plan_text(training=training, parallel=PARALLEL + extra)
    plan = check_plan(load_plan(write(tmp_path, text)))
    return plan.job, plan.require_layout()


def _traffic(
    job: Job, n_fwd: int, windows: tuple[float, float, float, float], fp8: bool = False
) -> tuple[float, float, float]:
    """tp_overlap.layer_traffic at tp 8 on 8192 x 4096 bf16 inputs, Transformer Engine's default
    slots; windows: (column attention, column MLP, row attention, row MLP) GEMM seconds."""
    size = 8192 * 4096 * BF16
    cols, rows = windows[:2], windows[2:]
    slots = slot_map(TE_DEFAULT)
    return tp_overlap.layer_traffic(job.cluster, 8, size, n_fwd, (cols, rows), fp8, slots)


def test_layer_traffic_by_hand(tmp_path: Path) -> None:
    job, _ = _plan(tmp_path, "tp_comm_overlap = true\n")
    size = 8192 * 4096 * BF16
    grp = comms.place(job.cluster, 1, 8)
    # userbuffers' own exchange, not NCCL's call: the link's point-to-point rate
    rs = comms.reduce_scatter(size, grp, nccl=False)
    # long GEMMs (1 s each): per block the forward all-gather shows one of 8 chunks, the forward
    # reduce-scatter one of 4, the backward output-gradient gather one of 8, the two bulk
    # collectives nothing: 2 blocks x (1/8 + 1/4 + 1/8) x rs
    exposed, hidden, _ = _traffic(job, 1, (1.0, 1.0, 1.0, 1.0))
    assert exposed == pytest.approx(2 * (rs / 8 + rs / 4 + rs / 8))
    assert exposed + hidden == pytest.approx(2 * 5 * rs)
    # full recompute repeats the two forward collectives of each block
    exposed2, hidden2, _ = _traffic(job, 2, (1.0, 1.0, 1.0, 1.0))
    assert exposed2 == pytest.approx(exposed + 2 * (rs / 8 + rs / 4))
    assert exposed2 + hidden2 == pytest.approx(2 * 7 * rs)
    # an MoE block (windows 0): its 5 collectives fully exposed
    exposed, _, _ = _traffic(job, 1, (1.0, 0.0, 1.0, 0.0))
    assert exposed == pytest.approx(rs / 8 + rs / 4 + rs / 8 + 5 * rs)
    # FP8: the three all-gathers move half the bytes (comms.all_gather of S / 2)
    ag8 = comms.all_gather(size / 2, grp, nccl=False)
    exposed8, hidden8, _ = _traffic(job, 1, (1.0, 1.0, 1.0, 1.0), fp8=True)
    assert exposed8 == pytest.approx(2 * (ag8 / 8 + rs / 4 + ag8 / 8))
    assert exposed8 + hidden8 == pytest.approx(2 * (3 * ag8 + 2 * rs))
    # a collective longer than its GEMM shows the excess plus one chunk of what hides
    exposed, _, _ = _traffic(job, 1, (0.0, 0.0, 0.0, 0.0))
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
    """Transformer Engine's default slots: the pipelined and bulk overlaps launch their GEMMs on
    the SMs left after num_sm 16 (set_sm_margin): on H100's 132 SMs a GEMM of g seconds takes
    16 / 116 x g more; per block the forward row-parallel GEMM (once per forward pass), the
    column-parallel dgrad and wgrad (each as long as the column forward GEMM). The ring
    exchanges (num_sm 1, no margin) take 1 / 132 of the SMs while they run."""
    job, lay = _plan(tmp_path, "tp_comm_overlap = true\n")
    ag = comms.reduce_scatter(8192 * 4096 * BF16, comms.place(job.cluster, 1, 8))  # bf16: = rs
    margin, ring = 16 / 116, 1 / 132
    windows = (1.0, 2.0, 3.0, 4.0)  # columns 1 and 2 s, rows 3 and 4 s, all longer than ag
    _, _, held = _traffic(job, 1, windows)
    # ring exchanges: the forward all-gather and the dgrad's gather, 2 per block
    assert held == pytest.approx(margin * ((3 + 2 * 1) + (4 + 2 * 2)) + ring * 2 * 2 * ag)
    _, _, held2 = _traffic(job, 2, windows)
    assert held2 == pytest.approx(margin * ((2 * 3 + 2) + (2 * 4 + 4)) + ring * 2 * 3 * ag)
    # the floor share under every charge: the bulk overlaps' 16 of 132 SMs (0.121) is below one
    # of 8 chunks (0.125), one of 4 and 20 / 132 (comms.sm_share)
    slots = slot_map(TE_DEFAULT)
    assert tp_overlap.floor_share(job.cluster, 8, slots) == pytest.approx(16 / 132)
    # the layer: exposed + held shown, exposed + hidden the traffic, at least the floor share of it
    layer = layer_time(job, lay, gpu_of(job), False)
    assert layer.tp_traffic > layer.tp_hidden > 0
    assert layer.tp >= tp_overlap.floor_share(job.cluster, 8, slots) * layer.tp_traffic


def test_a_tuned_configuration_by_hand(tmp_path: Path) -> None:
    """A run's own slots (MLPerf's h100tp8mbs1.yaml style): bulk overlaps on 4 SMs without the
    margin take 4 / 132 of the SMs only while they run; a reduce-scatter moved to ring_exchange
    keeps its pipeline defaults' 16 SMs and margin (Transformer Engine updates
    get_default_config(name) with the keys given) but runs in 8 chunks."""
    job, _ = _plan(tmp_path, "tp_comm_overlap = true\n")
    given: dict[str, dict[str, object]] = {
        "proj_fprop": {"method": "ring_exchange"},
        "qkv_dgrad": {"num_sm": 4, "set_sm_margin": False},
    }
    slots = slot_map(resolve(given))
    assert slots["proj_fprop"] == UbSlot("ring_exchange", 16, True)
    assert slots["qkv_dgrad"] == UbSlot("bulk", 4, False)
    assert slots["fc2_fprop"] == UbSlot("pipeline", 16, True)
    size = 8192 * 4096 * BF16
    rs = comms.reduce_scatter(size, comms.place(job.cluster, 1, 8), nccl=False)
    tuned = tp_overlap.layer_traffic(
        job.cluster, 8, size, 1, ((1.0, 1.0), (1.0, 1.0)), False, slots
    )
    plain = _traffic(job, 1, (1.0, 1.0, 1.0, 1.0))
    # attention's forward reduce-scatter shows one of 8 chunks instead of one of 4
    assert tuned[0] == pytest.approx(plain[0] - rs / 4 + rs / 8)
    # its column dgrad holds 4 / 132 of rs instead of 16 / 116 of the 1 s GEMM
    assert tuned[2] == pytest.approx(plain[2] - 16 / 116 + 4 / 132 * rs)
    with pytest.raises(KeyError):
        resolve({"qkv_prop": {"num_sm": 4}})
    with pytest.raises(ValueError):
        resolve({"qkv_dgrad": {"num_sm": 0}})
