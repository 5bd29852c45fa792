"""torchtitan's asynchronous tensor parallelism: one decoder layer's TP traffic when each
collective is decomposed and pipelined with the matmul it feeds or follows.

The mechanism (PyTorch, torch/distributed/_symmetric_memory/__init__.py `fused_all_gather_matmul`
and `fused_matmul_reduce_scatter`, and the torch._inductor micro-pipeline TP pass that rewrites
a compiled graph's all-gather -> matmul and matmul -> reduce-scatter pairs into them; described in
"[Distributed w/ TorchTitan] Introducing Async Tensor Parallelism in PyTorch",
discuss.pytorch.org/t/209487): the all-gather of the sequence-parallel input is split into tp
shards sent peer to peer over symmetric memory while the matmul runs on the shards that have
arrived; the reduce-scatter after a row-parallel matmul sends each partial output shard as soon as
it is computed. Both passes are rewritten, so it applies to the forward and to the backward:

forward, per block (attention, MLP) and pass: the all-gather before the column-parallel linear
  under that linear's GEMM, the reduce-scatter after the row-parallel one under its GEMM;
backward, per block: the row-parallel linear's output-gradient all-gather under its dgrad GEMM,
  the column-parallel linear's input-gradient reduce-scatter under its dgrad GEMM (a dgrad takes
  as long as the forward GEMM). torchtitan saves the gathered input (no re-gather).

Each decomposed collective of c seconds under a GEMM of g seconds exposes what outlasts the GEMM
and one of its tp chunks that nothing overlaps (the local shard's matmul before the first
transfer lands, or the last partial output's send after the last matmul):
max(c - g, 0) + min(c, g) / tp. An MoE block's TP collectives (where it has any:
`planner.model.layer_tp.tp_blocks`) stay exposed (window 0). Without sequence parallelism torchtitan
does not run async TP (it needs the all-gather / reduce-scatter pair); the layer then times as
`layer_tp.tensor_parallel_layer`. The hidden part still holds `comms.sm_share` of the SMs
(`planner.model.layer_time` charges it) as for NCCL's overlapped collectives: a bound where the
peer-to-peer copies run on the copy engines instead of SMs.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import comms, gemm_shapes


def hidden_share(c: float, g: float, tp: int) -> float:
    """Exposed seconds of a collective of `c` seconds decomposed into tp chunks and pipelined
    with a GEMM of `g` seconds: what outlasts the GEMM plus one chunk that nothing overlaps."""
    return max(c - g, 0.0) + min(c, g) / tp


def row_parallel_windows(
    arch: ModelArch, times: Sequence[float], moe: bool | LayerKind
) -> tuple[float, ...]:
    """Seconds of each block's row-parallel forward GEMM (the attention's output projection, a
    Mamba mixer's out_proj, fc2; `gemm_shapes.gemm_blocks`), for a layer of a kind (or a transformer
    layer's MoE flag); 0 for an MoE block."""
    return tuple(
        0.0 if block == "moe" else times[idx[-1]]
        for block, idx in gemm_shapes.gemm_blocks(arch, moe)
    )


def applies(job: Job, lay: Layout) -> bool:
    """Whether the layer's TP collectives run asynchronously: torchtitan with async_tp (the
    rules require compile) and sequence parallelism at tp > 1."""
    return (
        job.framework == "torchtitan"
        and job.titan.async_tp
        and lay.tp > 1
        and lay.sequence_parallel
    )


def layer_traffic(
    cluster: comms.ClusterSpec,
    tp: int,
    act_bytes: float,
    n_fwd: int,
    columns: tuple[float, ...],
    rows: tuple[float, ...],
) -> tuple[float, float]:
    """(exposed, hidden) seconds of one layer's TP traffic per micro-batch under async TP, S =
    `act_bytes` the layer input: per block one all-gather and one reduce-scatter of S per forward
    pass (n_fwd) and per backward, each under the block's column- (`columns`) or row-parallel
    (`rows`) GEMM as the module docstring pairs them."""
    half = comms.reduce_scatter(act_bytes, comms.place(cluster, 1, tp), nccl=False)
    exposed = total = 0.0
    for col, row in zip(columns, rows, strict=True):
        pairs = [(col, n_fwd), (row, n_fwd), (row, 1), (col, 1)]  # AG, RS fwd; AG, RS bwd
        for window, times in pairs:
            exposed += times * hidden_share(half, window, tp)
            total += times * half
    return exposed, total - exposed
