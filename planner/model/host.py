"""The host's floor under a layer's time: the GPU cannot run a layer faster than the CPU issues
its kernels.

PyTorch runs eagerly: every operation of a Megatron-Core / Transformer Engine layer is Python,
the dispatcher and a kernel launch on the host, queued ahead of the GPU. While a layer's
kernels take longer than their issue, the queue stays full and the host is hidden (the
production-size layers of every published run). Small layers (a model of a few hundred million
parameters, a short micro-batch, tp 8 on a small hidden size) drain the queue, and the layer
takes what its issue takes: the regime where Megatron's functional tests run, and the reason
CUDA graphs exist.

What a layer's forward costs the host (`issue_units`, `floor_s`) is the sum over its blocks, as
a multiple of HOST_LAYER_ISSUE_S, the forward of one dense transformer layer (attention + MLP,
half each) on the reference host (DGX H100's Xeon):
- an attention block, 1/2 (multi-latent attention adds MLA_ISSUE: its down- and up-projections,
  their norms, the split rotary part); context parallelism adds CP_STEP_ISSUE per ring step
  (cp steps: a partial attention, the send / receive of the next K/V chunk, the merge of the
  softmax statistics);
- a dense MLP block, 1/2;
- a mixture of experts, MOE_ISSUE (router, its softmax / top-k and auxiliary loss, the token
  dispatcher's permute, communication and unpermute, the grouped expert GEMMs, and the
  `tokens_per_expert` copy to the host that sizes them), plus MOE_TP_ISSUE where the attention
  is tensor-parallel (the gather / scatter between the TP and the expert group around it);
- a Mamba mixer, MAMBA_ISSUE (its fused scan kernels, the convolution, the gated norm); a gated
  delta net, GDN_ISSUE.
Megatron's --deterministic-mode (`Job.deterministic`) multiplies a layer's eager operations by
`planner.model.determinism.DETERMINISTIC_ISSUE` (PyTorch then fills every allocation).
FP8 and NVFP4 (`Job.precision`) add Transformer Engine's quantisation to each GEMM it runs in
those formats (amax, scale and cast of each input, forward and backward; taken for NVFP4 as for
FP8, its quantiser launching the same amax and cast kernels with the Hadamard transform fused into
them): FP8_ISSUE is a dense layer's FP8 issue over its bf16 one (fitted on FP8 runs), so each of
its DENSE_LAYER_GEMMS adds (FP8_ISSUE - 1) / DENSE_LAYER_GEMMS, and a block adds that per
quantised GEMM it runs (`fp8_gemms`). Not quantised: the router's GEMM (Megatron's TopKRouter
multiplies in its router dtype, moe_utils.RouterGatingLinearFunction), the token dispatcher and
the context-parallel ring steps. The backward issues
BACKWARD_ISSUE_RATIO times the forward's operations (autograd runs a data-gradient and a
weight-gradient kernel per GEMM); full recompute issues the forward once more in it.

Hosts differ (`GpuSpec.host_cpu`, the CPU of the catalog GPU's reference system): HOST_CPU_SLOWDOWN
is each one's time per operation against the reference. The step's own host work (the optimizer's
launches, the gradient-norm and loss all-reduces and their `.item()`, logging, the data loader's
hand-off, and the gradient statistics a run may log) is `cost.step_overhead_s`, on the reference
host, scaled the same way.

Fitted, not counted: benchmarks/fit_host.py fits every constant here marked "fitted" (and
cost.GRAD_STATS_S) on the step times of Megatron-LM's functional tests that may be used for
calibration (tiny models, where the host is most of the step) and prints the error on the cases
it held out. A cluster's logs refit the overall scale (`planner calibrate`, `layer_issue_s`).

CUDA graphs (`Job.cuda_graphs`, Megatron --cuda-graph-impl): the layer's kernels are captured
once and each micro-batch replays the layer's forward graph and its backward graph, one launch
each, so the Python, dispatch and launch of each kernel are gone. What stays is the GPU's own
work per graph node, GRAPH_KERNEL_S for each of the layer's kernels (its reference-host issue
time over KERNEL_ISSUE_S): a floor two orders of magnitude under the eager one, the same on
every host. With `Job.cuda_graph_modules` (Megatron --cuda-graph-modules) only the named regions
are captured (`issue_blocks`: attention, MLP, Mamba mixer, and a MoE block's router, dispatch
preprocessing and the rest); the other blocks are issued eagerly as above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.model import determinism, gemm_shapes
from planner.model.graph_capture import captured

if TYPE_CHECKING:
    from planner.inputs.hybrid import LayerKind
    from planner.inputs.layout import Layout
    from planner.inputs.plan import Job
    from planner.inputs.plan_types import CudaGraphModule
    from planner.model.gemm_shapes import GemmPart

HOST_LAYER_ISSUE_S = 1.22e-3
"""Fitted. Seconds the reference host takes to issue one dense transformer layer's forward
(attention and MLP blocks, half each; see the docstring)."""
MOE_ISSUE = 1.22
"""Fitted. A mixture-of-experts block's forward issue, in HOST_LAYER_ISSUE_S."""
MOE_TP_ISSUE = 0.196
"""Fitted. What a MoE block adds to that where the attention is tensor-parallel (tp > 1)."""
MLA_ISSUE = 1.71
"""Fitted. What multi-latent attention adds to an attention block, in HOST_LAYER_ISSUE_S."""
MOE_ROUTER_SHARE = 0.40
"""Counted, not fitted: the share of a MoE block's forward issue that its router takes
(Megatron-Core d98e8a64 MoELayer.route, TopKRouter: the gating GEMM, the score function,
group-limited top-k, the probabilities' normalisation, the auxiliary and z losses and the
expert-bias counts, about 15 of the block's ~38 forward kernels), what --cuda-graph-modules
moe_router captures. Shared experts, where a model has them, run inside that captured region
too and are not counted apart (such a model issues a little less eagerly than this says)."""
MOE_PREPROCESS_SHARE = 0.13
"""Counted, not fitted: the dispatch preprocessing's share (MoELayer.preprocess, the
dispatcher's dispatch_preprocess: tokens per expert and the permutation map, about 5 of the ~38),
what --cuda-graph-modules moe_preprocess captures. The rest (~18: permute, the all-to-alls, the
grouped GEMMs with their activation and FP8 casts, unpermute, combine) stays eager."""
MAMBA_ISSUE = 0.929
"""Fitted. A Mamba mixer's forward issue, in HOST_LAYER_ISSUE_S."""
GDN_ISSUE = MAMBA_ISSUE
"""Not fitted (no step time of a gated delta net may be used: Megatron-LM's GDN functional tests
have no golden values): a gated delta net's forward issue, taken as the Mamba mixer's, the other
chunked linear-time mixer. Counted from Megatron-Core's gated_delta_net (d98e8a64) and FLA's
kernels, its forward launches about 22 kernels (in_proj with its norm, the convolution and its
input copy, the L2 norm, the q / k repeat and the contiguous copies, the gates, the chunked rule's
cumsum, WY, state and output kernels, the gated norm, out_proj), as many as an attention block,
but as Python-heavy as the Mamba mixer: splits, reshapes and two compiled helper functions.
A check, not a fit: FLA's GB200 benchmark of the chunked rule alone (benchmarks/linear_kernels.py)
shows a per-call intercept of 0.60 ms forward (its ~9 Triton launches on GB200's Grace, 0.48 ms
on the reference host: 53 us a launch); the block's ~13 other kernels at KERNEL_ISSUE_S to that
rate bring it to 0.8-1.2 ms, about the 1.13 ms taken here."""
CP_STEP_ISSUE = 0.200
"""Fitted. What each context-parallel ring step adds to an attention block (cp > 1 with the p2p
ring: cp steps)."""
CP_EXCHANGE_KERNELS = {"a2a": 12, "all_gather": 6}
"""Counted, not fitted: the kernels the other exchanges (`Layout.cp_comm_type`) add to an
attention block's forward, whatever cp, each at KERNEL_ISSUE_S (TransformerEngine
context_parallel.py): a2a sends Q, K and V before the attention and its output after it, each a
reshape, an all-to-all and a reorder (flash_attn_a2a_communicate): 12; all_gather gathers K and V,
reorders each, and runs the attention in two chunks whose outputs it joins: 6."""
UNFUSED_ROPE_KERNELS = {"megatron": 34, "torchtitan": 12}
"""Counted, not fitted: the kernels one attention layer's rotary embedding launches forward and
backward together when it is not fused (`Job.fused_rope` false), per training code.
Megatron-LM d98e8a64 rope_utils.py `_apply_rotary_pos_emb_bshd` (--no-rope-fusion), per rotated
tensor (query, key): the frequencies' cos and sin, each scaled and cast (6), t * cos, the
rotate-half's negation and concatenation, * sin, the sum and the concatenation with the unrotated
part (6), 24 forward; backward the two products' gradients, the negation's, the halves' copy and
their sum, about 5 each: 34. torchtitan's eager `apply_rotary_emb`: the fp32 cast, the complex
multiply and the cast back per tensor, as many backward: 12. Charged as forward issue divided by
1 + BACKWARD_ISSUE_RATIO (the model's backward is that ratio of its forward), so the step carries
the count once."""
FP8_ISSUE = 1.37
"""Fitted. The issue of a dense FP8 layer over the same layer's in bf16 (its DENSE_LAYER_GEMMS
quantised GEMMs' share: `fp8_gemms`)."""
DENSE_LAYER_GEMMS = 4
"""The GEMMs of a dense layer's forward that Transformer Engine quantises: QKV and the output
projection, fc1 and fc2 (counted, not fitted)."""
HALF_LAYER = 0.5
"""An attention block's and a dense MLP block's forward issue, in HOST_LAYER_ISSUE_S (the two
make one dense layer, the unit; not fitted)."""
BACKWARD_ISSUE_RATIO = 2.0
"""The backward's issue time over the forward's (two GEMMs per forward GEMM; not fitted)."""

