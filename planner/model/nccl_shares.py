"""NCCL's collectives inside one NVLink domain as nccl-tests measure them: the share of the link's
achieved bandwidth (`planner.model.comms.SCALEUP_BUS_EFFICIENCY` x the line rate) a ring
(reduce-scatter, all-gather) or an all-reduce reaches by GPU family and group size, and the fixed
cost of one call. `planner.model.comms` prices its collectives with them (`Group.share`,
`Group.call`); benchmarks/nccl_nvlink.py derives them from benchmarks/data/nccl_nvlink.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from planner.inputs.hardware import ClusterSpec

RING, ALL_REDUCE = "ring", "all_reduce"
"""The collective classes of the tables: reduce-scatter and all-gather (NCCL runs them as rings
only), all-reduce."""

NCCL_NVLINK_SHARE: dict[str, dict[str, tuple[float, float, float]]] = {
    "blackwell": {
        "ring": (0.604, 0.788, 0.824),
        "all_reduce": (0.783, 0.874, 0.910),
    },
    "hopper": {
        "ring": (0.670, 0.869, 0.915),
        "all_reduce": (0.837, 0.950, 1.195),
    },
    "ampere": {
        "ring": (0.648, 0.810, 0.811),
        "all_reduce": (0.787, 0.866, 0.874),
    },
}
"""The bus bandwidth NCCL's collectives reach inside one NVLink domain, as a share of
`comms.SCALEUP_BUS_EFFICIENCY` x the line rate, by NVLink family (`family`), collective class
(ring: reduce-scatter and all-gather; all-reduce) and group size (2, 4, 8 ranks of one
node: NCCL_NVLINK_RANKS, `share`). Measured: nccl-tests on A100, H100, H200, B200, B300,
GB200 and GB300 nodes (NVIDIA's AI Configurator tables, NCCL 2.27-2.29;
benchmarks/data/nccl_nvlink), each fitted over 4-512 MiB as a call cost plus bytes over a rate,
the family's median (benchmarks/nccl_nvlink.py --fit). A ring of 2 reaches half the line rate
(Blackwell 0.48, Hopper 0.54), of 8 two thirds to three quarters; SCALEUP_BUS_EFFICIENCY's 0.80 is
what the best case (large all-reduces) reaches. Hopper's 8-rank all-reduce runs above the ring's
bound (0.96 of the line rate: NCCL's NVLink SHARP, the switch reducing), A100's switches cannot
(0.70). NCCL's all-to-all keeps the link's rate: nccl-tests put it at 0.61-0.66 of the line rate
among 8 H100 / H200 (0.36-0.61 on Blackwell), but Megatron-LM's measured MoE layer on 8 H100
(tests/model/test_moe_layer_perf.py: the alltoall dispatcher 3.41 ms slower than HybridEP) is
matched within 4% at the link's 0.80 and 34% off at nccl-tests' share; which holds in training is
undecided here (benchmarks/nccl_nvlink.py prints the all-to-all rows against the model).
Point-to-point sends (pipeline stages, ring attention) and the libraries that move TP traffic
themselves (Transformer Engine's userbuffers, PyTorch's symmetric memory: `nccl=False`) keep the
link's SCALEUP_BUS_EFFICIENCY: nothing here measures them. Groups of more than 8 ranks (NVL72
racks) take the 8-rank share."""

NCCL_NVLINK_RANKS = (2, 4, 8)
"""The group sizes NCCL_NVLINK_SHARE is measured at (one node of 8 GPUs)."""

NCCL_CALL_S: dict[str, float] = {"ring": 16.8e-6, "all_reduce": 21.6e-6}
"""Seconds one NCCL collective costs inside an NVLink domain beyond its bytes and its ring's
per-step latency (the catalog's `latency_us` per step): the launch, the protocol's set-up and the
pipeline's fill before the data streams at the rate NCCL_NVLINK_SHARE gives. Measured on the same
nccl-tests rows: the intercept of each size-4-512 MiB fit less the steps' catalog latency, the
median over all systems and group sizes (benchmarks/nccl_nvlink.py --fit; A100's run higher,
28-33 us). Below ~4 MiB NCCL's low-latency protocols take over and this over-states a call by up to
about 2x (1 MiB: 10-20 us measured); the model's messages (a layer's activations, gradient
buckets) are mostly larger."""


def share(family: str, op: str, ranks: int) -> float:
    """NCCL_NVLINK_SHARE of a family and collective class at `ranks` ranks of one domain:
    linear in log2(ranks) between the measured sizes, the nearest one outside them (groups of
    more than 8 ranks in an NVL72 rack take the 8-GPU share: nothing larger was measured)."""
    shares, sizes = NCCL_NVLINK_SHARE[family][op], NCCL_NVLINK_RANKS
    if ranks <= sizes[0]:
        return shares[0]
    for i in range(1, len(sizes)):
        if ranks <= sizes[i]:
            w = math.log2(ranks / sizes[i - 1]) / math.log2(sizes[i] / sizes[i - 1])
            return shares[i - 1] + w * (shares[i] - shares[i - 1])
    return shares[-1]


def family(cluster: ClusterSpec) -> str | None:
    """Which NCCL_NVLINK_SHARE row a cluster's innermost tier takes, for an NVIDIA GPU whose
    scale-up domain is NVLink behind switches: "blackwell" (B200, B300, GB200, GB300), "ampere"
    (A100), "hopper" (H100, H200, H800); None otherwise (AMD's xGMI mesh, PCIe: not measured)."""
    gpu = cluster.gpu
    if gpu.vendor != "nvidia" or not gpu.scaleup_name.startswith("NVLink") or cluster.tiers[0].mesh:
        return None
    if gpu.is_blackwell:
        return "blackwell"
    return "ampere" if gpu.name.startswith("a100") else "hopper"
