"""`[training] gemm_sm_margin` (Transformer Engine's NVTE_EXT_MARGIN_SM): every decoder GEMM runs on
the GPU's SMs less the margin, the whole step. Oracle: hand arithmetic (a GEMM on 132 of
GB200's 148 SMs takes 148 / 132 of its time; attention, norms and the output layer keep every
SM), the plan round trip and the launch script's environment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from plan_text import load_error, plan_text, write

from planner.emit import torchrun
from planner.inputs import plan_writer
from planner.inputs.plan import Plan, load_plan
from planner.model import comms, gemm_shapes
from planner.model.gemm import gemm_time
from planner.model.layer_time import gpu_of, layer_time
from planner.model.output_time import output_layer_time
from planner.search.rules import check_plan

CLUSTER = '[cluster]\ngpu = "gb200-nvl72"\nnum_gpus = 8\n'
TRAINING = '[training]\nseq_length = 4096\nglobal_batch_size = 64\nprecision = "fp8"\n'
PARALLEL = "[parallel]\ntp = 2\nsequence_parallel = true\n"


def _text(margin: str = "") -> str:
    return plan_text(cluster=CLUSTER, training=TRAINING + margin, parallel=PARALLEL)


def _plan(tmp_path: Path, margin: str = "") -> Plan:
    return check_plan(load_plan(write(tmp_path, _text(margin))))


def test_decoder_gemms_run_on_the_sms_left(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "gemm_sm_margin = 16\n")
    job, lay = plan.job, plan.require_layout()
    assert job.gemm_sm_margin == 16
    plain = replace(job, gemm_sm_margin=0)
    gpu = gpu_of(job)
    a, b = layer_time(plain, lay, gpu, False), layer_time(job, lay, gpu, False)
    # the layer's linear GEMMs, forward: sum of gemm_time over gemm_shapes.linear_gemms' shapes
    t = 4096.0
    gemms = sum(
        gemm_time(m, k, n, gpu.peak_linear, gpu.ridge, gpu.e_linear, c)
        for m, k, n, c in gemm_shapes.linear_gemms(job.arch, t, 2, 1, 2, False, 1.0)
    )
    extra = (148 / 132 - 1) * gemms
    assert b.fwd - a.fwd == pytest.approx(extra, rel=1e-9)
    assert b.bwd - a.bwd == pytest.approx(2 * extra, rel=1e-9)  # dgrad and wgrad
    assert output_layer_time(job, lay, gpu) == output_layer_time(plain, lay, gpu)


def test_round_trip_and_launch_environment(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "gemm_sm_margin = 16\n")
    text = plan_writer.render(plan.job, plan.require_layout(), {"name": "llama3.1-8b"}, ["t"])
    assert "gemm_sm_margin = 16" in text
    again = check_plan(load_plan(write(tmp_path, text, "again.toml")))
    assert again.job.gemm_sm_margin == 16
    assert "export NVTE_EXT_MARGIN_SM=16" in torchrun.render(plan, "j")
    assert "NVTE_EXT_MARGIN_SM" not in torchrun.render(_plan(tmp_path), "j")


def test_a_negative_margin_is_bad_input(tmp_path: Path) -> None:
    text = plan_text(
        cluster=CLUSTER, training=TRAINING + "gemm_sm_margin = -4\n", parallel=PARALLEL
    )
    message = load_error(write(tmp_path, text))
    assert "gemm_sm_margin" in message and "-4" in message


def test_hidden_collectives_take_only_the_sms_beyond_the_margin(tmp_path: Path) -> None:
    """A collective hidden under compute holds COMM_KERNEL_SMS = 20 SMs; with 16 left free by
    every GEMM it takes 20 - 16 = 4 of GB200's 148 from them, with 24 free none. The layer's TP
    charge is exposed + share x hidden: 20 / 148 of the hidden seconds without the margin, 4 / 148
    with it (the margin's slower GEMMs also hide more: each layout's own hidden seconds)."""
    plan = _plan(tmp_path, "gemm_sm_margin = 16\n")
    job, lay = plan.job, plan.require_layout()
    assert comms.sm_share(job.cluster) == pytest.approx(20 / 148)
    assert comms.sm_share(job.cluster, 16) == pytest.approx(4 / 148)
    assert comms.sm_share(job.cluster, 24) == 0.0
    plain = replace(job, gemm_sm_margin=0)
    gpu = gpu_of(job)
    a, b = layer_time(plain, lay, gpu, False), layer_time(job, lay, gpu, False)
    assert a.tp_hidden > 0.0
    for layer, held in ((a, 20 / 148), (b, 4 / 148)):
        exposed = layer.tp_traffic - layer.tp_hidden
        assert layer.tp == pytest.approx(exposed + held * layer.tp_hidden, rel=1e-9)
