"""The plan file's `[cluster]` table as pydantic models (DESIGN.md section 2): one catalog GPU and
a count with its overrides, or `[[cluster.pools]]` of several GPU kinds joined by
`[cluster.between_pools]`; frozen, extra="forbid". `planner.inputs.plan_resolve` and
`planner.inputs.pools` resolve them into ClusterSpecs."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs.fields import (
    MAX_NAME_CHARS,
    Flag,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
)
from planner.inputs.hardware import (
    MAX_GPU_MEMORY_GIB,
    MAX_HBM_TB_PER_S,
    MAX_HOST_MEMORY_GIB,
    MAX_LATENCY_US,
    MAX_LINK_GB_PER_S,
    MIN_HBM_TB_PER_S,
    MIN_LINK_GB_PER_S,
    LinkTier,
)
from planner.inputs.plan_counts import Degree


class PoolSection(BaseModel):
    """`[[cluster.pools]]`: one pool of a heterogeneous cluster, a catalog GPU and a count with
    the overrides a cluster takes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        min_length=1, max_length=MAX_NAME_CHARS, description="free text, unique among the pools"
    )
    gpu: str = Field(min_length=1)
    num_gpus: PositiveInt
    gpus_per_node: PositiveInt | None = None
    memory_gib: PositiveFloat | None = Field(default=None, le=MAX_GPU_MEMORY_GIB)
    power_limit_w: PositiveFloat | None = None
    hbm_bandwidth_tb_per_s: PositiveFloat | None = Field(
        default=None, ge=MIN_HBM_TB_PER_S, le=MAX_HBM_TB_PER_S
    )
    tiers: tuple[LinkTier, ...] | None = None
    host_memory_gib_per_node: PositiveFloat | None = Field(default=None, le=MAX_HOST_MEMORY_GIB)
    gpus_per_domain_used: Degree | None = None
    price_usd_per_gpu_hour: PositiveFloat | None = Field(
        default=None, description="None = the catalog GPU's price"
    )


class BetweenPoolsSection(BaseModel):
    """`[cluster.between_pools]`: the link joining pools (per GPU, one direction)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bandwidth_gb_per_s_per_gpu: PositiveFloat = Field(ge=MIN_LINK_GB_PER_S, le=MAX_LINK_GB_PER_S)
    latency_us: NonNegativeFloat = Field(default=5.0, le=MAX_LATENCY_US)
    allow_data_parallel: Flag = Field(
        default=False,
        description="data-parallel replicas may span the pools (each pool holding whole "
        "pipeline replicas, the gradient all-reduce crossing this link); false: only the "
        "pipeline's sends cross it",
    )


class ClusterSection(BaseModel):
    """`[cluster]`: a catalog GPU and a count; node size, memory and tiers may be overridden.
    Or `pools`: several such GPU kinds, joined by `between_pools` (`PoolSection`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str | None = Field(default=None, min_length=1)
    num_gpus: PositiveInt | None = None  # at most hardware.MAX_GPUS, checked on the ClusterSpec
    pools: tuple[PoolSection, ...] | None = Field(default=None, min_length=1)
    between_pools: BetweenPoolsSection | None = None
    gpus_per_node: PositiveInt | None = None
    memory_gib: PositiveFloat | None = Field(default=None, le=MAX_GPU_MEMORY_GIB)
    power_limit_w: PositiveFloat | None = Field(
        default=None, description="GPU power cap (nvidia-smi -pl) below the catalog TDP"
    )
    hbm_bandwidth_tb_per_s: PositiveFloat | None = Field(
        default=None,
        ge=MIN_HBM_TB_PER_S,
        le=MAX_HBM_TB_PER_S,
        description="a variant's HBM bandwidth (e.g. HBM2e instead of HBM3)",
    )
    tiers: tuple[LinkTier, ...] | None = None
    host_memory_gib_per_node: PositiveFloat | None = Field(
        default=None,
        le=MAX_HOST_MEMORY_GIB,
        description="host (CPU) memory per node, GiB, where it differs from the catalog's",
    )
    gpus_per_domain_used: Degree | None = Field(
        default=None,
        description="GPUs the job uses of each innermost (NVLink) domain, 1..its span_gpus "
        "(Slurm --segment x GPUs per node); default: the catalog's for a multi-domain job "
        "(64 of an NVL72 rack) where num_gpus is a multiple of it, else the whole domain",
    )
