"""Megatron-FSDP's double buffer on a model chunk without an FSDP unit: Megatron-LM d98e8a64
refuses it at start-up. Each model chunk builds its own buffers, and its double buffer's
allocator (the fixed pool or the max pool, param_and_grad_buffer.py:2524-2532) asserts it found
units to pool ("Found no FSDP units to use fixed-size buffering", :694-696; "... max-sized
buffering", :933-935). A chunk holding only the embedding or only the loss (a
`pipeline_model_parallel_layout` stage "E" or "L", or the account_for_* flags leaving a chunk
no decoder layer) has no unit: its parameters are outside units (mcore_fsdp_adapter.py:163-171
makes the decoder layers the units; an MTP layer's inner layer is one too)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation
from planner.search.rules.parallel import pipeline_split


def fsdp_pool(job: Job, lay: Layout) -> Violation | None:
    """The first pipeline rank and chunk without a unit under Megatron-FSDP's double buffer."""
    megatron_fsdp = job.framework == "megatron" and not lay.use_torch_fsdp2
    if not (lay.fsdp_double_buffer and lay.zero_stage >= 2 and megatron_fsdp):
        return None
    if pipeline_split(job, lay) is not None:
        return None  # the split's own rule says what is wrong with it
    arch = job.arch
    mtp = lay.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    for rank, chunks in enumerate(lay.chunk_layers(arch.num_layers)):
        for c, layers in enumerate(chunks):
            if len(layers) or (rank == mtp and c == len(chunks) - 1):
                continue
            return Violation(
                "fsdp_pool",
                "parallel.fsdp_double_buffer",
                f"true, but pipeline rank {rank}'s chunk {c} holds no decoder layer: "
                "Megatron-FSDP's double buffer asserts every model chunk has FSDP units to pool "
                "(param_and_grad_buffer.py:694-696, :933-935 at d98e8a64); give each chunk a "
                "layer or drop the double buffer",
            )
    return None
