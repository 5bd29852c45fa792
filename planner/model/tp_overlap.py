"""Megatron-LM's TP communication overlap (`--tp-comm-overlap`): one decoder layer's TP traffic when
Transformer Engine's userbuffers overlap each sequence-parallel collective with the GEMM it feeds
or follows.

The mechanism (NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py,
`initialize_ub`, its default configuration; Megatron-LM passes no per-layer overrides unless a
recipe names a userbuffer config), per block (attention: QKV and output projection; MLP: fc1 and
fc2) of the layer:

    qkv_fprop, fc1_fprop   ring_exchange  the input all-gather under the column-parallel GEMM,
                                          split into tp chunks sent peer to peer on the copy
                                          engines (num_sm 1, no SM margin)
    proj_fprop, fc2_fprop  pipeline       the output reduce-scatter after the row-parallel GEMM,
                                          split into 4 chunks (num_splits 4), 16 SMs
    proj_dgrad, fc2_dgrad  ring_exchange  the output-gradient all-gather under the row-parallel
                                          dgrad GEMM, tp chunks
    qkv_dgrad, fc1_dgrad   bulk           the input re-gather for the weight gradient, run whole
                                          beside the column-parallel dgrad GEMM
    qkv_wgrad, fc1_wgrad   bulk           the input gradient's reduce-scatter, run whole beside the
                                          column-parallel wgrad GEMM

"Default buffer precision: AllGather buffers use fp8 when using fp8 recipe" (`fp8_buf` for the
all-gathers): under FP8 the gathers move 1 byte per element, the reduce-scatters 2.

A pipelined collective of c seconds in n chunks beside a GEMM of g seconds exposes what outlasts
the GEMM and one chunk nothing overlaps (the first chunk's GEMM before any transfer lands, or the
last chunk's transfer after the last GEMM): max(c - g, 0) + min(c, g) / n (`async_tp.hidden_share`,
the same decomposition as PyTorch's async TP). A bulk collective runs beside the whole GEMM and
exposes max(c - g, 0). A forward pass repeats per recomputed forward (n_fwd). An MoE block's
experts are not Transformer Engine linear layers with userbuffers: its TP collectives overlap
nothing (window 0), as in `async_tp`.

The hidden part still takes `comms.sm_share` of the SMs of the GEMMs it runs under
(`planner.model.layer_time` charges it): a bound for the ring exchanges, which use the copy engines.
"""

from __future__ import annotations

from planner.model import comms
from planner.model.async_tp import hidden_share

PIPELINE_SPLITS = 4
"""Chunks of the pipelined reduce-scatter after a row-parallel forward GEMM (Transformer Engine
`initialize_ub` default `num_splits` for the "pipeline" method)."""


def layer_traffic(
    cluster: comms.ClusterSpec,
    tp: int,
    act_bytes: float,
    n_fwd: int,
    columns: tuple[float, ...],
    rows: tuple[float, ...],
    fp8: bool,
) -> tuple[float, float]:
    """(exposed, hidden) seconds of one layer's TP traffic per micro-batch under userbuffers, S =
    `act_bytes` the layer's 16-bit input: per block (column-parallel forward GEMM seconds in
    `columns`, row-parallel in `rows`; a backward dgrad or wgrad GEMM takes as long as its
    forward) the five collectives of the module docstring."""
    grp = comms.place(cluster, 1, tp)
    rs = comms.reduce_scatter(act_bytes, grp)
    ag = comms.all_gather(act_bytes / 2, grp) if fp8 else rs
    exposed = total = 0.0
    for col, row in zip(columns, rows, strict=True):
        parts = (  # (seconds, GEMM window, chunks: 1 = bulk, times)
            (ag, col, tp, n_fwd),  # input all-gather, forward
            (rs, row, PIPELINE_SPLITS, n_fwd),  # output reduce-scatter, forward
            (ag, row, tp, 1),  # output-gradient all-gather under the row dgrad
            (ag, col, 1, 1),  # input re-gather beside the column dgrad (bulk)
            (rs, col, 1, 1),  # input-gradient reduce-scatter beside the column wgrad (bulk)
        )
        for seconds, window, chunks, times in parts:
            shown = (
                max(seconds - window, 0.0) if chunks == 1 else hidden_share(seconds, window, chunks)
            )
            exposed += times * shown
            total += times * seconds
    return exposed, total - exposed