HOST_CPU_SLOWDOWN: dict[str, float] = {"xeon": 1.0, "epyc-zen2": 1.29, "grace": 1.25}
"""Fitted (the reference is 1 by definition). Host seconds per eager operation against DGX
H100's Intel Xeon Platinum 8480C ("xeon", the reference; DGX H200 / B200 hosts are Xeons of the
same or a later generation, taken as equal): DGX A100's AMD EPYC 7742 ("epyc-zen2"), GB200's
Grace (72 Arm Neoverse V2 cores, "grace"). Single-thread speed is what counts: Python, the
dispatcher and the launch run on one core per rank."""

KERNEL_ISSUE_S = 25e-6
"""Host seconds per eager kernel (Python, dispatcher, launch) on the reference host: a layer's
issue time over it is its kernel count (LAYER_KERNELS, `kernels`: 48.8 for a dense layer's forward
in bf16), which prices a CUDA graph and the floor of a layer's small kernels
(`layer_time.KERNEL_MIN_S`)."""
LAYER_KERNELS = HOST_LAYER_ISSUE_S / KERNEL_ISSUE_S
"""Kernels one dense layer's forward launches (48.8): the reference host's issue time over its
time per kernel, at the shipped constants and fixed when the module loads, so that calibrating a
cluster's host speed (`calibratable` layer_issue_s) leaves what the GPU runs as it is."""
GRAPH_KERNEL_S = 0.5e-6
"""GPU seconds per kernel node of a replayed CUDA graph beyond the kernel's own run: NVIDIA's
"Getting Started with CUDA Graphs" (A. Gray, developer.nvidia.com/blog/cuda-graphs, 2019) times
20 short kernels (2.9 us each) at 3.8 us per kernel launched back to back on a stream and 3.4 us
per kernel replayed as a graph: ~0.5 us per node."""


