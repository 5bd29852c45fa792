"""The host's half of Megatron's CPU-offloaded optimizer (Megatron-LM --optimizer-cpu-offload,
`Job.optimizer_offload_fraction`): what its step costs beyond the GPU's share.

Megatron-LM d98e8a64 builds a HybridDeviceOptimizer (megatron/core/optimizer/cpu_offloading/
hybrid_optimizer.py; megatron/core/optimizer/__init__.py) over the distributed optimizer's shard.
Its first `--optimizer-offload-fraction` of the shard's parameters (by count, in order; the
argument defaults to 1.0) get a pinned fp32 copy in host memory, updated there by torch's AdamW
(fused=True); the rest a fp32 copy on the GPU, updated by the GPU's FusedAdam
(`planner.inputs.job.OFFLOAD_GPU_PART_BYTES`, the memory side). Each step (`step`):
1. device to host: each offloaded parameter's main gradient into a pinned fp32 host buffer
   (D2H_BYTES a parameter);
2. the CPU's AdamW over the offloaded share: it reads the fp32 master, gradient and two moments
   and writes back the master and moments, CPU_ADAM_BYTES of host memory a parameter;
3. host to device: each updated fp32 master copied into the GPU's parameter (`copy_` of an fp32
   host tensor into the 16-bit parameter: the fp32 values cross the link, H2D_BYTES, and are cast
   on the GPU).
The host thread runs the CPU step itself (`cpu_optimizer.step` returns when the update is done),
so nothing of the next step is issued meanwhile: the time is exposed. The GPU's share runs on
the GPU in the same step (launched first), under it. With --overlap-cpu-optimizer-d2h-h2d
(`overlap`) each parameter has its own CPU optimizer and the copies run on their own streams, so
the three pipeline over parameters and the slowest sets the time; without it they run one after
the other.

Rates: the copies at `host_link.host_link_bandwidth` (the GPU's link to host memory, shared as
there); the CPU step at the node's host-memory bandwidth (HOST_MEMORY_GB_PER_S) over the GPUs
that share it, x HOST_MEMORY_EFFICIENCY: memory-bound, as an AdamW of a few flops per 28 bytes is
on any server CPU with its cores all working. A run whose ranks are limited to one CPU thread
each (torchrun sets OMP_NUM_THREADS=1 when it starts several processes a node) is slower than
this by the ratio of one core's bandwidth to its share of the node's: not modelled.
"""

from __future__ import annotations

from planner.inputs.plan import Job
from planner.model.host_link import gpu_share, host_link_bandwidth

CPU_ADAM_BYTES = 4.0 * 4 + 4.0 * 3
"""Host-memory bytes per offloaded parameter of torch's AdamW step: the fp32 master, gradient,
exp_avg and exp_avg_sq read (16), the master and both moments written (12)."""

D2H_BYTES = 4.0
"""Bytes per offloaded parameter copied to the host: its gradient, in fp32 whatever the GPU
buffer's dtype. The host buffer takes the fp32 clone's dtype (hybrid_optimizer.py:106-113,
`torch.empty(param.shape, dtype=param.dtype, ...)`), and a non-blocking copy converts on the GPU
before the transfer (PyTorch aten/src/ATen/native/cuda/Copy.cu `copy_kernel_cuda`: "If
non_blocking is true - type conversions are performed on the GPU")."""

H2D_BYTES = 4.0
"""Bytes per offloaded parameter copied back to the GPU: the fp32 master (hybrid_optimizer.py
`param_copy_back_gpu_hook`, `gpu_param.data.copy_(param.data)` from the fp32 host copy)."""

