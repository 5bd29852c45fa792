"""Host memory a GPU's process pins to stage its share of each checkpoint save (Megatron-LM
d98e8a64, `--ckpt-format torch_dist`).

Every save, synchronous or not, runs `FileSystemWriterAsync`'s stages
(dist_checkpointing/strategies/torch.py:653-656: a synchronous save is `execute_sync` of the
asynchronous request): `preload_tensors` (filesystem_async.py:227-246) copies every tensor the
rank writes to the CPU at once, before any is written, `tensor.to("cpu", non_blocking=True)`
(:243), which PyTorch allocates pinned (aten/src/ATen/native/TensorConversions.cpp `_to_copy`:
`pin_out` where non_blocking copies to the CPU), one block each, rounded up to a power of two
(`host_pinned.pinned_block`). Without --async-save the trainer's process stages them
(async_utils.py:143-152); with it, which needs the persistent worker (training/arguments.py:
1814-1817), the worker's process does (async_utils.py:579-582). Either process frees the copies
after the write into its pinned allocator's cache, which keeps them for the next save: the
staging is held from the first save on, not only while one runs.

What a rank stages: the fully parallel save (the default; --no-ckpt-fully-parallel-save turns
it off, arguments.py:1766-1777) spreads the replicated tensors over the data-parallel (x
context) group, so each GPU writes its model-parallel shard of the weights over dp x cp, and
the distributed optimizer's dp_reshardable state (training/checkpointing.py:558) is each rank's
own shard: together about the checkpoint over the GPUs of its pipeline stage
(`checkpoint_size.checkpoint_bytes_per_param` of each parameter of the rank's stage, over dense_dp,
the expert parameters over expert_dp). The offloaded optimizer's share of the state
(`Job.optimizer_offload_fraction`) is already in host tensors (distrib_optimizer.py:1104-1106
hands HybridDeviceOptimizer's state over as it is; filesystem_async.py:156-166 leaves a whole CPU
tensor as it is, and `.to("cpu")` returns it): not staged again. The blocks round up as the
tensors are cut: the weights whole (`host_pinned.rank_rounding(whole=True)`), the optimizer's
state in the distributed optimizer's pieces (`host_pinned.rank_rounding`).

Counted for Megatron-LM's torch_dist (ZeRO 0 / 1) and for Megatron-FSDP's fsdp_dtensor (ZeRO
2 / 3) under --async-save, whose writer (nvidia-resiliency-ext's FileSystemWriterAsync,
checkpointing.py:918-922, not read) is taken to stage as torch_dist's does. Not counted:
Megatron-FSDP's synchronous save (torch DCP's FileSystemWriter copies each tensor to pageable
memory as it writes it) and torchtitan's (DCP's, the same). A plan has no setting that stops
saves: planner's operations model checkpoints every run (`planner.ops.resilience`), so every
Megatron plan is counted as saving."""

from __future__ import annotations

from collections.abc import Collection

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.checkpoint_size import checkpoint_bytes_per_param
from planner.model.host_pinned import Rounding, rank_rounding
from planner.model.schedule import Chunks
from planner.model.stage_params import stage_params


def stages(job: Job, zero_stage: int) -> bool:
    """Whether the plan's saves stage in pinned host memory (the module docstring)."""
    if job.framework != "megatron":
        return False
    return zero_stage <= 1 or job.async_save


def split_bytes(job: Job, zero_stage: int) -> tuple[float, float]:
    """(weights, optimizer state) bytes per parameter of a checkpoint that a save stages: the
    16-bit (fp32 with fp32 parameters; Megatron-FSDP's fp32 main) weights, and the rest of
    `checkpoint_bytes_per_param` less its offloaded share (the module docstring)."""
    total = checkpoint_bytes_per_param(job, zero_stage)
    weights = 4.0 if zero_stage >= 2 or job.params_dtype == "fp32" else 2.0
    kept = 1.0 - job.optimizer_offload_fraction
    return weights, (total - weights) * kept


def staging_bytes(job: Job, layout: Layout, only: Collection[int] | None = None) -> float:
    """Pinned host bytes of a save's staging on the busiest GPU (of the pipeline ranks `only`
    where given): `rank_staging_bytes`' most. 0 where saves do not stage."""
    if not stages(job, layout.zero_stage):
        return 0.0
    return max(
        (
            rank_staging_bytes(job, layout, rank, chunks)
            for rank, chunks in enumerate(layout.chunk_layers(job.arch.num_layers))
            if only is None or rank in only
        ),
        default=0.0,
    )


def rank_staging_bytes(
    job: Job, layout: Layout, rank: int, chunks: Chunks, rounding: Rounding = "exact"
) -> float:
    """Pinned host bytes of a save's staging on a GPU of pipeline rank `rank` (its decoder layers
    `chunks`): its parameters' checkpoint bytes over the data-parallel group, each part times
    its blocks' round-up (the module docstring; `rounding`: exact, or a floor or a ceiling of
    it, `host_pinned.Rounding`). 0 where saves do not stage."""
    if not stages(job, layout.zero_stage):
        return 0.0
    weights, state = split_bytes(job, layout.zero_stage)
    dense, expert = stage_params(job, layout, rank, chunks)
    dense, expert = dense / layout.dense_dp, expert / max(layout.expert_dp, 1)
    whole = cut = (1.0, 1.0)
    if rounding != "floor":
        up = rounding == "ceiling"
        whole = rank_rounding(job, layout, rank, chunks, whole=True, ceiling=up)
        # without the distributed optimizer the state is saved as whole tensors shaped like
        # the parameters (optimizer.py:1194-1215), as `host_memory` rounds them at ZeRO 0
        cut = rank_rounding(job, layout, rank, chunks, whole=layout.zero_stage == 0, ceiling=up)
    held = dense * (weights * whole[0] + state * cut[0])
    return held + expert * (weights * whole[1] + state * cut[1])