def slowdown(job: Job) -> float:
    """The job's host time per operation against the reference host (`HOST_CPU_SLOWDOWN`). With
    pools, the slowest pool's host: what a step waits for on every rank (its fixed time), in
    whichever order the pools run; a rank's own work reads its pool's job (`pools.rank_jobs`)."""
    if job.pools:
        return max(HOST_CPU_SLOWDOWN[p.cluster.gpu.host_cpu] for p in job.pools)
    return HOST_CPU_SLOWDOWN[job.cluster.gpu.host_cpu]


MLA_LAUNCHES = 0.2
"""Counted, not fitted: the kernels multi-latent attention adds to an attention block's launches,
in LAYER_KERNELS (~11): with rope fusion (Megatron-Core d98e8a64 multi_latent_attention.py
get_query_key_value_tensors) its down-projection GEMMs, the q and kv norms, the two
up-projection GEMMs and the two fused rope kernels, their splits and reshapes being views. Its
host issue (MLA_ISSUE, 1.55 units) is mostly Python on those views, not launches."""
REALTIME_TEST_OPS = 12
"""Counted, not fitted: what Megatron's --test-mode adds to a QK-layernorm attention's forward
per rank of its data- and tensor-parallel groups (Megatron-Core d98e8a64 attention.py
run_realtime_tests): the four QK-norm tensors gathered from every rank are each compared with the
local copy, an elementwise comparison, a reduction (torch.all) and the assert that reads the
result back to the host: 12 eager operations, at KERNEL_ISSUE_S each. Besides, per layer, the
stack of the four tensors and the two all-gathers (REALTIME_TEST_FIXED). Each assert waits for
the GPU to drain, so the GPU cannot run ahead under them: the time adds to the layer's forward
(`planner.model.host_floor.issued`), it is not a floor."""
REALTIME_TEST_FIXED = 3

