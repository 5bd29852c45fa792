"""One PCIe link for all of a GPU's traffic, where the GPUs have no NVLink.

A PCIe-only GPU (the catalog's innermost tier named `PCIE_TIER`, e.g. the L40S) reaches everything
outside its own memory through its one x16 link: its server's other GPUs (TP, CP and EP traffic
inside the server go GPU to GPU through the PCIe switches), its NIC (data-parallel traffic and
whatever else spans servers leaves by GPUDirect RDMA through the same switch, or by a bounce
through host memory: the GPU's link either way) and host memory (CPU offloading's copies). The
step model (`planner.model.cost`) prices each of them on its own tier and hides each under compute
on its own, as if each had a link to itself; here they share one.

Each direction of the link carries per step: every collective the GPU takes part in for its
modelled seconds (ring and all-to-all traffic sends and receives alike, so the modelled time is
each direction's), the pipeline's sends (one activation forward and one gradient backward per
micro-batch and model chunk, received as many times the other way), and the offloaded
activations once (out in the forward, back before the backward: one copy each way). Nothing
else of the step can run while the link is the bottleneck but the compute it hides under, so
the step is at least the link's busy seconds plus the optimizer step and the fixed per-step
costs, which run with no traffic in flight (`floor`).

Approximations: traffic counted at the seconds its own tier takes, latency included, and
traffic through the NIC at the NIC's rate, below the link's on the L40S (200 Gb/s assumed, 23
against 24.8 GB/s achieved), so up to 7% long; the output layer's TP collectives left out (one
layer's against the decoder's dozens). Not modelled: the PCIe switch's uplink, which two to four
GPUs share toward the CPU and the other switches, and which would bound cross-switch and host
traffic further.

NVLink GPUs keep their NVLink traffic off the PCIe link; their NIC traffic and host copies share
it too (PCIe 5.0 x16, 63 GB/s, against a 50 GB/s NIC on H100), but the runs here that offload
(Megatron-LM's functional tests) keep their traffic inside one NVLink domain, so nothing checks
such a floor and they are left without one: the breakdown does not split a collective's
seconds between NVLink and the NIC."""

from __future__ import annotations

from planner.inputs.hardware import ClusterSpec

PCIE_TIER = "pcie"
"""The catalog's name for an innermost tier that is the GPUs' PCIe fabric (no NVLink)."""


def applies(cluster: ClusterSpec) -> bool:
    """Whether every GPU's traffic shares its one PCIe link: the innermost tier is PCIe."""
    return cluster.tiers[0].name == PCIE_TIER


def busy_seconds(per_microbatch: float, m: int, dp_traffic: float) -> float:
    """Seconds per step one direction of the link carries traffic: `per_microbatch` seconds of
    TP, CP, EP and PP traffic and offload copies (one way) for each of the `m` micro-batches, and
    the step's data-parallel traffic, hidden or not."""
    return m * per_microbatch + dp_traffic


def floor(busy: float, optimizer: float, other: float) -> float:
    """The least step time the link allows: its busy seconds, then the optimizer step and the
    fixed per-step costs, during which it carries nothing."""
    return busy + optimizer + other
