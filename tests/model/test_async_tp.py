"""torchtitan's async TP in time (planner.model.async_tp). Oracle: hand arithmetic on the
decomposition its docstring cites (PyTorch's fused_all_gather_matmul / fused_matmul_reduce_scatter:
a collective split into tp chunks pipelined with its matmul, one chunk left bare)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import async_tp, comms, cost, gemm_shapes
from planner.model.gemm import gemm_time
from planner.model.layer_time import gpu_of, layer_time
from planner.model.layer_tp import column_parallel_windows
from planner.model.shard import BF16
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"
PARALLEL = "[parallel]\ntp = 8\nzero_stage = 0\n"


def _plan(tmp_path: Path, titan: str) -> tuple[Job, Layout]:
    text = plan_text(training=TITAN, parallel=PARALLEL) + titan
    plan = check_plan(load_plan(write(tmp_path, text)))
    return plan.job, plan.require_layout()


def test_hidden_share_by_hand() -> None:
    # c 4 under g 10 at tp 8: nothing outlasts the GEMM, one chunk of 4 / 8 is bare
    assert async_tp.hidden_share(4.0, 10.0, 8) == pytest.approx(0.5)
    # c 10 under g 4 at tp 4: 6 outlasts it, plus 4 / 4
    assert async_tp.hidden_share(10.0, 4.0, 4) == pytest.approx(7.0)
    # nothing to hide under: all of it shows
    assert async_tp.hidden_share(3.0, 0.0, 8) == pytest.approx(3.0)


def test_layer_traffic_by_hand(tmp_path: Path) -> None:
    job, _ = _plan(tmp_path, "[torchtitan]\ncompile = true\nasync_tp = true\n")
    size = 8192 * 4096 * BF16
    # async TP's symmetric-memory exchange, not NCCL's call: the link's point-to-point rate
    half = comms.reduce_scatter(size, comms.place(job.cluster, 1, 8), nccl=False)
    # long GEMMs: each of the 2 blocks' 4 collectives (AG, RS forward; AG, RS backward) shows
    # one chunk, half / 8; a second forward pass (full recompute) adds the 2 forward ones again
    exposed, hidden = async_tp.layer_traffic(job.cluster, 8, size, 1, (1.0, 1.0), (1.0, 1.0))
    assert exposed == pytest.approx(8 * half / 8)
    assert exposed + hidden == pytest.approx(8 * half)
    exposed, _ = async_tp.layer_traffic(job.cluster, 8, size, 2, (1.0, 1.0), (1.0, 1.0))
    assert exposed == pytest.approx(12 * half / 8)
    # an MoE-like MLP block (windows 0): its 4 collectives fully exposed
    exposed, _ = async_tp.layer_traffic(job.cluster, 8, size, 1, (1.0, 0.0), (1.0, 0.0))
    assert exposed == pytest.approx(4 * half / 8 + 4 * half)


def test_async_tp_hides_the_forward_collectives(tmp_path: Path) -> None:
    sync_job, lay = _plan(tmp_path, "[torchtitan]\ncompile = true\n")
    job, _ = _plan(tmp_path, "[torchtitan]\ncompile = true\nasync_tp = true\n")
    gpu = gpu_of(job)
    plain, fast = layer_time(sync_job, lay, gpu, False), layer_time(job, lay, gpu, False)
    # the same traffic; async TP shows less of it and hides more
    assert fast.tp < plain.tp
    assert fast.tp_hidden > plain.tp_hidden
    # by hand: the layer's GEMM windows, 8 collectives each showing what outlasts its GEMM plus
    # one chunk, the hidden rest charged comms.sm_share
    arch, t = job.arch, 8192.0
    shapes = gemm_shapes.linear_gemms(arch, t, 8, 1, 1, False)
    times = _gemm_times(job, shapes)
    cols = column_parallel_windows(arch, shapes, times, False)
    rows = async_tp.row_parallel_windows(arch, times, False)
    act = t * arch.hidden_size * BF16
    half = comms.reduce_scatter(act, comms.place(job.cluster, 1, 8), nccl=False)
    shown = sum(async_tp.hidden_share(half, w, 8) for w in (*cols, *rows)) * 2
    share = comms.sm_share(job.cluster)
    assert fast.tp == pytest.approx(shown + share * (8 * half - shown))
    # the step is shorter, the rest of the model unchanged
    assert cost.estimate(job, lay).step_time_s < cost.estimate(sync_job, lay).step_time_s


def _gemm_times(job: Job, shapes: list[tuple[float, float, float, float]]) -> list[float]:
    gpu = gpu_of(job)
    return [
        gemm_time(m, k, n, gpu.peak_linear, gpu.ridge, gpu.e_linear, c) for m, k, n, c in shapes
    ]


def test_megatron_and_no_sequence_parallel_unchanged(tmp_path: Path) -> None:
    job, lay = _plan(tmp_path, "[torchtitan]\ncompile = true\nasync_tp = true\n")
    assert async_tp.applies(job, lay)
    assert not async_tp.applies(job, lay.with_(sequence_parallel=False))
    assert not async_tp.applies(replace(job, framework="megatron"), lay)