MOE_ETP_LAUNCHES = 0.1
"""Counted, not fitted: the kernels a MoE block adds with expert tensor parallelism (etp > 1),
in LAYER_KERNELS (~6): the all-to-all dispatcher's all-gathers of the tokens and probabilities
over the expert-TP group, the sort of their chunks and the reduce-scatter after the experts
(token_dispatcher.py d98e8a64, whose tp_size is the expert-TP group's). None at etp 1, whatever
the attention's tp, where MOE_TP_ISSUE still charges the host its Python."""


def issue_blocks(
    job: Job, lay: Layout, kind: LayerKind, launches: bool = False
) -> list[tuple[CudaGraphModule, float]]:
    """One layer's forward issue in HOST_LAYER_ISSUE_S, block by block (see the docstring), each
    under the Megatron --cuda-graph-modules region that captures it: the attention block ("attn",
    also a gated delta net's), a Mamba mixer ("mamba"), a dense MLP ("mlp"), and a mixture of
    experts split into its router and shared experts ("moe_router", MOE_ROUTER_SHARE of
    MOE_ISSUE), the dispatch preprocessing ("moe_preprocess", MOE_PREPROCESS_SHARE) and the
    dispatch, experts and combine with the TP gather around them ("moe", which captures the whole
    block). With `launches`, the GPU's launches in the same units (`kernels`): MLA_LAUNCHES for
    MLA, and MOE_ETP_LAUNCHES where the experts are tensor-parallel in place of MOE_TP_ISSUE where
    the attention is."""
    mla = MLA_LAUNCHES if launches else MLA_ISSUE
    if launches:
        moe_tp = MOE_ETP_LAUNCHES if lay.expert_tp > 1 else 0.0
    else:
        moe_tp = MOE_TP_ISSUE if lay.tp > 1 else 0.0
    out: list[tuple[CudaGraphModule, float]] = []
    if kind.mixer == "attention":
        units = HALF_LAYER + (mla if job.arch.multi_latent_attention else 0.0)
        if not job.fused_rope and job.arch.position_embedding_type == "rope":
            rope = UNFUSED_ROPE_KERNELS[job.framework] / (1.0 + BACKWARD_ISSUE_RATIO)
            units += rope / LAYER_KERNELS
        if lay.cp > 1:
            if lay.cp_comm_type == "p2p":
                units += CP_STEP_ISSUE * lay.cp
            else:
                units += CP_EXCHANGE_KERNELS[lay.cp_comm_type] / LAYER_KERNELS
        out.append(("attn", units))
        if job.t5_encoder is not None:  # a T5 decoder layer's cross-attention block
            out.append(("attn", HALF_LAYER))
    elif kind.mixer == "mamba":
        out.append(("mamba", MAMBA_ISSUE))
    elif kind.mixer == "gdn":  # Megatron builds it as the layer's self_attention: "attn"
        out.append(("attn", GDN_ISSUE))
    if kind.ffn == "dense":
        out.append(("mlp", HALF_LAYER))
    elif kind.ffn == "moe":
        rest = 1.0 - MOE_ROUTER_SHARE - MOE_PREPROCESS_SHARE
        out += [
            ("moe_router", MOE_ROUTER_SHARE * MOE_ISSUE),
            ("moe_preprocess", MOE_PREPROCESS_SHARE * MOE_ISSUE),
            ("moe", rest * MOE_ISSUE + moe_tp),
        ]
    if not job.quantised:
        return out
    per_gemm = (FP8_ISSUE - 1.0) / DENSE_LAYER_GEMMS
    gemms = fp8_gemms(job, kind)
    return [(name, units + per_gemm * gemms.get(name, 0)) for name, units in out]


