"""A GPU's link to host memory: what CPU offloading (`planner.model.layer_time`, `Layer.offload`)
and fine-grained activation offloading (`planner.model.fine_offload`) move activations over."""

from __future__ import annotations

from planner.inputs.plan import Job

HOST_LINK_GB_PER_S: tuple[tuple[str, float, int], ...] = (
    ("gb200", 450.0, 2),
    ("gb300", 450.0, 2),
    ("gh200", 450.0, 1),
    ("a100", 32.0, 2),
    ("h100", 64.0, 2),
    ("h200", 64.0, 2),
    ("h800", 64.0, 2),
    ("b200", 64.0, 2),
    ("l40s", 32.0, 1),
    ("*", 64.0, 1),
)
"""(catalog-name prefix, GB/s per direction of the link to host memory, GPUs that share it), by
GPU family ("*" the rest; the catalog has no field yet). Links: PCIe 4.0 x16 (16 GT/s x 16 lanes,
128b/130b: 31.5 GB/s) on A100 and L40S; PCIe 5.0 x16 (63 GB/s) on H100, H200, H800, B200, B300,
MI300X, MI325X; NVLink-C2C 900 GB/s bidirectional (NVIDIA Grace Hopper / Grace Blackwell
datasheets), 450 per direction.

Sharing: offloading moves every GPU's activations at once (each rank runs the same schedule), so
GPUs behind one link split it. A GB200 / GB300 Grace serves two GPUs over its C2C link (225 GB/s
each). The 8-GPU DGX / HGX boards of A100, H100 (H200, H800) and B200 reach the CPU through four
PCIe switches, each holding two GPUs and their NICs on one x16 uplink: NVIDIA's GPUDirect Storage
guide shows a DGX A100's GPUs and NICs under shared switches (docs.nvidia.com/ai-enterprise,
"Validate PCI Switch System Topology"), and the nvidia-smi topology of an 8 x B200 server puts
GPU0 and GPU1 on the same switch as NIC0 and NIC1 (PIX), GPU2 and GPU3 on the next
(the-dsvolk.github.io ai-perf B200 explorer). Megatron-LM's functional test
gpt3_moe_mcore_te_tp2_pp2_ep4_etp1_no_mtp_no_a2a_ovlp_fine_grained_offloading (fine-grained
offload of seven module groups, 8 H100) measured 1.94 s per step, 0.55 s predicted without
offloading (benchmarks/fidelity.py --functional; its GB200 run, whose C2C transfers hide, is +31%
apart from offloading). Its copies outlast the compute (4 micro-batches, 27 ms a MoE layer one
way against 14.5 ms of compute): with half a PCIe 5 link per GPU, 1.32 s predicted with each
direction at that rate, 2.02 s with copies out and reloads sharing it, as
`stage_offload.fine_offload_exposed` takes them (PCIe is full duplex on paper: the sharing is
the measured behaviour; host memory bandwidth under eight GPUs copying both ways is not in any
source read here). B300, L40S and the AMD boards keep a
link of their own: no topology of theirs was read (B300's ConnectX-8 SuperNICs carry PCIe switches
of their own, whose wiring to the host is not in any source read here)."""

HOST_LINK_EFFICIENCY = 0.80
"""Achieved / nominal host-link bandwidth for pinned, large asynchronous copies (as
HBM_EFFICIENCY for streaming kernels; PCIe's TLP overhead alone takes ~5-10%)."""


def gpu_share(table: tuple[tuple[str, float, int], ...], job: Job) -> float:
    """Bytes/s of a host resource one GPU of the job gets while every GPU uses it: the first row of
    `table` (catalog-name prefix, GB/s, GPUs sharing it) whose prefix the GPU's name starts with
    ("*" any), its rate over its sharers."""
    name = job.cluster.gpu.name
    rate, sharing = next(
        (v, n) for prefix, v, n in table if prefix == "*" or name.startswith(prefix)
    )
    return rate / sharing * 1e9


def host_link_bandwidth(job: Job) -> float:
    """Bytes/s one GPU moves to or from host memory while every GPU offloads: its host link's rate
    per direction over the GPUs sharing it (HOST_LINK_GB_PER_S by GPU family; "*" the rest) x
    HOST_LINK_EFFICIENCY."""
    return gpu_share(HOST_LINK_GB_PER_S, job) * HOST_LINK_EFFICIENCY
