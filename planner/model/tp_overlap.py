"""Megatron-LM's TP communication overlap (`--tp-comm-overlap`): one decoder layer's TP traffic when
Transformer Engine's userbuffers overlap each sequence-parallel collective with the GEMM it feeds
or follows, as the job's userbuffers configuration sets each GEMM's slot
(`planner.inputs.userbuffers`: Transformer Engine's defaults unless a run gives its own).

Per block (attention: QKV and output projection; MLP: fc1 and fc2) of the layer, five
collectives, each beside one GEMM (the defaults' methods in brackets):

    qkv_fprop, fc1_fprop   the input all-gather under the column-parallel GEMM [ring_exchange]
    proj_fprop, fc2_fprop  the output reduce-scatter after the row-parallel GEMM [pipeline]
    proj_dgrad, fc2_dgrad  the output-gradient all-gather under the row-parallel dgrad GEMM
                           [ring_exchange]
    qkv_dgrad, fc1_dgrad   the input re-gather for the weight gradient, beside the column-parallel
                           dgrad GEMM [bulk]
    qkv_wgrad, fc1_wgrad   the input gradient's reduce-scatter, beside the column-parallel wgrad
                           GEMM [bulk]

"Default buffer precision: AllGather buffers use fp8 when using fp8 recipe" (`fp8_buf` for the
all-gathers): under FP8 the gathers move 1 byte per element, the reduce-scatters 2.

What shows. A collective of c seconds cut into n chunks (a ring exchange: tp, a pipeline: its
num_splits) beside a GEMM of g seconds exposes what outlasts the GEMM and one chunk nothing
overlaps (the first chunk's GEMM before any transfer lands, or the last chunk's transfer after the
last GEMM): max(c - g, 0) + min(c, g) / n (`async_tp.hidden_share`, the same decomposition as
PyTorch's async TP). A bulk collective runs whole beside the GEMM and exposes max(c - g, 0). A
forward pass repeats per recomputed forward (n_fwd). An MoE block's experts are not Transformer
Engine linear layers with userbuffers: its TP collectives overlap nothing (window 0).

What it holds (`layer_traffic`'s held seconds), by the slot's num_sm k of the GPU's S SMs. With
set_sm_margin Transformer Engine launches the GEMM on the SMs the communication leaves it
(comm_gemm_overlap.cpp: `_math_sms = multiProcessorCount - _comm_sms - NVTE_EXT_MARGIN_SM`) for
the GEMM's whole length, however short the transfer: it runs k / (S - k) longer (the defaults'
16 of H100's 132 on pipelined and bulk overlaps: +13.8%). Without the margin the communication
kernel's k SMs are taken from the GEMM only while it runs: k / S of min(c, g). A ring exchange
moves its chunks on the copy engines (num_sm 1). This replaces, on this path, `comms.sm_share` of
the hidden seconds that layer_time charges to collectives NCCL runs beside a GEMM. So the overlap
can cost more than it hides where the GEMMs are long and the transfers short (a wide layer at tp
2 under the defaults); the search tries each rung without it too (`planner.search.variants`).
"""

from __future__ import annotations

from collections.abc import Mapping

from planner.inputs.userbuffers import UbSlot
from planner.model import comms, sm_count
from planner.model.async_tp import hidden_share

BLOCK_SLOTS: tuple[tuple[str, str], ...] = (("qkv", "proj"), ("fc1", "fc2"))
"""The (column, row) GEMM names of a layer's first block (attention, or a Mamba mixer) and of the
others (its MLP)."""


def block_slots(block: int) -> tuple[str, str, str, str, str]:
    """A block's five slots in `layer_traffic`'s order: the column GEMM's fprop, the row's
    fprop and dgrad, the column's dgrad and wgrad."""
    col, row = BLOCK_SLOTS[min(block, 1)]
    return f"{col}_fprop", f"{row}_fprop", f"{row}_dgrad", f"{col}_dgrad", f"{col}_wgrad"


def held_share(slot: UbSlot, sms: int, seconds: float, window: float) -> float:
    """Seconds a slot's overlap takes from its GEMM of `window` seconds beside a transfer of
    `seconds` (module docstring): k / (S - k) of the GEMM with the SM margin, else k / S of
    the time both run."""
    k = min(slot.num_sm, sms - 1)
    if slot.set_sm_margin:
        return k / (sms - k) * window
    return k / sms * min(seconds, window)


def floor_share(
    cluster: comms.ClusterSpec, tp: int, slots: Mapping[str, UbSlot], margin: int = 0
) -> float:
    """A share of a layer's TP traffic (every collective's seconds) that its charge never goes
    under, with the overlap or without: a chunked collective shows at least one of its chunks; a
    bulk one, hidden, holds k / S of a GEMM at least as long, or shows its excess (each part's
    `layer_traffic` charge is at least its seconds times the least of these); without the
    overlap `comms.sm_share` of what hides, less the GEMMs' `margin` (`planner.search.bound`
    bounds with it)."""
    sms = sm_count.gpu_sms(cluster)
    shares = [comms.sm_share(cluster, margin)]
    for name in block_slots(0) + block_slots(1):
        slot = slots[name]
        n = slot.chunks(tp)
        shares.append(1.0 / n if n > 1 else min(slot.num_sm, sms - 1) / sms)
    return min(shares)


def layer_traffic(
    cluster: comms.ClusterSpec,
    tp: int,
    act_bytes: float,
    n_fwd: int,
    windows: tuple[tuple[float, ...], tuple[float, ...]],
    fp8: bool,
    slots: Mapping[str, UbSlot],
) -> tuple[float, float, float]:
    """(exposed, hidden, held) seconds of one layer's TP traffic per micro-batch under
    userbuffers, S = `act_bytes` the layer's 16-bit input: per block (`windows`: its
    column-parallel forward GEMM seconds, then its row-parallel ones; a backward dgrad or wgrad
    GEMM takes as long as its forward) the five collectives of the module docstring, each as its
    slot sets it; `held`, what they take from their GEMMs' SMs."""
    grp = comms.place(cluster, 1, tp)
    sms = sm_count.gpu_sms(cluster)
    rs = comms.reduce_scatter(act_bytes, grp, nccl=False)  # userbuffers' own exchange
    ag = comms.all_gather(act_bytes / 2, grp, nccl=False) if fp8 else rs
    exposed = total = held = 0.0
    for i, (col, row) in enumerate(zip(*windows, strict=True)):
        col_f, row_f, row_d, col_d, col_w = block_slots(i)
        parts = (  # (slot, seconds, GEMM window, times)
            (col_f, ag, col, n_fwd),  # input all-gather, forward
            (row_f, rs, row, n_fwd),  # output reduce-scatter, forward
            (row_d, ag, row, 1),  # output-gradient all-gather under the row dgrad
            (col_d, ag, col, 1),  # input re-gather beside the column dgrad
            (col_w, rs, col, 1),  # input-gradient reduce-scatter beside the column wgrad
        )
        for name, seconds, window, times in parts:
            slot = slots[name]
            n = slot.chunks(tp)
            shown = hidden_share(seconds, window, n) if n > 1 else max(seconds - window, 0.0)
            exposed += times * shown
            total += times * seconds
            held += times * held_share(slot, sms, seconds, window)
    return exposed, total - exposed, held
