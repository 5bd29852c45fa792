"""A GPU's link to host memory: what CPU offloading (`planner.model.layer_time`, `Layer.offload`)
and fine-grained activation offloading (`planner.model.fine_offload`) move activations over."""

from __future__ import annotations

from planner.inputs.plan import Job

HOST_LINK_GB_PER_S: tuple[tuple[str, float], ...] = (
    ("gb200", 225.0),
    ("gb300", 225.0),
    ("gh200", 450.0),
    ("a100", 32.0),
    ("l40s", 32.0),
    ("*", 64.0),
)
"""A GPU's link to host memory, GB/s per direction, by catalog-name prefix (the catalog has no
field yet): PCIe 4.0 x16 (16 GT/s x 16 lanes, 128b/130b: 31.5 GB/s) on A100 and L40S; PCIe 5.0
x16 (63 GB/s) on H100, H200, H800, B200, MI300X, MI325X (the rest, "*"); NVLink-C2C 900 GB/s
bidirectional (NVIDIA Grace Hopper / Grace Blackwell datasheets): GH200's 450 per direction to
its one GPU; a GB200 Grace serves two GPUs, 225 each."""

HOST_LINK_EFFICIENCY = 0.80
"""Achieved / nominal host-link bandwidth for pinned, large asynchronous copies (as
HBM_EFFICIENCY for streaming kernels; PCIe's TLP overhead alone takes ~5-10%)."""


def host_link_bandwidth(job: Job) -> float:
    """Bytes/s one GPU moves to or from host memory: its host link's rate per direction
    (HOST_LINK_GB_PER_S by GPU family; "*" the rest) x HOST_LINK_EFFICIENCY."""
    name = job.cluster.gpu.name
    link = next(v for prefix, v in HOST_LINK_GB_PER_S if prefix == "*" or name.startswith(prefix))
    return link * 1e9 * HOST_LINK_EFFICIENCY