def realtime_test_s(job: Job, lay: Layout, kind: LayerKind) -> float:
    """Seconds --test-mode adds to a layer's forward on the job's host: REALTIME_TEST_OPS per
    rank of the data- and tensor-parallel groups and REALTIME_TEST_FIXED, for an attention with
    QK layernorm (MLA's has no such check); 0 otherwise."""
    arch = job.arch
    checked = arch.qk_layernorm and not arch.multi_latent_attention
    if not (job.test_mode and checked and kind.mixer == "attention"):
        return 0.0
    ops = REALTIME_TEST_OPS * (lay.dp + lay.tp) + REALTIME_TEST_FIXED
    return ops * KERNEL_ISSUE_S * slowdown(job)


FP8_GEMM_BLOCK: dict[GemmPart, CudaGraphModule] = {
    "attn": "attn",
    "mla_up": "attn",
    "mamba": "mamba",
    "gdn": "attn",
    "mlp": "mlp",
    "expert": "moe",
    "latent": "moe",
    "shared": "moe_router",
}
"""The block (`issue_blocks`) each of a layer's linear GEMMs (`gemm_shapes.linear_gemm_parts`)
runs in: a mixture of experts' grouped fc1 and fc2 and its latent projections under "moe", its
shared experts under "moe_router" (they run in that captured region)."""


def fp8_gemms(job: Job, kind: LayerKind) -> dict[CudaGraphModule, int]:
    """GEMMs per block of a layer's forward that Transformer Engine quantises under FP8 / NVFP4:
    its linear GEMMs (`gemm_shapes.linear_gemm_parts`: QKV and the output projection, MLA's five,
    a Mamba mixer's in- and out-projections, an MLP's fc1 and fc2, the experts' grouped fc1 and
    fc2, each one quantisation of every local expert's input in TE's GroupedLinear) by
    FP8_GEMM_BLOCK; none for the router's GEMM and the dispatch preprocessing."""
    out: dict[CudaGraphModule, int] = {}
    for part in gemm_shapes.linear_gemm_parts(job.arch, kind):
        block = FP8_GEMM_BLOCK[part]
        out[block] = out.get(block, 0) + 1
    return out


def issue_units(job: Job, lay: Layout, kind: LayerKind) -> float:
    """One layer's forward issue in HOST_LAYER_ISSUE_S (see the docstring), on any host."""
    return sum(units for _, units in issue_blocks(job, lay, kind))


def kernels(job: Job, lay: Layout, kind: LayerKind) -> float:
    """Kernels one layer's forward launches: its blocks counted as launches (`issue_blocks` with
    `launches`: MLA and the MoE block's TP share by what they launch, not their host Python) in
    LAYER_KERNELS per unit, times `determinism.issue_factor` (Megatron's deterministic mode
    fills each allocation with a kernel). Its backward launches BACKWARD_ISSUE_RATIO times as
    many."""
    units = sum(units for _, units in issue_blocks(job, lay, kind, launches=True))
    return units * LAYER_KERNELS * determinism.issue_factor(job)


def _graphed(name: CudaGraphModule, modules: frozenset[str]) -> bool:
    """Is the block captured (`graph_capture.captured`: the local implementation captures the
    preprocessing with the router)? Every block when the whole layer is (no modules named); the
    router's and the preprocessing's also under "moe", which captures the MoE block whole."""
    if not modules or name in modules:
        return True
    return name in ("moe_router", "moe_preprocess") and "moe" in modules


def floor_s(job: Job, lay: Layout, kind: LayerKind) -> float:
    """The forward's floor: the job's host issuing the eager blocks, plus (`Job.cuda_graphs`) the
    GPU stepping through the nodes of the captured ones (all of them, or those of
    `Job.cuda_graph_modules`); the eager issue times `determinism.issue_factor` (Megatron's
    deterministic mode)."""
    graphed = eager = 0.0
    regions = captured(job)
    for name, units in issue_blocks(job, lay, kind):
        if job.cuda_graphs and _graphed(name, regions):
            graphed += units
        else:
            eager += units
    eager *= determinism.issue_factor(job)  # the fills of --deterministic-mode
    return HOST_LAYER_ISSUE_S * (graphed / KERNEL_ISSUE_S * GRAPH_KERNEL_S + eager * slowdown(job))
