"""A decoder layer's context-parallel and expert-parallel traffic per micro-batch, on what
`planner.model.layer_time` computes of the layer before it (`LayerCore`: its GEMMs, tokens,
routing load, attention times): the CP exchange (`cp_time.context_parallel`, torchtitan's
`titan_cp.context_parallel`, or a linear mixer's
all-to-alls, one per tensor each way) and the token dispatch (`dispatch.layer_dispatch`), each
remembered on the core per number of forward passes (the only way the layer's recompute reaches
them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, cp_time, dispatch, fp32, mixers, titan_cp


@dataclass(frozen=True)
class LayerCore:
    """What one layer's time computes before its recompute and its TP, CP and EP traffic
    (`layer_time`'s core): the linear GEMMs, tokens and routing load, the forward GEMM seconds
    (with the router), the core attention's forward and backward, the streamed (HBM-bound)
    work, the token permutations, and the layer's forward, backward and offload seconds."""

    shapes: tuple[tuple[float, float, float, float], ...]
    """The linear GEMMs' (M, K, N, count), parts, forward seconds and quantisation seconds
    (`linear_time.linear_times`, as tuples)."""
    parts: tuple[str, ...]
    times: tuple[float, ...]
    casts: tuple[float, ...]
    weight_cast: float
    t: float
    load: float
    gemm_fwd: float
    attn_fwd: float
    attn_bwd: float
    streamed: float
    perm: float
    fwd: float
    bwd: float
    offload: float
    grads: int
    traffic: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    """The layer's CP and EP traffic (`traffic`) per ("cp" or "ep", forward passes), once
    asked: both read the layout only where the core does (not its recompute nor its TP
    overlap), and the recompute only through the passes."""


def traffic(
    job: Job, lay: Layout, kind: LayerKind, c: LayerCore, what: str, n: int
) -> tuple[float, float]:
    """The layer's CP traffic ("cp": a linear-time mixer's sequence <-> head all-to-alls, or the
    attention's exchange, `cp_time.context_parallel`; seconds and hidden seconds) or its expert
    dispatch ("ep": `dispatch.layer_dispatch`, seconds and those under the shared experts) with
    n forward passes, remembered on the core (`LayerCore.traffic`)."""
    hit = c.traffic.get((what, n))
    if hit is not None:
        return hit
    arch, tp, t = job.arch, lay.tp, c.t
    if what == "ep":
        shared = [x for x, p in zip(c.times, c.parts, strict=True) if p == "shared"]
        got = dispatch.layer_dispatch(job, lay, t, c.load, n, shared, c.grads)
    elif (linear := mixers.of(kind)) is not None:  # the mixer's sequence <-> head all-to-alls
        grp = comms.place(job.cluster, tp, lay.cp)
        word = fp32.value_bytes(job) / 2.0  # the mixers count 16-bit values; fp32 moves 4 bytes
        # one all-to-all per tensor, each paying its latency (Mamba: six a pass); the backward
        # runs each one's gradient through the same all-to-all
        parts = linear.context_parallel_a2as(arch, t, tp, lay.cp)
        one = sum(comms.all_to_all(word * b, grp) for b in parts)
        got = ((n + 1) * one, 0.0)
    elif job.framework == "torchtitan":  # PyTorch's all-gathered K/V
        got = titan_cp.context_parallel(job.cluster, lay, arch, t, (c.attn_fwd, c.attn_bwd), n)
    else:
        got = cp_time.context_parallel(job.cluster, lay, arch, t, (c.attn_fwd, c.attn_bwd), n)
    c.traffic[what, n] = got
    return got
