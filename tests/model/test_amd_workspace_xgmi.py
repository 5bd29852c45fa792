"""AMD Instinct: Transformer Engine's GEMM workspaces and xGMI's achieved bus bandwidth.

Oracles:
- ROCm/TransformerEngine 01b52037 transformer_engine/pytorch/cpp_extensions/gemm.py:43-49
  (get_cublas_workspace_size_bytes on ROCm): 67_108_864 bytes (64 MiB) on gfx950 (MI350X,
  MI355X), 33_554_432 (32 MiB) on the others (MI300X, MI325X: gfx942); `get_cublas_workspace`
  in the same file allocates one more per cuBLAS stream for grouped GEMMs (MoE experts: 4
  streams, TE_GROUPED_GEMM_STREAMS), as upstream does.
- rocm.blogs.amd.com "Understanding RCCL Bandwidth and xGMI Performance on AMD Instinct MI300X"
  (2025-03-02): xGMI's 64 GB/s per link gives "approximately 48 GB/s per link ... about 75% of the
  theoretical peak": 0.75 of the line rate, where NVLink keeps comms.SCALEUP_BUS_EFFICIENCY.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.hardware import LinkTier
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.model import buffers, comms

MIB = 2**20


def make_job(model: str, gpu: str) -> Job:
    cluster = resolve_cluster(ClusterSection(gpu=gpu, num_gpus=8), None)
    job = Job(arch=catalog.get_model(model), cluster=cluster, seq_length=4096, global_batch_size=64)
    return replace(job, precision="bf16")


@pytest.mark.parametrize(
    ("gpu", "each_mib"),
    [("mi300x-192gb", 32), ("mi325x-256gb", 32), ("mi350x-288gb", 64), ("mi355x-288gb", 64)],
)
def test_te_workspace_on_amd_follows_the_gfx_target(gpu: str, each_mib: int) -> None:
    dense = buffers.te_workspace_bytes(make_job("llama3.1-8b", gpu), Layout(dp=8))
    assert dense == each_mib * MIB  # one workspace (was 4 MiB, TE's pre-Hopper CUDA size)
    moe = buffers.te_workspace_bytes(make_job("mixtral-8x7b", gpu), Layout(dp=8))
    assert moe == 5 * each_mib * MIB  # one + 4 grouped-GEMM streams: MI300X 160, MI355X 320 MiB


def test_te_workspace_on_nvidia_is_unchanged() -> None:
    # upstream gemm.py: 32 MiB + 1 KiB from compute capability 9, 4 MiB before
    h100 = buffers.te_workspace_bytes(make_job("llama3.1-8b", "h100-sxm-80gb"), Layout(dp=8))
    assert h100 == 32 * MIB + 1024
    a100 = buffers.te_workspace_bytes(make_job("llama3.1-8b", "a100-sxm-80gb"), Layout(dp=8))
    assert a100 == 4 * MIB


@pytest.mark.parametrize("gpu", ["mi300x-192gb", "mi325x-256gb", "mi350x-288gb", "mi355x-288gb"])
def test_xgmi_achieves_three_quarters_of_its_line_rate(gpu: str) -> None:
    xgmi = catalog.get_gpu(gpu).tiers[0]
    link = comms.achieved(xgmi, True)
    assert link.bandwidth == pytest.approx(xgmi.bandwidth_gb_per_s_per_gpu * 1e9 * 0.75)
    # MI300X per link: 64 GB/s line rate -> 48 GB/s, AMD's measured figure
    if gpu == "mi300x-192gb":
        assert link.bandwidth / 7 == pytest.approx(48e9)


def test_nvlink_and_the_network_keep_the_defaults() -> None:
    nvlink, ib = catalog.get_gpu("h100-sxm-80gb").tiers[:2]
    assert nvlink.bus_efficiency is None and ib.bus_efficiency is None
    up = comms.achieved(nvlink, True).bandwidth
    assert up == pytest.approx(450e9 * comms.SCALEUP_BUS_EFFICIENCY)
    out = comms.achieved(catalog.get_gpu("mi300x-192gb").tiers[1], False).bandwidth
    assert out == pytest.approx(50e9 * comms.SCALEOUT_BUS_EFFICIENCY)


@pytest.mark.parametrize("eff", [0.0, 1.2])
def test_a_tier_efficiency_outside_0_1_is_refused(eff: float) -> None:
    tier = LinkTier(name="x", span_gpus=8, bandwidth_gb_per_s_per_gpu=100, bus_efficiency=0.5)
    assert comms.achieved(tier, True).bandwidth == pytest.approx(50e9)
    with pytest.raises(ValidationError):
        LinkTier(name="x", span_gpus=8, bandwidth_gb_per_s_per_gpu=100, bus_efficiency=eff)
