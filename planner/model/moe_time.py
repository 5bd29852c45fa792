"""The MoE layer's work that no model FLOPs count, for one micro-batch on one GPU: the router's
logits GEMM and the token permutations before the dispatch and after the combine
(`planner.model.layer_time` adds both to the layer's time; the routing load is
`routing_load.step_load`, the busiest rank's tokens over the even share); and the HBM traffic the
experts' fused grouped MLP saves (`fused_mlp_saving`, which layer_time takes off)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.fp32 import gemm_peak
from planner.model.gemm import Gpu, gemm_time

PERMUTE_BYTES_PER_ELEMENT = 16.0
"""HBM bytes per element of each routed (token, expert) copy of the hidden state, forward +
backward, of the MoE token permutations (Megatron-Core moe_utils.permute / unpermute, Transformer
Engine's fused moe_permute / moe_unpermute): the forward's permute gathers each copy (read 2,
write 2 bytes in bf16) and its unpermute scatters it back with its probability (read 2, write
2); the backward runs each in reverse: 4 x 4 = 16."""


def router_time(job: Job, lay: Layout, gpu: Gpu, t: float) -> float:
    """Forward seconds of the router's logits GEMM, the rank's tokens (its sequence-parallel
    shard) x hidden x experts in the parameters' dtype (Megatron's TopKRouter, Transformer
    Engine's GEMM: `fp32.gemm_peak`; the backward, 2 x this, follows from the layer's
    backward = 2 x forward)."""
    arch = job.arch
    tokens = t / (lay.tp if lay.sequence_parallel else 1)
    e = float(arch.num_moe_experts or 1)
    return gemm_time(tokens, arch.hidden_size, e, gemm_peak(job, gpu), gpu.ridge, gpu.e_bf16)


def permute_time(job: Job, lay: Layout, gpu: Gpu, t: float, load: float) -> float:
    """Seconds per micro-batch, forward + backward, of the token permutations of one MoE layer:
    PERMUTE_BYTES_PER_ELEMENT per element (expert_hidden wide: a latent MoE permutes latent
    tokens) of each copy they move (`permuted_pairs`), at the achieved HBM bandwidth. Half of it
    in the forward (the permute and the unpermute), half in the backward (each reversed: the
    same bytes)."""
    pairs = permuted_pairs(job, lay, t, load)
    return PERMUTE_BYTES_PER_ELEMENT * pairs * job.arch.expert_hidden / gpu.hbm


def permuted_pairs(job: Job, lay: Layout, t: float, load: float) -> float:
    """The (token, expert) copies one MoE layer's permutations move each way per micro-batch on
    the busiest rank. The fused and all-gather dispatchers permute what arrives: the rank's
    `routed_pairs` (at the routing `load`) x `permuted_copies`. Megatron's alltoall dispatcher
    permutes the rank's own copies before the dispatch (and restores them after the combine):
    tokens x top_k at load 1, the routing map's size (token_dispatcher.py d98e8a64 :556, :671-675
    num_out_tokens; capacity x E = the capacity factor x that with padding, :525), and only its
    sort after the dispatch (`permutations` = 2) handles what arrives, etp x the routed pairs."""
    if lay.moe_token_dispatcher_type != "alltoall":
        return permuted_copies(job, lay) * routed_pairs(job, lay, t, load)
    cf = job.moe_expert_capacity_factor
    own = 1.0 if cf is None else (cf if job.moe_pad_expert_input_to_capacity else min(cf, 1.0))
    sorted_ = (permutations(job, lay) - 1) * lay.expert_tp * routed_pairs(job, lay, t, load)
    return routed_pairs(job, lay, t, own) + sorted_


def permutations(job: Job, lay: Layout) -> int:
    """How many times a routed copy is permuted and restored each way: once (permute before the
    dispatch, unpermute after the combine; the fused dispatchers permute on arrival instead), and
    once more with Megatron's alltoall dispatcher where a rank holds more than one expert: the
    copies arrive grouped by source rank and are sorted by local expert after the dispatch and
    back before the combine (Megatron-LM d98e8a64 token_dispatcher.py,
    MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess, `sort_chunks_by_idxs`,
    run whenever num_local_experts > 1)."""
    local = (job.arch.num_moe_experts or 1) // max(lay.ep, 1)
    return 2 if lay.moe_token_dispatcher_type == "alltoall" and local > 1 else 1


def permuted_copies(job: Job, lay: Layout) -> int:
    """The copies the `permutations` move, in units of the rank's own routed copies
    (`routed_pairs`). With experts split over etp ranks, what a rank's experts run arrives etp
    times over (`dispatch.moe_dispatch`): the alltoall dispatcher permutes its own copies before
    the dispatch but sorts the etp-gathered ones after it (token_dispatcher.py d98e8a64: the
    AllGather-V over the expert-TP group comes before `sort_chunks_by_idxs`), and the fused and
    all-gather dispatchers permute what arrives, etp x. 1 at etp 1."""
    etp = lay.expert_tp
    if lay.moe_token_dispatcher_type == "alltoall":
        return 1 + (permutations(job, lay) - 1) * etp
    return etp


def routed_pairs(job: Job, lay: Layout, t: float, load: float) -> float:
    """(token, expert) copies the busiest rank's experts handle per micro-batch: its tokens (the
    sequence-parallel shard) x top_k x the routing load (with expert TP 1, the rows of its
    grouped GEMMs)."""
    tokens = t / (lay.tp if lay.sequence_parallel else 1)
    return tokens * job.arch.moe_router_topk * load


def fused_mlp_saved_elements(glu: bool) -> float:
    """bf16 elements of HBM traffic per routed row and expert-FFN column that Transformer Engine's
    fused grouped MLP saves (`Job.grouped_mlp_fused`: fc1's grouped GEMM with the activation,
    the router-probability scaling and the quantisation of fc2's input in its epilogue, and
    fc2's dgrad GEMM with the activation's backward and the quantisation of its result in its
    epilogue; TransformerEngine d0067d0d ops/fused/grouped_mlp.py, the CuTe DSL grouped-GEMM
    kernels of cuDNN's front end). With g = 2 for a GLU (fc1 writes 2F per row) and 1 for a
    unary activation, per row of F columns the unfused layer moves, beyond what both write:
    forward, the activation reads gF and writes F, and the quantiser reads that F again
    (g + 2); backward, fc2's dgrad writes F, the activation's backward reads it with fc1's
    output and writes gF, and the quantiser reads the gF again (2 + 2g). The fused kernels still
    read fc1's saved output in the backward epilogue (gF) and write every quantised tensor, so
    those stay: 3g + 4 elements, 10 for SwiGLU."""
    g = 2.0 if glu else 1.0
    return 3.0 * g + 4.0


def fused_mlp_saving(job: Job, lay: Layout, gpu: Gpu, t: float, load: float) -> float:
    """Seconds per micro-batch, forward + backward, that the fused grouped MLP saves one MoE
    layer (`fused_mlp_saved_elements` x 2 bytes per routed row and expert-FFN column at the
    achieved HBM bandwidth); 0 where it does not run (`Job.grouped_mlp_fused`). Taken off the
    layer's elementwise and quantisation time, a third in the forward as those."""
    if not job.grouped_mlp_fused:
        return 0.0
    arch = job.arch
    rows = routed_pairs(job, lay, t, load)
    saved = fused_mlp_saved_elements(arch.gated_linear_unit) * 2.0
    return saved * rows * arch.expert_ffn / gpu.hbm
