"""Streaming multiprocessors per GPU (AMD: compute units), by catalog name: what a
communication kernel's SMs (`comms.sm_share`) and the GEMMs' SM margin are a share of."""

from __future__ import annotations

from functools import cache

from planner.inputs.hardware import ClusterSpec

GPU_SMS: tuple[tuple[str, int], ...] = (
    ("a100", 108),
    ("b200", 148),
    ("gb200", 148),
    ("b300", 148),
    ("gb300", 148),
    ("l40s", 142),
    ("mi35", 256),
    ("mi3", 304),
)
"""SMs (AMD: compute units) per GPU by catalog-name prefix: NVIDIA A100 Tensor Core GPU
Architecture whitepaper (108), Blackwell B200 (148: 2 dies x 74), L40S datasheet (142), AMD
Instinct MI300X / MI325X data sheets (304 CUs), MI350X / MI355X (CDNA 4: 8 dies of 32 CUs, 256;
servethehome.com "AMD MI350 and CDNA 4 Architecture Launched with ROCm 7"); the rest take the
H100 whitepaper's 132 (SXM5; H800 and H200 are the same GH100 part). Blackwell Ultra (B300,
GB300) is the same two-die design with up to 160 SMs per GPU (NVIDIA's "Inside NVIDIA Blackwell
Ultra" architecture blog, as its Hot Chips 2025 coverage quotes it); no enabled count of the
shipped parts was found, so they take B200's 148, a floor (more SMs only shrink what a
communication kernel or an SM margin takes)."""


def gpu_sms(cluster: ClusterSpec) -> int:
    """The cluster GPU's SMs (AMD: compute units), `GPU_SMS`."""
    return _sms_of(cluster.gpu.name)


@cache
def _sms_of(name: str) -> int:
    """`GPU_SMS` by catalog name (the search asks it for every estimate: looked up once)."""
    return next((n for prefix, n in GPU_SMS if name.startswith(prefix)), 132)
