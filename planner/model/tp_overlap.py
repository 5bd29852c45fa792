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

What the overlap costs the GEMMs (`held_seconds`). The same default configuration gives the
pipelined and bulk methods num_sm 16 with set_sm_margin = not ring_exchange, and Transformer
Engine then launches the overlapped GEMM on the rest of the SMs (comm_gemm_overlap.cpp:
`_math_sms = multiProcessorCount - _comm_sms - NVTE_EXT_MARGIN_SM`) for the whole GEMM, however
short the transfer: the forward row-parallel GEMM and the column-parallel dgrad and wgrad run
UB_COMM_SMS / (SMs - UB_COMM_SMS) longer (16 of 132 on H100: +13.8%). The ring exchanges move
their chunks on the copy engines (use_ce, num_sm 1, no margin): their GEMMs keep every SM. This
replaces, for this path, the `comms.sm_share` of the hidden seconds charged to collectives that
NCCL runs beside a GEMM (`planner.model.layer_time`). So the overlap can cost more than it hides
where the GEMMs are long and the transfers short (a wide layer at tp 2); the search tries each
rung without it too (`planner.search.variants`).
"""

from __future__ import annotations

from planner.model import comms
from planner.model.async_tp import hidden_share

UB_COMM_SMS = 16
"""SMs a pipelined or bulk userbuffers overlap holds from its GEMM for the GEMM's whole length
(Transformer Engine `initialize_ub` default: num_sm 16, set_sm_margin for every method but
ring_exchange; transformer_engine/pytorch/module/base.py @d0067d0d)."""

PIPELINE_SPLITS = 4
"""Chunks of the pipelined reduce-scatter after a row-parallel forward GEMM (Transformer Engine
`initialize_ub` default `num_splits` for the "pipeline" method)."""


def margin_share(cluster: comms.ClusterSpec) -> float:
    """How much longer a GEMM runs beside a pipelined or bulk overlap: UB_COMM_SMS / (SMs -
    UB_COMM_SMS), the GEMM on the SMs the overlap leaves it."""
    return UB_COMM_SMS / (comms.gpu_sms(cluster) - UB_COMM_SMS)


def floor_share(cluster: comms.ClusterSpec, tp: int) -> float:
    """A share of a layer's TP traffic (every collective's seconds) that its charge never goes
    under, with the overlap or without: a ring exchange shows at least one of its tp chunks, a
    pipelined reduce-scatter one of its PIPELINE_SPLITS or, hidden, margin_share of a GEMM at
    least as long, a bulk collective the same margin of its GEMM or its excess (each part's
    `layer_traffic` charge is at least its seconds times the least of these); without the
    overlap `comms.sm_share` of what hides (`planner.search.bound` bounds with it)."""
    share = comms.sm_share(cluster)
    return min(share, margin_share(cluster), 1.0 / tp, 1.0 / PIPELINE_SPLITS)


def layer_traffic(
    cluster: comms.ClusterSpec,
    tp: int,
    act_bytes: float,
    n_fwd: int,
    columns: tuple[float, ...],
    rows: tuple[float, ...],
    fp8: bool,
) -> tuple[float, float, float]:
    """(exposed, hidden, held) seconds of one layer's TP traffic per micro-batch under
    userbuffers, S = `act_bytes` the layer's 16-bit input: per block (column-parallel forward
    GEMM seconds in `columns`, row-parallel in `rows`; a backward dgrad or wgrad GEMM takes as
    long as its forward) the five collectives of the module docstring; `held`, the seconds the
    pipelined and bulk overlaps add to their GEMMs (`margin_share` of each: the forward row GEMM
    per forward pass, the column dgrad and wgrad)."""
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
    windows = zip(columns, rows, strict=True)
    held = margin_share(cluster) * sum(n_fwd * row + 2 * col for col, row in windows)
    return exposed, total - exposed, held
