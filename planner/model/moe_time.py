"""The MoE layer's work that no model FLOPs count, for one micro-batch on one GPU: the router's
logits GEMM and the token permutations before the dispatch and after the combine
(`planner.model.layer_time` adds both to the layer's time; the routing load is
`routing_load.step_load`, the busiest rank's tokens over the even share)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.gemm import Gpu, gemm_time

PERMUTE_BYTES_PER_ELEMENT = 16.0
"""HBM bytes per element of each routed (token, expert) copy of the hidden state, forward +
backward, of the MoE token permutations (Megatron-Core moe_utils.permute / unpermute, Transformer
Engine's fused moe_permute / moe_unpermute): the forward's permute gathers each copy (read 2,
write 2 bytes in bf16) and its unpermute scatters it back with its probability (read 2, write
2); the backward runs each in reverse: 4 x 4 = 16."""


def router_time(job: Job, lay: Layout, gpu: Gpu, t: float) -> float:
    """Forward seconds of the router's logits GEMM, the rank's tokens (its sequence-parallel
    shard) x hidden x experts in bf16 (Megatron's TopKRouter; the backward, 2 x this, follows
    from the layer's backward = 2 x forward)."""
    arch = job.arch
    tokens = t / (lay.tp if lay.sequence_parallel else 1)
    e = float(arch.num_moe_experts or 1)
    return gemm_time(tokens, arch.hidden_size, e, gpu.peak_bf16, gpu.ridge, gpu.e_bf16)


def permute_time(job: Job, lay: Layout, gpu: Gpu, t: float, load: float) -> float:
    """Seconds per micro-batch, forward + backward, of the token permutations of one MoE layer:
    PERMUTE_BYTES_PER_ELEMENT per element of each routed copy the busiest rank handles (its
    tokens x top_k x the routing load), at the achieved HBM bandwidth. Added with the FP8 casts
    (a third of it in the forward, the rest in the backward)."""
    arch = job.arch
    tokens = t / (lay.tp if lay.sequence_parallel else 1)
    pairs = tokens * arch.moe_router_topk * load
    return PERMUTE_BYTES_PER_ELEMENT * pairs * arch.hidden_size / gpu.hbm
