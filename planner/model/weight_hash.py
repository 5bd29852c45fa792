"""What Megatron-LM's weight-hash check adds to a step (`Job.weight_hash_interval`, Megatron
--check-weight-hash-across-dp-replicas-interval N).

Megatron-LM d98e8a64: every N-th iteration, training.py's `post_training_step_callbacks` runs
megatron/core/utils.py `check_param_hashes_across_dp_replicas(model, cross_check=True)` and a
barrier, inside the interval timer whose time Megatron logs as the iteration time. For every
parameter tensor of the rank's model chunks the host runs
`hashlib.sha1(param.data.to("cpu").float().numpy(force=True))`: a synchronous device-to-host copy
of the weight in the parameters' dtype (`fp32.weight_bytes`: bf16 under --bf16, fp32 without
--bf16 / --fp16, whose parameters are params_dtype torch.float, arguments.py:1194, and no
Float16Module wraps them, training.py:2468-2470), a cast to fp32 on the host (a no-op on fp32
weights: `.float()` returns the tensor itself) and SHA-1 over the 4-byte values, on the rank's
one core; the 20-byte digests are then all-gathered over the data-parallel and expert
data-parallel groups and compared (bytes per tensor: nothing next to the rest).

One check on a pipeline rank: its parameters (`stage_params`, each GPU's own: the check runs
before Megatron-FSDP's full sharding, which validate_args refuses with it) over the host link
(`host_link_bandwidth`, `fp32.weight_bytes` each) plus `host_seconds` of its parameters and tensors
(`param_tensors.rank_tensors`) on the job's host (`host.slowdown`). The busiest rank decides (the
barrier waits for it); a step pays one check over N, the mean over N steps, which is what a step
time predicts (a run's median step, over steps without a check, shows none of it).
"""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import fp32, host
from planner.model.host_link import host_link_bandwidth
from planner.model.param_tensors import rank_tensors
from planner.model.stage_params import stage_params

HASH_S_PER_PARAM = 3.66e-9
"""Measured: host seconds per parameter of Megatron's loop (`.float()` on the host, `.numpy()`,
SHA-1 over 4 bytes) with one torch thread, as torchrun starts its workers: benchmarks/host_hash.py
fits it with HASH_S_PER_TENSOR on its measurements (benchmarks/data/host_hash.json: an AMD EPYC
with the x86 SHA extensions, torch 2.14.1; SHA-1 alone runs at ~2 GB/s there, half the time;
runs of --measure a few minutes apart fitted 3.66-3.84 ns and 3.3-6.2 us).
Tensors whose fp32 copy stays in the CPU's cache (a few MiB) take about 60% of it; a model's
weights are mostly larger. Taken as the reference host's (DGX H100's Xeon, which has the SHA
extensions too)."""
HASH_S_PER_TENSOR = 3.3e-6
"""Measured with HASH_S_PER_PARAM: host seconds per tensor (the copy's call, the cast's and
hashlib's allocations, the digest's wrapping into a tensor). The measurement's tensors are on the
host already: the latency of each synchronous device-to-host copy (microseconds) is not in it."""


def host_seconds(params: float, tensors: int) -> float:
    """Reference-host seconds of the loop over `tensors` tensors of `params` parameters in all,
    already on the host."""
    return HASH_S_PER_PARAM * params + HASH_S_PER_TENSOR * tensors


def check_seconds(job: Job, lay: Layout) -> float:
    """Seconds of one check: the busiest pipeline rank's copy and hashing."""
    link = host_link_bandwidth(job)
    word = fp32.weight_bytes(job)
    worst = 0.0
    for rank, chunks in enumerate(lay.chunk_layers(job.arch.num_layers)):
        dense, expert = stage_params(job, lay, rank, chunks)
        params = dense + expert
        tensors = rank_tensors(job.arch, lay, rank, chunks)
        # `param.data` in the parameters' dtype over the host link, then hashed there
        seconds = word * params / link + host_seconds(params, tensors) * host.slowdown(job)
        worst = max(worst, seconds)
    return worst


def step_seconds(job: Job, lay: Layout) -> float:
    """What the check adds to a step on average: one check every `Job.weight_hash_interval`
    steps (0: never)."""
    if job.weight_hash_interval <= 0:
        return 0.0
    return check_seconds(job, lay) / job.weight_hash_interval
