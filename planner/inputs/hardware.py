"""GpuSpec, LinkTier (`planner.inputs.tiers`), ClusterSpec: what the hardware is, as data.

Network tiers are data, innermost first: the scale-up domain (NVLink / xGMI), then scale-out
(InfiniBand / RoCE), then whatever a user adds (an oversubscribed spine, a cross-datacentre link).
A group of ranks that fits inside a tier's span talks at that tier's per-GPU bandwidth. No figure in
this module is a constant of the code: they come from `hardware_catalog/gpus/*.toml` or the plan.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from planner.inputs import units
from planner.inputs.fields import Label, Name, PositiveFloat, PositiveInt, Text
from planner.inputs.tiers import MAX_LATENCY_US as MAX_LATENCY_US
from planner.inputs.tiers import MAX_LINK_GB_PER_S as MAX_LINK_GB_PER_S
from planner.inputs.tiers import MIN_LINK_GB_PER_S as MIN_LINK_GB_PER_S
from planner.inputs.tiers import LinkTier, check_domain_used, check_tiers

MAX_GPUS = 1 << 24
"""GPUs a cluster may have: 16,777,216, some hundred times the largest training clusters built so
far (~100,000-200,000 GPUs). Above it a count is a typo; below it the search's enumeration of
divisors stays instant (it walks up to the square root). A node's GPUs (`gpus_per_node`) are
bounded by it too: a node holds no more GPUs than a cluster may."""


MIN_HBM_TB_PER_S = 0.01
"""The least HBM bandwidth a plan may give, TB/s (10 GB/s, a hundredth of any GPU's since 2017)."""

MAX_HBM_TB_PER_S = 1000.0
"""The most HBM bandwidth a plan may give, TB/s: some fifty times the fastest announced GPU's
(Rubin Ultra, about 32 TB/s); above it a value is a typo (a bytes figure, or GB/s)."""

MAX_GPU_MEMORY_GIB = float(1 << 16)
"""The most memory a plan may give one GPU, GiB (64 TiB): some sixty times the largest announced
(Rubin Ultra, 1 TB of HBM4e); above it a value is a typo (bytes, or MiB)."""

MAX_HOST_MEMORY_GIB = float(1 << 20)
"""Host (CPU) memory a node may have, GiB: 1 PiB, some hundred times the largest servers' (4-8 TiB
of DIMMs); above it a value is a typo."""

MIN_POWER_SHARE = 0.1
"""The least power cap a plan may give, as a share of the GPU's TDP (drivers floor their caps
higher: H100 SXM at 200 of 700 W)."""


BLACKWELL_PREFIXES = ("b100", "b200", "b300", "gb200", "gb300")
"""Catalog GPU names of compute capability 10+ (Blackwell)."""


class GpuSpec(BaseModel):
    """One accelerator model, from one `hardware_catalog/gpus/<name>.toml` file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name = Field(description="catalog name == file stem")
    display_name: Label
    vendor: Literal["nvidia", "amd"]
    source: Text = Field(min_length=1)
    peak_tflops_bf16: PositiveFloat = Field(description="dense (no 2:4 sparsity)")
    peak_tflops_fp8: PositiveFloat | None = Field(default=None, description="None = no FP8")
    peak_tflops_fp4: PositiveFloat | None = Field(
        default=None,
        description="dense FP4 (E2M1, block-scaled: NVFP4 on NVIDIA, MXFP4 on AMD); None = no "
        "FP4 tensor cores",
    )
    peak_tflops_fp32: PositiveFloat = Field(
        description="dense FP32 on the CUDA cores (no tensor cores: what fp32 matmuls at "
        "torch's 'highest' precision run at)"
    )
    peak_tflops_tf32: PositiveFloat | None = Field(
        default=None,
        description="dense TF32 on the tensor cores: what fp32 training's GEMMs run at "
        "(Transformer Engine's cuBLASLt GEMMs of fp32 operands compute in "
        "CUBLAS_COMPUTE_32F_FAST_TF32); None = no TF32 tensor cores, fp32 GEMMs at "
        "peak_tflops_fp32",
    )
    mamf_tflops_bf16: PositiveFloat | None = Field(
        default=None, description="measured Maximum Achievable Matmul FLOPS; None = not measured"
    )
    mamf_tflops_fp8: PositiveFloat | None = Field(
        default=None, description="the same for FP8 inputs; None = take the bf16 fraction"
    )
    mamf_derived_from: str | None = Field(
        default=None,
        description="the catalog GPU whose measured MAMF the two figures above are derived "
        "from (its fractions at this GPU's peaks, or as the entry's comment derives them), where "
        "this GPU has no measurement of its own; None = measured",
    )
    exp_tera_per_s: PositiveFloat | None = Field(
        default=None,
        description="the special-function units' exponentials (MUFU.EX2) per second, 10^12, at "
        "the clock of the dense peaks: what bounds a flash-attention kernel's softmax "
        "(planner.model.attention); None = not bounded",
    )
    amd_gfx: Literal["gfx942", "gfx950"] | None = Field(
        default=None,
        description="an AMD GPU's LLVM target, which ROCm Transformer Engine switches on: gfx942 "
        "(CDNA3: MI300X, MI325X), gfx950 (CDNA4: MI350X, MI355X; MXFP8 tensor cores, a 64 MiB "
        "GEMM workspace); None = NVIDIA, or not stated (read as gfx942)",
    )
    memory_gib: PositiveFloat = Field(description="usable capacity in GiB (2^30 bytes)")
    memory_label: str = Field(description="the vendor's label, e.g. '80 GB'")
    memory_label_unit: Literal["GiB", "GB"] = Field(
        description="whether the vendor's 'GB' behaves as GiB or as 10^9 bytes"
    )
    hbm_bandwidth_tb_per_s: PositiveFloat
    scaleup_name: str
    scaleup_domain_gpus: PositiveInt
    scaleup_bandwidth_gb_per_s_per_gpu: PositiveFloat = Field(description="one direction")
    gpus_per_node: PositiveInt = Field(le=MAX_GPUS)
    nic_bandwidth_gbit_per_s_per_gpu: PositiveFloat | None = None
    tdp_w: PositiveFloat
    host_cpu: Literal["xeon", "epyc-zen2", "grace"] = Field(
        default="xeon",
        description="the reference system's host CPU, whose single-thread speed sets how fast "
        "eager PyTorch issues kernels (planner.model.host.HOST_CPU_SLOWDOWN)",
    )
    host_memory_gib_per_node: PositiveFloat | None = Field(
        default=None,
        le=MAX_HOST_MEMORY_GIB,
        description="the reference system's host (CPU) memory per node, GiB: what offloading "
        "pins (planner.model.host_memory); None = no source read gives it",
    )
    price_usd_per_gpu_hour: PositiveFloat | None = None
    price_source: Text = ""
    tiers: tuple[LinkTier, ...] = Field(description="network tiers, innermost first")
    gpus_per_domain_used: PositiveInt | None = None
    """GPUs a multi-domain job uses of each innermost domain (`ClusterSpec.domain_used`)."""

    @model_validator(mode="after")
    def _check(self) -> GpuSpec:
        check_tiers(self.tiers)
        check_domain_used(self.gpus_per_domain_used, self.tiers, self.gpus_per_node)
        return self

    @property
    def has_fp8(self) -> bool:
        return self.peak_tflops_fp8 is not None

    @property
    def has_fp4(self) -> bool:
        return self.peak_tflops_fp4 is not None

    def missing_cores(self, precision: str) -> str | None:
        """Why this GPU cannot train the linear layers in `precision` (None = it can)."""
        if precision == "fp8" and not self.has_fp8:
            return f"{self.name} has no FP8 tensor cores"
        if precision == "fp4" and not self.has_fp4:
            return f"{self.name} has no FP4 tensor cores (NVFP4 needs b200, b300, gb200, gb300)"
        if precision == "fp4" and self.vendor != "nvidia":
            # planner's fp4 is NVFP4 (Megatron-LM's --fp4-recipe nvfp4, Transformer Engine's
            # NVFP4BlockScaling): 16-element blocks with FP8 scales, NVIDIA Blackwell's format;
            # CDNA4's FP4 cores run MXFP4 (32-element blocks, power-of-two scales)
            return (
                f"{self.name}'s FP4 tensor cores run MXFP4, not the NVFP4 recipe planner models "
                "(NVFP4 needs b200, b300, gb200, gb300)"
            )
        return None

    @property
    def is_blackwell(self) -> bool:
        """Compute capability 10 or more (BLACKWELL_PREFIXES): MXFP8 tensor cores."""
        return self.vendor == "nvidia" and self.name.startswith(BLACKWELL_PREFIXES)

    @property
    def has_mxfp8(self) -> bool:
        """MXFP8 tensor cores (1 x 32 blocks): Blackwell, or AMD CDNA4 (`amd_gfx` gfx950)."""
        return self.is_blackwell or self.amd_gfx == "gfx950"

    @property
    def needs_one_device_connection(self) -> bool:
        """Whether Megatron-LM wants CUDA_DEVICE_MAX_CONNECTIONS=1 for TP / CP here: everywhere
        but Blackwell (validate_args: `get_device_arch_version() < 10`; BLACKWELL_PREFIXES)."""
        return not self.is_blackwell

    def matmul_ceiling(self, precision: Literal["bf16", "fp8"]) -> float | None:
        """Measured best-shape matmul throughput / dense peak (None = not measured). FP8 falls
        back to the bf16 fraction where only that was measured. (FP4 has no MAMF table:
        `planner.model.gemm.fp4_ceiling`.)"""
        fp8_mamf, fp8_peak = self.mamf_tflops_fp8, self.peak_tflops_fp8
        if precision == "fp8" and fp8_mamf is not None and fp8_peak is not None:
            return fp8_mamf / fp8_peak
        if self.mamf_tflops_bf16 is None:
            return None
        return self.mamf_tflops_bf16 / self.peak_tflops_bf16

    def peak_flops(self, precision: Literal["bf16", "fp16", "fp8", "fp4", "fp32"]) -> float:
        """Dense peak FLOP/s for a precision (fp8 / fp4 only where the GPU has it): fp16's is the
        bf16 one (every catalog GPU's datasheet gives its dense FP16 and BF16 tensor rates as
        one figure: NVIDIA A100, H100 / H200 / H800, L40S and Blackwell datasheets, AMD's CDNA 3
        and 4 ones); fp32's is its GEMMs' rate, TF32 where the GPU has TF32 tensor cores
        (`peak_tflops_tf32`), else the FP32 peak."""
        peaks = {
            "bf16": self.peak_tflops_bf16,
            "fp16": self.peak_tflops_bf16,
            "fp8": self.peak_tflops_fp8,
            "fp4": self.peak_tflops_fp4,
            "fp32": self.peak_tflops_tf32 or self.peak_tflops_fp32,
        }
        value = peaks[precision]
        if value is None:
            raise ValueError(f"{self.name} has no {precision} tensor cores")
        return units.tflops(value)


class ClusterSpec(BaseModel):
    """The GPUs of one job: a catalog GPU, a count, and the plan's overrides applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: GpuSpec
    num_gpus: PositiveInt = Field(le=MAX_GPUS)
    gpus_per_node: PositiveInt = Field(le=MAX_GPUS)  # a node holds no more than a cluster may
    memory_gib: PositiveFloat
    power_limit_w: PositiveFloat | None = Field(
        default=None, description="power cap per GPU; None = the catalog TDP"
    )
    hbm_bandwidth_tb_per_s: PositiveFloat | None = Field(
        default=None, ge=MIN_HBM_TB_PER_S, description="None = the catalog GPU's"
    )
    tiers: tuple[LinkTier, ...]
    host_memory_gib_per_node: PositiveFloat | None = Field(
        default=None, le=MAX_HOST_MEMORY_GIB, description="the plan's; None = the catalog GPU's"
    )
    gpus_per_domain_used: PositiveInt | None = None  # the plan's; None: `domain_used`

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        check_tiers(self.tiers, self.num_gpus)
        check_domain_used(self.gpus_per_domain_used, self.tiers, self.gpus_per_node)
        if self.power_limit_w is not None and self.power_limit_w > self.gpu.tdp_w:
            raise ValueError(
                f"power_limit_w ({self.power_limit_w:g}) is above {self.gpu.name}'s TDP "
                f"({self.gpu.tdp_w:g} W); a cap can only lower it"
            )
        least = MIN_POWER_SHARE * self.gpu.tdp_w
        if self.power_limit_w is not None and self.power_limit_w < least:
            raise ValueError(
                f"power_limit_w ({self.power_limit_w:g}) is below a tenth of {self.gpu.name}'s "
                f"TDP ({least:g} of {self.gpu.tdp_w:g} W)"
            )
        return self

    @property
    def hbm_tb_per_s(self) -> float:
        """HBM bandwidth, TB/s: the plan's override or the catalog GPU's."""
        return self.hbm_bandwidth_tb_per_s or self.gpu.hbm_bandwidth_tb_per_s

    @property
    def power_w(self) -> float:
        """Board power per GPU under load: the cap where one is set, else the TDP."""
        return self.power_limit_w if self.power_limit_w is not None else self.gpu.tdp_w

    @property
    def capacity_bytes(self) -> float:
        return units.from_gib(self.memory_gib)

    @property
    def host_gib_per_gpu(self) -> float | None:
        """A GPU's share of its node's host memory, GiB: the plan's per-node figure over the
        plan's GPUs per node, else the catalog's over the catalog's; None where neither says."""
        if self.host_memory_gib_per_node is not None:
            return self.host_memory_gib_per_node / self.gpus_per_node
        gpu = self.gpu
        if gpu.host_memory_gib_per_node is None:
            return None
        return gpu.host_memory_gib_per_node / gpu.gpus_per_node

    @property
    def domain_used(self) -> int | None:
        """GPUs the job uses of each innermost domain (None: no span, every GPU): the plan's
        `gpus_per_domain_used`; else the catalog's where the job spans several of its domains
        (tiers as the catalog's) in whole segments (num_gpus a multiple), as NVIDIA's MLPerf
        GB200/GB300 runs allocate 16-tray segments of 72-GPU racks (Slurm SEGMENT=16, 4 GPUs a
        tray: hardware_catalog/gpus/gb200-nvl72.toml); else the whole domain."""
        span = self.tiers[0].span_gpus
        if span is None or self.gpus_per_domain_used is not None:
            return self.gpus_per_domain_used or span
        used = self.gpu.gpus_per_domain_used
        if used is None or span != self.gpu.tiers[0].span_gpus or self.num_gpus <= span:
            return span
        return used if self.num_gpus % used == 0 else span

    @property
    def placement_spans(self) -> tuple[int | None, ...]:
        """The tiers' spans in ranks: the innermost is `domain_used`, each outer tier holds as
        many of those as it holds domains (a job fills `domain_used` GPUs of each, rank r on
        innermost domain r // domain_used: `planner.model.placement`)."""
        spans = tuple(t.span_gpus for t in self.tiers)
        used, span = self.domain_used, spans[0]
        if used is None or span is None or used == span:
            return spans
        return tuple(s if s is None else s // span * used for s in spans)

    def tier_for_span(self, span_gpus: int) -> LinkTier:
        """The innermost tier whose span holds `span_gpus` consecutive ranks."""
        for tier in self.tiers:
            if tier.span_gpus is None or span_gpus <= tier.span_gpus:
                return tier
        return self.tiers[-1]


class Pool(BaseModel):
    """One pool of a heterogeneous cluster (`[[cluster.pools]]`): a name and its GPUs, resolved
    as a one-kind cluster of `num_gpus` GPUs with the pool's own tiers. Pools are listed in
    pipeline order by default: pool k hosts a contiguous block of pipeline ranks."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    cluster: ClusterSpec
    price_usd_per_gpu_hour: PositiveFloat | None = Field(
        default=None, description="None = the catalog GPU's price"
    )

    @property
    def price(self) -> float | None:
        return self.price_usd_per_gpu_hour or self.cluster.gpu.price_usd_per_gpu_hour
