"""Tests for planner.inputs.hardware's bundled GPU catalog (GpuSpec, ClusterSpec): names, cited
peaks, memory, bandwidths, power, prices, matmul ceilings and FP8 / FP4 support.

Oracles: the catalog names of DESIGN.md section 2; vendor and benchmark figures hard-coded below
with their source (the same citations as each TOML's `source`); hand arithmetic in comments.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hardware import GpuSpec

# DESIGN.md section 2, "Catalog names".
CATALOG_NAMES = {
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "h100-sxm-80gb",
    "h800-sxm-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "gb200-nvl72",
    "mi300x-192gb",
    "mi325x-256gb",
    "l40s-48gb",
    # added after DESIGN.md's list: Blackwell Ultra
    "b300-sxm-270gb",
    "gb300-nvl72",
    # and AMD's CDNA4 parts
    "mi355x-288gb",
    "mi350x-288gb",
}

# Dense peak TFLOP/s (bf16, fp8; None = no FP8).
# S1 = stas00/ml-engineering compute/accelerator/README.md @744d01e1
# S3 = pytorch/torchtitan torchtitan/tools/utils.py get_peak_flops @b5bcd76c
PEAKS = {
    "a100-sxm-40gb": (312, None),  # S1, S3 (624 with sparsity); no FP8 on Ampere (S1)
    "a100-sxm-80gb": (312, None),  # S1, S3
    "h100-sxm-80gb": (989, 1979),  # S1, S3 (1979 / 3958 with sparsity)
    "h800-sxm-80gb": (989, 1979),  # third-party: same GH100 tensor throughput as H100
    "h200-sxm-141gb": (989, 1979),  # S1, S3
    "b200-sxm-180gb": (2250, 4500),  # S1, S3 (DGX B200 datasheet)
    "gb200-nvl72": (2500, 5000),  # S1, S3, per GPU
    "mi300x-192gb": (1300, 2610),  # S1, S3 (AMD: 1307.4 dense)
    "mi325x-256gb": (1300, 2610),  # S1, S3
    "l40s-48gb": (362, 733),  # S1, S3 (733 bf16 with sparsity)
    "b300-sxm-270gb": (2250, 4500),  # S1 (DGX B300 datasheet)
    "gb300-nvl72": (2500, 5000),  # S1, per GPU
    "mi355x-288gb": (2500, 5000),  # S1 (AMD's dense figures, its note 22)
    # S1 note 22: MI355X's silicon at 2200 MHz, not 2400: 2200 x 512 x 2 x 1024 / 1e6 = 2306.9
    # bf16 (MI355X's 2516.6 x 2200 / 2400), FP8 twice that
    "mi350x-288gb": (2306.9, 4613.7),
}

# Usable capacity as the driver reports it, in MiB (nvidia-smi memory.total; rocm-smi bytes / 2^20).
REPORTED_MIB = {
    "a100-sxm-40gb": 40960,  # modal-labs/modal-client PR #2797; 40960 / 1024 = 40.0 GiB
    "a100-sxm-80gb": 81920,  # modal-labs/modal-client PR #2797; 81920 / 1024 = 80.0 GiB
    "h100-sxm-80gb": 81559,  # PR #2797 and NVIDIA/nccl#1264; 81559 / 1024 = 79.647 GiB
    "h800-sxm-80gb": 81559,  # public nvidia-smi logs of H800 boards; as H100 = 79.647 GiB
    "h200-sxm-141gb": 143771,  # public nvidia-smi logs of 8 x H200; 143771 / 1024 = 140.401 GiB
    "b200-sxm-180gb": 183359,  # AWS DLAMI guide, P6-B200 example; 183359 / 1024 = 179.062 GiB
    "gb200-nvl72": 189471,  # public nvidia-smi captures of GB200 trays; / 1024 = 185.030 GiB
    # rocm-smi VRAM Total 205822885888 B / 2^20 = 196288 MiB; / 1024 = 191.6875 GiB
    "mi300x-192gb": 196288,
    "l40s-48gb": 46068,  # modal-labs/modal-client PR #2797; 46068 / 1024 = 44.988 GiB
    # mlcommons/training_results_v6.0 system files: ASUSTeK XA_NB3I-E12, NVIDIA Theia
    "b300-sxm-270gb": 275040,  # / 1024 = 268.594 GiB
    "gb300-nvl72": 284208,  # / 1024 = 277.547 GiB
}

# HBM TB/s, scale-up GB/s per direction, NIC Gb/s per GPU, TDP W.
# S2 = stas00/ml-engineering network/README.md @744d01e1; S6 = glennklockwood.com A100 page.
LINKS = {
    "a100-sxm-40gb": (1.555, 300, 200, 400),  # S6; S2 NVLink3 600 bidir; HDR; S1
    "a100-sxm-80gb": (2.039, 300, 200, 400),  # S6; S2; HDR; S1
    "h100-sxm-80gb": (3.35, 450, 400, 700),  # S1; S2 NVLink4 900 bidir; DGX H100 CX-7; S1
    "h800-sxm-80gb": (3.35, 200, 400, 700),  # third-party; NVLink 400 bidir; TDP assumed
    "h200-sxm-141gb": (4.8, 450, 400, 700),  # S1; S2
    "b200-sxm-180gb": (8.0, 900, 400, 1000),  # S1; S2 NVLink5 1800 bidir; AWS P6 EFA; S1
    "gb200-nvl72": (8.0, 900, 400, 1200),  # S1; S2; DGX GB200 CX-7; S1
    "mi300x-192gb": (5.3, 448, 400, 750),  # S1; S2 7 x 64 all-to-all; NIC assumed; S1
    "mi325x-256gb": (6.0, 448, 400, 1000),  # S1; S2; NIC assumed; S1
    "l40s-48gb": (0.864, 31, 200, 350),  # S1; PCIe Gen4 x16 (S2 table); NIC assumed; S1
    "b300-sxm-270gb": (8.0, 900, 800, 1000),  # S1; v6.0 system file; S2 DGX B300 XDR; S1
    "gb300-nvl72": (8.0, 900, 800, 1400),  # Verda; v6.0 system file (NVLink, 4 x CX-8); S1
    "mi355x-288gb": (8.0, 535.5, 400, 1400),  # S1; S2 7 x 76.5 all-to-all; NIC assumed; S1
    "mi350x-288gb": (8.0, 535.5, 400, 1000),  # MI355X's silicon (S1 note 22); 1000 W (note 22)
}


# --- the bundled catalog ----------------------------------------------------------------------


def test_catalog_has_exactly_the_design_names(gpus: dict[str, GpuSpec]) -> None:
    assert set(gpus) == CATALOG_NAMES
    assert set(catalog.gpus()) == CATALOG_NAMES
    assert catalog.get_gpu("h100-sxm-80gb").name == "h100-sxm-80gb"


def test_every_file_stem_is_its_name() -> None:
    stems = {p.stem for p in catalog.gpu_dir().glob("*.toml")}
    assert stems == CATALOG_NAMES


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(InputError, match="h100-sxm-80gb"):
        catalog.get_gpu("h100-80gb")


@pytest.mark.parametrize("name", sorted(PEAKS))
def test_peaks_match_cited_figures(gpus: dict[str, GpuSpec], name: str) -> None:
    bf16, fp8 = PEAKS[name]
    gpu = gpus[name]
    assert gpu.peak_tflops_bf16 == bf16
    assert gpu.peak_tflops_fp8 == fp8
    assert gpu.peak_flops("bf16") == bf16 * 1e12
    if fp8 is not None:
        assert gpu.has_fp8
        assert gpu.peak_flops("fp8") == fp8 * 1e12


@pytest.mark.parametrize("name", sorted(REPORTED_MIB))
def test_memory_matches_reported_total(gpus: dict[str, GpuSpec], name: str) -> None:
    reported_gib = REPORTED_MIB[name] / 1024
    gpu = gpus[name]
    # Stored rounded down to 0.01 GiB: never more than the driver reports, at most 10 MiB less.
    assert gpu.memory_gib <= reported_gib
    assert reported_gib - gpu.memory_gib < 0.01


def test_mi325x_memory_is_the_documented_assumption(gpus: dict[str, GpuSpec]) -> None:
    # No measured total: 256 GiB less the 320 MiB MI300X withholds (196608 - 196288 MiB); the
    # same for MI355X's and MI350X's 288 GiB.
    assert gpus["mi325x-256gb"].memory_gib == pytest.approx(256 - 320 / 1024, abs=0.01)
    for name in ("mi355x-288gb", "mi350x-288gb"):
        assert gpus[name].memory_gib == pytest.approx(288 - 320 / 1024, abs=0.01)


@pytest.mark.parametrize("name", sorted(CATALOG_NAMES))
def test_memory_label_unit_is_consistent(gpus: dict[str, GpuSpec], name: str) -> None:
    gpu = gpus[name]
    label = float(gpu.memory_label.split()[0])
    # "GiB": the label is GiB, e.g. 80 vs 79.65. "GB": label x 10^9 / 2^30, e.g. 48 -> 44.70.
    as_gib = label if gpu.memory_label_unit == "GiB" else label * 1e9 / 2**30
    assert gpu.memory_gib == pytest.approx(as_gib, rel=0.02)


@pytest.mark.parametrize("name", sorted(LINKS))
def test_bandwidths_power_match_cited_figures(gpus: dict[str, GpuSpec], name: str) -> None:
    hbm, scaleup, nic, tdp = LINKS[name]
    gpu = gpus[name]
    assert gpu.hbm_bandwidth_tb_per_s == hbm
    assert gpu.scaleup_bandwidth_gb_per_s_per_gpu == scaleup
    assert gpu.nic_bandwidth_gbit_per_s_per_gpu == nic
    assert gpu.tdp_w == tdp


@pytest.mark.parametrize("name", sorted(CATALOG_NAMES))
def test_tiers_agree_with_scalar_fields(gpus: dict[str, GpuSpec], name: str) -> None:
    gpu = gpus[name]
    inner, outer = gpu.tiers[0], gpu.tiers[-1]
    assert len(gpu.tiers) == 2
    assert inner.span_gpus == gpu.scaleup_domain_gpus
    assert inner.bandwidth_gb_per_s_per_gpu == gpu.scaleup_bandwidth_gb_per_s_per_gpu
    assert outer.span_gpus is None
    # Line rate in Gb/s / 8 = GB/s: 400 -> 50, 200 -> 25.
    assert gpu.nic_bandwidth_gbit_per_s_per_gpu is not None
    assert outer.bandwidth_gb_per_s_per_gpu == gpu.nic_bandwidth_gbit_per_s_per_gpu / 8
    # A scale-up domain is whole nodes: 8 / 8, and 72 / 4 = 18 trays on NVL72.
    assert gpu.scaleup_domain_gpus % gpu.gpus_per_node == 0


@pytest.mark.parametrize("name", sorted(CATALOG_NAMES))
def test_every_file_is_sourced_and_priced_with_a_source(
    gpus: dict[str, GpuSpec], name: str
) -> None:
    gpu = gpus[name]
    assert "stas00/ml-engineering" in gpu.source or "third-party" in gpu.source
    assert (gpu.price_usd_per_gpu_hour is None) == (gpu.price_source == "")
    assert gpu.vendor == ("amd" if name.startswith("mi") else "nvidia")


def test_assumed_figures_say_so(gpus: dict[str, GpuSpec]) -> None:
    for name in ("mi300x-192gb", "mi325x-256gb", "mi355x-288gb", "mi350x-288gb", "l40s-48gb"):
        assert "ASSUMED" in gpus[name].source


def test_gb200_is_one_72_gpu_nvlink_domain(gpus: dict[str, GpuSpec]) -> None:
    gpu = gpus["gb200-nvl72"]
    assert (gpu.scaleup_domain_gpus, gpu.gpus_per_node) == (72, 4)
    assert gpu.tiers[0].name == "nvlink"
    assert gpu.tiers[0].span_gpus == 72


# --- GpuSpec --------------------------------------------------------------------------------


# Measured best-shape matmul TFLOP/s (stas00/ml-engineering compute/accelerator/README.md, MAMF
# table @b9e29720; B200, GB200 and the H200's FP8 from a later revision), bf16 and fp8.
MAMF = {
    "a100-sxm-80gb": (271.2, None),
    "h100-sxm-80gb": (794.5, 1402.6),
    "b200-sxm-180gb": (1745.0, 3432.5),
    "b300-sxm-270gb": (1769.0, 3353.3),  # @744d01e1
    # the table has no GB300 row (@744d01e1): B300's fractions of its peaks at GB300's peaks,
    # 1769.0 / 2250 x 2500 = 1965.56 and 3353.3 / 4500 x 5000 = 3725.89, to 0.1
    "gb300-nvl72": (1965.6, 3725.9),
    "mi300x-192gb": (668.4, None),
    "mi325x-256gb": (784.9, None),
    "mi355x-288gb": (1565.0, None),  # @744d01e1
    # no MI350X row (@744d01e1): MI355X's 1565.0 at 1400 W under a 1000 W cap, the planner's
    # sustained clock ~ power^(1/3): 1565.0 x (1000 / 1400)^(1/3) = 1398.96, to 0.1
    "mi350x-288gb": (1399.0, None),
}


@pytest.mark.parametrize("name", sorted(MAMF))
def test_matmul_ceiling_is_measured_over_peak(gpus: dict[str, GpuSpec], name: str) -> None:
    bf16, fp8 = MAMF[name]
    peak_bf16, peak_fp8 = PEAKS[name]  # the cited peaks, not the catalog's
    gpu = gpus[name]
    assert gpu.matmul_ceiling("bf16") == pytest.approx(bf16 / peak_bf16)
    if peak_fp8 is not None:
        # no FP8 measurement: the bf16 fraction stands in
        want = fp8 / peak_fp8 if fp8 is not None else bf16 / peak_bf16
        assert gpu.matmul_ceiling("fp8") == pytest.approx(want)


def test_unmeasured_part_has_no_ceiling(gpus: dict[str, GpuSpec]) -> None:
    assert gpus["l40s-48gb"].mamf_tflops_bf16 is None
    assert gpus["l40s-48gb"].matmul_ceiling("bf16") is None


def test_fp32_peaks_are_the_cuda_cores(gpus: dict[str, GpuSpec]) -> None:
    # stas00/ml-engineering's table (@744d01e1, the catalog's cited source): the fp32 column,
    # each below the part's TF32 tensor-core rate, half its dense bf16 peak (the same table);
    # B200 and B300 from NVIDIA's HGX specification table instead: "FP32 600 TFLOPS" per
    # 8-GPU HGX B200 / HGX B300 board, 600 / 8 = 75 per GPU (the catalog files cite it)
    hgx = 600.0 / 8
    want = {"h100-sxm-80gb": 67.0, "a100-sxm-80gb": 19.5, "b200-sxm-180gb": hgx}
    want |= {"gb200-nvl72": 80.0, "mi300x-192gb": 163.4, "l40s-48gb": 91.6}
    want |= {"b300-sxm-270gb": hgx, "gb300-nvl72": 80.0, "mi355x-288gb": 157.3}
    want |= {"mi350x-288gb": 144.2}  # note 22
    for name, fp32 in want.items():
        assert gpus[name].peak_tflops_fp32 == fp32
    for gpu in gpus.values():
        assert gpu.peak_tflops_fp32 < gpu.peak_tflops_bf16 / 2
    # every part states it (Muon's fp32 Newton-Schulz is timed at it): a spec without it is refused
    data = gpus["h100-sxm-80gb"].model_dump()
    del data["peak_tflops_fp32"]
    with pytest.raises(ValidationError, match="peak_tflops_fp32"):
        GpuSpec.model_validate(data)


def test_a100_has_no_fp8(gpus: dict[str, GpuSpec]) -> None:
    for name in ("a100-sxm-40gb", "a100-sxm-80gb"):
        gpu = gpus[name]
        assert not gpu.has_fp8
        assert gpu.peak_tflops_fp8 is None
        with pytest.raises(ValueError, match="no fp8"):
            gpu.peak_flops("fp8")


def test_gpuspec_rejects_bad_tiers(gpus: dict[str, GpuSpec]) -> None:
    data = gpus["h100-sxm-80gb"].model_dump()
    data["tiers"] = [
        {"name": "nvlink", "bandwidth_gb_per_s_per_gpu": 450},
        {"name": "infiniband", "bandwidth_gb_per_s_per_gpu": 50},
    ]
    with pytest.raises(ValueError, match="not the outermost"):
        GpuSpec.model_validate(data)


def test_fp4_is_nvfp4_on_nvidia_only(gpus: dict[str, GpuSpec]) -> None:
    """planner's fp4 is the NVFP4 recipe (Transformer Engine NVFP4BlockScaling, Megatron-LM's
    --fp4-recipe nvfp4): Blackwell trains it; Hopper has no FP4 cores; CDNA4's FP4 cores
    (MI355X 10100 dense TFLOP/s, S1 note 22) run MXFP4, so an fp4 job there is refused, naming
    the format, though the catalog keeps the hardware's peak."""
    assert gpus["b200-sxm-180gb"].missing_cores("fp4") is None
    assert "no FP4 tensor cores" in (gpus["h100-sxm-80gb"].missing_cores("fp4") or "")
    amd = gpus["mi355x-288gb"]
    assert amd.has_fp4 and "MXFP4" in (amd.missing_cores("fp4") or "")
    assert amd.missing_cores("fp8") is None
