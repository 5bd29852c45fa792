"""Megatron's DDP buckets (ZeRO 0-1) and the bytes the data-parallel reduction moves: how many
parameters a bucket holds (`bucket_params`: --ddp-bucket-size, --ddp-num-buckets, Megatron's
default, one bucket without --overlap-grad-reduce) and per gradient element (`reduced_bytes`),
for `planner.model.dp_sync` and its neighbours."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job

DP_BUCKET_PARAMS = 40_000_000
"""Megatron's DDP bucket: max(40M, 1M x dp) parameters (`bucket_params`); the last bucket
cannot be overlapped."""


DECODER_LAYER_TENSORS = 6
"""Parameter tensors of a Megatron-Core decoder layer with Transformer Engine's fused-norm
linears: the QKV, output-projection, fc1 and fc2 weights and the two norm weights fused into QKV
and fc1 (biases, QK norms and experts add more). A DDP bucket holds whole tensors (Megatron's
param_and_grad_buffer.py closes a bucket once it holds bucket_size parameters), so a stage has
at most as many buckets as tensors: a bucket size below a tensor (NeMo 2's MLPerf Llama 3.1 405B
default of 200 parameters) makes about one bucket per tensor, not one per 200 parameters."""


def explicit_bucket(lay: Layout, stage_params: float, layers: int = 1) -> float | None:
    """Parameters per DDP bucket the layout sets: --ddp-bucket-size, or with --ddp-num-buckets
    n a model chunk's parameters // n (a stage of `stage_params` parameters holds vpp chunks;
    Megatron training.py resolve_ddp_bucket_size), never less than the stage's average tensor
    (its `layers` decoder layers' DECODER_LAYER_TENSORS, the embedding and the output layer)
    and never more than a model chunk's parameters, the most a buffer holds (each chunk is its
    own DDP with its own buffers; param_and_grad_buffer.py d98e8a64
    `_compute_default_per_buffer_param_layout` closes a bucket at bucket_size parameters or at
    the buffer's last parameter, so a bucket_size above the buffer makes one bucket of the
    buffer); None where it sets neither."""
    if lay.ddp_bucket_size is not None:
        size = float(lay.ddp_bucket_size)
    elif lay.ddp_num_buckets is not None:
        size = stage_params / max(lay.vpp, 1) // lay.ddp_num_buckets
    else:
        return None
    floor = max(size, stage_params / (max(layers, 1) * DECODER_LAYER_TENSORS + 2), 1.0)
    return min(floor, max(stage_params / max(lay.vpp, 1), 1.0))


def bucket_params(lay: Layout, group_size: int, stage_params: float, layers: int = 1) -> float:
    """Parameters per DDP bucket: without --overlap-grad-reduce one bucket per model chunk's
    buffer, whatever the line sets (Megatron-LM d98e8a64 training.py:2192-2193 and
    distributed_data_parallel.py:135-137 set bucket_size None, "infinity"); else what the
    layout sets (`explicit_bucket`), else Megatron's default max(DP_BUCKET_PARAMS, 1M x the
    group's ranks)."""
    if not lay.overlap_grad_reduce:
        return max(stage_params / max(lay.vpp, 1), 1.0)
    explicit = explicit_bucket(lay, stage_params, layers)
    if explicit is not None:
        return explicit
    return float(default_bucket(group_size))


def reduced_bytes(job: Job, lay: Layout) -> float:
    """Bytes per gradient element of the data-parallel reduction: the main gradients'
    (`Job.grad_bytes`), at ZeRO 2 and 3 Megatron-FSDP's gradient communication dtype where the
    plan sets one (`Job.grad_comm_bytes`: megatron_fsdp param_and_grad_buffer.py:4056-4058 fetches
    the unreduced bucket in it and :4099-4104 reduce-scatters that bucket, d98e8a64)."""
    return job.grad_comm_bytes if lay.zero_stage >= 2 else job.grad_bytes


def default_bucket(group_size: int) -> int:
    """Megatron-LM's bucket size where the command line gives none: max(DP_BUCKET_PARAMS, 1M x
    the data-parallel group's ranks) parameters (training.py resolve_ddp_bucket_size)."""
    return max(DP_BUCKET_PARAMS, 1_000_000 * group_size)
