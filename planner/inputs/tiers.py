"""LinkTier: one level of a cluster's network, as data, and the checks on a stack of them
(split from `planner.inputs.hardware`, which re-exports them).

Each tier states its line rate and latency; its achieved bus bandwidth is the line rate times a
bus efficiency, the tier's own `bus_efficiency` where the catalog measured one for its fabric (AMD's
xGMI) or else planner's default for the scale-up or scale-out position
(`planner.model.comms.SCALEUP_BUS_EFFICIENCY` / `SCALEOUT_BUS_EFFICIENCY`, NVIDIA measurements).
"""

from __future__ import annotations

import itertools

from pydantic import BaseModel, ConfigDict, Field

from planner.inputs import units
from planner.inputs.fields import Flag, Name, NonNegativeFloat, PositiveFloat, PositiveInt

MIN_LINK_GB_PER_S = 1e-3
"""The least link bandwidth a plan may give, decimal GB/s per GPU (1 MB/s, a hundredth of any
wide-area link's): below it every step takes years, and the figures after it overflow."""

MAX_LATENCY_US = 1e6
"""The most per-message latency a plan may give, microseconds (one second)."""

MAX_LINK_GB_PER_S = 1e5
"""The most link bandwidth a plan may give one GPU, decimal GB/s (100 TB/s): a hundred times
NVLink 5's 900 GB/s per direction; above it a value is a typo (bits, or bytes)."""


class LinkTier(BaseModel):
    """One level of the network, seen from one GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Name
    span_gpus: PositiveInt | None = Field(
        default=None, description="GPUs reachable inside this tier; None = every GPU (outermost)"
    )
    bandwidth_gb_per_s_per_gpu: PositiveFloat = Field(
        ge=MIN_LINK_GB_PER_S,
        le=MAX_LINK_GB_PER_S,
        description="line rate per GPU, one direction, decimal GB/s",
    )
    latency_us: NonNegativeFloat = Field(
        default=5.0, le=MAX_LATENCY_US, description="per-message latency"
    )
    mesh: Flag = Field(
        default=False,
        description="the tier's GPUs are wired to each other directly, a link per pair (a full "
        "mesh: AMD's xGMI), not through a switch: bandwidth_gb_per_s_per_gpu is a GPU's links to "
        "all its span_gpus - 1 peers together, of which a group of g GPUs uses g - 1 "
        "(planner.model.comms.place); innermost tier only",
    )
    bus_efficiency: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="achieved collective bus bandwidth / line rate on this fabric, where it was "
        "measured for it (the catalog's source says where); None = planner's default for the "
        "tier's position (planner.model.comms.SCALEUP_BUS_EFFICIENCY innermost, "
        "SCALEOUT_BUS_EFFICIENCY beyond), which a calibration may refit",
    )

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return units.gb_per_s(self.bandwidth_gb_per_s_per_gpu)

    @property
    def latency_s(self) -> float:
        return units.microseconds(self.latency_us)


def check_tiers(tiers: tuple[LinkTier, ...], num_gpus: int | None = None) -> None:
    """Tiers must be nested: spans grow, each divides the next, and the last reaches every GPU;
    only the innermost may be a full mesh."""
    if not tiers:
        raise ValueError("at least one network tier is needed")
    for tier in tiers:
        if tier.mesh and (tier is not tiers[0] or (tier.span_gpus or 0) < 2):
            raise ValueError(
                f"tier '{tier.name}' has mesh = true: only the innermost tier, spanning 2 GPUs "
                "or more, can be a full mesh"
            )
    for inner, outer in itertools.pairwise(tiers):
        if inner.span_gpus is None:
            raise ValueError(
                f"tier '{inner.name}' has no span_gpus (= every GPU) but is not the outermost"
            )
        if outer.span_gpus is not None and (
            outer.span_gpus <= inner.span_gpus or outer.span_gpus % inner.span_gpus
        ):
            raise ValueError(
                f"tier '{outer.name}' span_gpus ({outer.span_gpus}) must be a larger multiple of "
                f"tier '{inner.name}' span_gpus ({inner.span_gpus})"
            )
    last = tiers[-1]
    if num_gpus is not None and last.span_gpus is not None and last.span_gpus < num_gpus:
        raise ValueError(
            f"the outermost tier '{last.name}' spans {last.span_gpus} GPUs but num_gpus is "
            f"{num_gpus}: some GPUs cannot reach each other"
        )


def check_domain_used(used: int | None, tiers: tuple[LinkTier, ...], per_node: int) -> None:
    """`gpus_per_domain_used` lies in 1..the innermost tier's span (set only where it has one),
    in whole nodes of `per_node` GPUs (a launch asks Slurm for whole nodes of a block,
    `planner.emit.slurm.segment_nodes`); where a domain is one node, its every GPU (the launch
    scripts run a process on each: another share would be priced but not launched)."""
    span = tiers[0].span_gpus if tiers else None
    if used is None:
        return
    if span is None or not 1 <= used <= span:
        within = f"1..{span}, the innermost tier's span_gpus" if span else "unset: no span"
        raise ValueError(f"gpus_per_domain_used ({used}) must be {within}")
    if span <= per_node and used != span:
        raise ValueError(
            f"gpus_per_domain_used ({used}): an NVLink domain of {span} GPUs is one node here "
            f"(gpus_per_node {per_node}), whose every GPU the launch uses: leave it unset or "
            f"{span}"
        )
    if span > per_node and used % per_node:
        raise ValueError(
            f"gpus_per_domain_used ({used}) must be whole nodes of gpus_per_node ({per_node})"
        )
