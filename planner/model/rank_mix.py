"""A pipeline rank's layers per micro-batch over a layout's layer times (`stage_time.LayoutTimes`):
how many of each kind it runs and its output layers (`rank_layers`), each with the time it runs
at (`rank_mix`: recomputed or plain, bf16 or quantised, MTP layers as they run), and their sums
(`mix_sums`), for `planner.model.cost` and `planner.model.rank_sync`."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import block_ranges
from planner.model.bf16_layers import bf16_ranges
from planner.model.layer_kept import sub_counts
from planner.model.layer_time import Layer
from planner.model.schedule import Chunks
from planner.model.stage_time import LayoutTimes


def rank_layers(
    job: Job, lay: Layout, rank: int, chunks: Chunks, t: LayoutTimes
) -> tuple[tuple[int, ...], int]:
    """(layers of each kind, output layers) a rank runs per micro-batch: its decoder layers,
    plus on the MTP rank each MTP depth's layers (one decoder layer of the last layer's kind, or
    a hybrid stack's MTP pattern), and on the rank of the last stage (`Layout.output_rank`: rank
    0 in torchtitan's V) the output layer and loss, once more per MTP depth: Megatron computes
    every depth's logits there (Megatron-LM d98e8a64 gpt_model.py:728-746, process_mtp_loss in
    multi_token_prediction.py:1010-1030), also where the MTP layers sit on an earlier stage
    (pipeline_parallel_layer_layout.py:138-151 `mtp_standalone`)."""
    arch = job.arch
    counts = arch.kind_counts(chunks)
    heads = (1 + arch.mtp_num_layers) * int(rank == lay.output_rank)
    if rank == t.mtp_rank:
        counts = tuple(a + b for a, b in zip(counts, arch.mtp_counts(), strict=True))
    return counts, heads


def rank_mix(
    job: Job, lay: Layout, rank: int, chunks: Chunks, t: LayoutTimes
) -> tuple[list[tuple[Layer, int]], int]:
    """The (layer time, count) pairs a rank runs per micro-batch, and its output layers: each
    kind's layers with the layout's recompute, except with block full recompute, where only the
    first recompute_num_layers layers of each chunk are recomputed and the rest run plain; the
    job's bf16 layers (`bf16_layers`) as its bf16 twin runs them; on the MTP rank each MTP
    depth's projection (`LayoutTimes.mtp_proj`)."""
    mix, heads = _layer_mix(job, lay, rank, chunks, t)
    if rank == t.mtp_rank and t.mtp_proj is not None:
        mix.append((t.mtp_proj, job.arch.mtp_num_layers))
    return mix, heads


def _layer_mix(
    job: Job, lay: Layout, rank: int, chunks: Chunks, t: LayoutTimes
) -> tuple[list[tuple[Layer, int]], int]:
    """`rank_mix`'s decoder (and MTP) layers; MTP layers that run otherwise than the decoder's
    (`LayoutTimes.mtp_layers`) as they run."""
    counts, heads = rank_layers(job, lay, rank, chunks, t)
    if rank == t.mtp_rank and t.mtp_layers:
        mtp = job.arch.mtp_counts()
        mix, heads = _layer_mix_of(job, lay, chunks, t, sub_counts(counts, mtp), heads)
        block = lay.recompute == "full" and lay.recompute_method == "block"
        return mix + list(zip(t.mtp_plain if block else t.mtp_layers, mtp, strict=True)), heads
    return _layer_mix_of(job, lay, chunks, t, counts, heads)


def _layer_mix_of(
    job: Job, lay: Layout, chunks: Chunks, t: LayoutTimes, counts: tuple[int, ...], heads: int
) -> tuple[list[tuple[Layer, int]], int]:
    """`_layer_mix` of a rank's layers of each kind `counts`."""
    block = lay.recompute == "full" and lay.recompute_method == "block"
    low = bf16_ranges(job, chunks)
    if not block and not low:
        return list(zip(t.layers, counts, strict=True)), heads
    arch = job.arch
    # the layers run with the layout's recompute: all (and the MTP layers), or under block
    # recompute the first k of each chunk (torchtitan's every N-th of the rank); the rest plain
    ran = block_ranges(lay, chunks) if block else chunks
    as_set = arch.kind_counts(ran) if block else counts
    set_bf16 = arch.kind_counts(bf16_ranges(job, ran))
    plain_bf16 = sub_counts(arch.kind_counts(low), set_bf16)
    mix = list(zip(t.layers, sub_counts(as_set, set_bf16), strict=True))
    if block:
        plain = sub_counts(sub_counts(counts, as_set), plain_bf16)
        mix += list(zip(t.plain, plain, strict=True))
    if low:
        mix += list(zip(t.bf16, set_bf16, strict=True))
        mix += list(zip(t.bf16_plain, plain_bf16, strict=True)) if block else []
    return mix, heads


def mix_sums(
    mix: list[tuple[Layer, int]],
) -> tuple[float, float, float, float, float, float, float, float, float, float]:
    """A rank's seconds per micro-batch over its mix (`rank_mix`), before its output layers:
    (compute, forward, backward with recompute, recompute, TP, TP hidden, CP, CP hidden, expert
    all-to-all, the part of it under the shared experts), each `Layer` field times its count."""
    c = fwd = bwd = rec = tp = tp_h = cp = cp_h = ep = ep_s = 0.0
    for k, n in mix:
        c += n * (k.fwd + k.bwd)
        fwd += n * k.fwd
        bwd += n * (k.bwd + k.recompute)
        rec += n * k.recompute
        tp += n * k.tp
        tp_h += n * k.tp_hidden
        cp += n * k.cp
        cp_h += n * k.cp_hidden
        ep += n * k.ep
        ep_s += n * k.ep_shared
    return c, fwd, bwd, rec, tp, tp_h, cp, cp_h, ep, ep_s