HOST_MEMORY_GB_PER_S: tuple[tuple[str, float, int], ...] = (
    ("gb200", 512.0, 2),
    ("gb300", 512.0, 2),
    ("gh200", 512.0, 1),
    ("a100", 409.6, 8),
    ("h100", 614.4, 8),
    ("h200", 614.4, 8),
    ("h800", 614.4, 8),
    ("b200", 716.8, 8),
    ("*", 614.4, 8),
)
"""(catalog-name prefix, GB/s of host memory, GPUs sharing it), by GPU family, as
`host_link.HOST_LINK_GB_PER_S`: channels x transfer rate x 8 bytes. DGX A100: two AMD EPYC 7742,
8 channels of DDR4-3200 each (2 x 204.8); DGX H100 / H200: two Intel Xeon Platinum 8480C, 8
channels of DDR5-4800 each (2 x 307.2); DGX B200: two Xeon Platinum 8570, 8 channels of
DDR5-5600 each (2 x 358.4); GB200 / GB300: one Grace per two GPUs, LPDDR5X at up to 512 GB/s
(NVIDIA Grace CPU datasheet). "*" (B300, the AMD boards, L40S hosts): the DGX H100 figure, their
hosts not read."""

HOST_MEMORY_EFFICIENCY = 0.75
"""Achieved / wire-rate host-memory bandwidth of a streaming loop: STREAM's copy and triad reach
0.74-0.78 of the DDR wire rate (Texas Instruments' AM62x / AM64x benchmark notes, SPRAD45A and
SPRACV1B, Table "STREAM"), as HBM_EFFICIENCY is the GPU's."""


def host_memory_bandwidth(job: Job) -> float:
    """Bytes/s of host memory one GPU's CPU step streams while every GPU's runs: the node's host
    memory (HOST_MEMORY_GB_PER_S by GPU family) over the GPUs sharing it, x
    HOST_MEMORY_EFFICIENCY."""
    return gpu_share(HOST_MEMORY_GB_PER_S, job) * HOST_MEMORY_EFFICIENCY


def host_step_time(job: Job, offloaded: float, overlap: bool) -> float:
    """Seconds one GPU's step spends on its `offloaded` parameters (those of its optimizer shard
    that live on the host): gradient copies out, the CPU's AdamW, master copies back, pipelined
    (`overlap`, --overlap-cpu-optimizer-d2h-h2d: the slowest of the three) or one after the
    other (module docstring)."""
    if offloaded <= 0:
        return 0.0
    link = host_link_bandwidth(job)
    parts = (
        offloaded * D2H_BYTES / link,
        offloaded * CPU_ADAM_BYTES / host_memory_bandwidth(job),
        offloaded * H2D_BYTES / link,
    )
    return max(parts) if overlap else sum(parts)


def gpu_extra_bytes(job: Job, zero_stage: int) -> float:
    """Bytes per parameter of the optimizer's shard that the offloaded optimizer keeps on the GPU
    beyond `Job.optimizer_bytes` (its GPU share at OFFLOAD_GPU_PART_BYTES), between steps and so
    at the activations' peak:
    - ZeRO 2 / 3 (Megatron-FSDP): the fp32 main weights of the offloaded share too. The
      optimizer's parameters are views of Megatron-FSDP's fp32 main-weight buffer, allocated
      whatever the offload (megatron_fsdp/param_and_grad_buffer.py:2689-2706, :3250-3261), and
      HybridDeviceOptimizer only clones the offloaded ones to the host (hybrid_optimizer.py:274):
      4 x fraction.
    - ZeRO 0 / 1 with bf16 gradient buffers: the GPU share's fp32 clones get
      `grad.to(fp32_param.dtype)` (hybrid_optimizer.py:93), a new fp32 tensor the outer
      zero_grad never clears (:445-455): it lives until the next step replaces it, 4 x (1 -
      fraction). With fp32 buffers the cast returns the buffer itself.
    None with fp32 parameters, which are their own masters (no clone, no cast)."""
    f = job.optimizer_offload_fraction
    if f <= 0 or job.framework != "megatron" or job.params_dtype == "fp32":
        return 0.0
    if zero_stage >= 2:
        return D2H_BYTES * f
    return D2H_BYTES * (1.0 - f) if job.main_grad_dtype == "bf16" else 0.0
