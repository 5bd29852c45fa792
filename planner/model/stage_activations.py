"""Activation bytes a pipeline rank holds at its peak: the micro-batches in flight through its
model chunks in Megatron-LM's schedule, what each chunk keeps per micro-batch under the recompute
policy (full, selective modules, CPU offloading), and the working set one operation adds on top
(the loss, a recomputed layer, the MoE dispatcher's tokens, the CP exchange's buffers:
`cp_time.exchange_bytes`).

In flight: `planner.model.in_flight` (the micro-batches each schedule holds, per chunk).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from operator import itemgetter

from planner.inputs.arch import ModelArch
from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import last_wrapped, wrapped
from planner.model import activations as act
from planner.model import cp_time, cpu_offload, dsa, t5, vision
from planner.model.bf16_layers import bf16_ranges
from planner.model.early_receives import transient
from planner.model.fine_offload import offloaded_bytes, offloading_totals, window_bytes
from planner.model.fp32 import pipeline_message_bytes
from planner.model.in_flight import group_size, schedule_peak
from planner.model.job_memo import JobMemo, ModelMemo
from planner.model.layout_shard import SHARD_UNREAD, make_shard
from planner.model.loss_activations import (
    GATHERED_HELD_BYTES_PER_LOGIT,
    deferred_wgrad_bytes,
    logits_bytes,
)
from planner.model.mixer_working import mixer_working
from planner.model.moe_working import moe_working
from planner.model.mtp_activations import mtp_kept, mtp_loss_kept
from planner.model.mtp_precision import mtp_quantised
from planner.model.per_op_saved import all_to_all_bytes
from planner.model.schedule import Chunks, layer_count, schedule_name
from planner.model.selective_working import rebuilt_bytes
from planner.model.shard import Shard
from planner.model.torch_schedules import microbatch_group

_SHARDS: JobMemo[tuple[object, ...], Shard] = JobMemo()
_READ = itemgetter(*(f.name for f in fields(Layout) if f.name not in SHARD_UNREAD))


def shard(job: Job, layout: Layout) -> Shard:
    """How a layout splits one layer's activations (`planner.model.shard.Shard`), remembered per
    job and the layout fields `make_shard` reads (`_READ`: all but `SHARD_UNREAD`): a search
    asks it of each layout's memory, host memory and offload time."""
    memo, key = _SHARDS.of(job), _READ(layout.__dict__)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = make_shard(job, layout)
    return hit


@dataclass(frozen=True)
class PerLayer:
    """Activation bytes of one layer for one micro-batch, per kind of layer the model has
    (`ModelArch.kinds`, in order), for one layout."""

    kept: tuple[float, ...]
    """What a layer of each kind keeps under the layout's recompute policy."""
    full: tuple[float, ...]
    """Without full recompute: the working set while one layer is recomputed."""
    whole: tuple[float, ...]
    """What a layer that full recompute leaves whole keeps (block recompute's layers after a
    chunk's first N): `full` less what fine-grained offloading moves to the host from a layer
    run without recompute (`fine_offload.offloading_layers`); `kept` without full recompute."""

    @property
    def dense(self) -> float:
        """A layer's kept bytes under full recompute (its input, the same for every kind), or a
        transformer's dense layer's."""
        return self.kept[0]

    def total(self, counts: tuple[int, ...]) -> float:
        """Kept bytes of `counts[j]` layers of each kind j."""
        return sum(n * b for n, b in zip(counts, self.kept, strict=True))

    def whole_total(self, counts: tuple[int, ...]) -> float:
        """Kept bytes of `counts[j]` layers of each kind j that full recompute leaves whole."""
        return sum(n * b for n, b in zip(counts, self.whole, strict=True))


_PER_LAYER: ModelMemo[Shard, PerLayer] = ModelMemo()


def per_layer(arch: ModelArch, sh: Shard) -> PerLayer:
    """Each kind's activations under `sh`, kept (what fine-grained offloading leaves on the GPU)
    and whole; remembered per model (by identity: an lru_cache hashed the whole model) and
    shard."""
    return _PER_LAYER.get(arch, sh, lambda: _per_layer(arch, sh))


def _per_layer(arch: ModelArch, sh: Shard) -> PerLayer:
    # fine-grained offloading: the listed modules' saved inputs wait in host memory, those of
    # the first offload_fraction of the layers (the others keep theirs: on average that share);
    # under full recompute only in the layers it leaves whole (`PerLayer.whole`)
    f = sh.offload_fraction
    kept = tuple(
        act.layer_bytes(arch, k, sh) - f * offloaded_bytes(arch, k, sh, sh.offload)
        for k in arch.kinds
    )
    full = tuple(act.layer_bytes(arch, k, sh, recompute=False) for k in arch.kinds)
    whole = tuple(
        b - f * offloaded_bytes(arch, k, sh, sh.offload, recompute=False)
        for k, b in zip(arch.kinds, full, strict=True)
    )
    return PerLayer(kept, full, whole)


def _with_a2a(arch: ModelArch, per: PerLayer, sh: Shard, ep: int) -> PerLayer:
    """`per` with what torchtitan's per-op policy saves of the EP all-to-alls added to each
    kind's kept bytes (`per_op_saved.all_to_all_bytes`)."""
    extra = tuple(all_to_all_bytes(arch, k, sh, ep) for k in arch.kinds)
    return replace(per, kept=tuple(b + e for b, e in zip(per.kept, extra, strict=True)))


def sub_counts(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Layer counts of each kind, a less b."""
    return tuple(x - y for x, y in zip(a, b, strict=True))


def recompute_working(arch: ModelArch, layout: Layout, per: PerLayer, chunks: Chunks) -> float:
    """Bytes a micro-batch's backward holds beyond what it kept (`chunk_kept`) while layers are
    recomputed: the backward runs from the last layer to the first, freeing each layer's
    activations as it passes, and rebuilds a recomputed layer (or, with uniform full recompute,
    a group of recompute_num_layers) whole before its backward. Per-op recompute and uniform
    full recompute: one layer or group, whole, on top of the inputs kept (the largest kind the
    chunks hold). Block full recompute (the first N layers of a chunk recomputed): by then the
    chunk's later layers are freed, so only a chunk whose every layer is recomputed needs more
    than it kept."""
    counts = arch.kind_counts(chunks)
    full = max((b for b, n in zip(per.full, counts, strict=True) if n), default=0.0)
    if layout.recompute != "full":
        return full
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return min(k, max(len(c) for c in chunks)) * full
    if layout.recompute_every:  # torchtitan's every N-th layer: where a chunk's last is one
        return full if last_wrapped(chunks, layout.recompute_every) else 0.0
    return full if any(0 < len(c) <= k for c in chunks) else 0.0


def chunk_kept(
    arch: ModelArch, layout: Layout, per: PerLayer, chunk: range, ran: Chunks | None = None
) -> float:
    """Activation bytes one micro-batch leaves in a chunk of layers until its backward.

    Full recompute, uniform with N = recompute_num_layers: the chunk's layers are checkpointed
    in groups of N, each group keeping its input only (ceil(n / N) layer inputs). Full
    recompute, block N: the first N layers of the chunk keep their inputs (fine-grained
    offloading moves none of them: `fine_offload`), the rest what a layer without recompute
    keeps, offloading included (`PerLayer.whole`; Megatron counts N per model chunk, i.e. per
    virtual stage). CPU offloading (pp = 1, no recompute; Megatron --cpu-offloading-num-layers
    N): Transformer Engine keeps at most n - N layers' activations on the GPU, any n - N
    consecutive ones (`cpu_offload.peak_window`).
    Otherwise each layer keeps what its recompute policy leaves (`PerLayer`)."""
    n, counts = len(chunk), arch.kind_counts((chunk,))
    if layout.recompute != "full":
        if layout.cpu_offloading_num_layers:

            def window(start: int, length: int) -> float:
                a = chunk.start + start
                return per.total(arch.kind_counts((range(a, a + length),)))

            return cpu_offload.peak_window(n, layout.cpu_offloading_num_layers, window)
        return per.total(counts)
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return math.ceil(n / k) * per.dense  # a layer input: the same for every kind
    if ran is None:  # the chunk's recomputed layers: Megatron's first k
        ran = (range(chunk.start, chunk.start + min(k, n)),)
    rest = sub_counts(counts, arch.kind_counts(ran))
    return sum(map(len, ran)) * per.dense + per.whole_total(rest)


def blended(
    arch: ModelArch, plain: PerLayer, quantised: PerLayer, pieces: Chunks, chunk: range
) -> PerLayer:
    """A chunk's layer bytes where `pieces` of it run unquantised (bf16 first / last layers,
    `bf16_layers.bf16_ranges`: their linear layers keep their inputs in the parameters' dtype,
    `plain`) and the rest quantised (`quantised`): each kind's bytes at the share of its layers
    in the chunk that are unquantised, so the chunk's total is exact (the recompute working sets
    take `plain`, the larger)."""
    counts = arch.kind_counts((chunk,))
    inside = arch.kind_counts(tuple(p for p in pieces if chunk.start <= p.start < chunk.stop))

    def mix(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
        shares = (k / n if n else 0.0 for k, n in zip(inside, counts, strict=True))
        return tuple(q + s * (w - q) for w, q, s in zip(a, b, shares, strict=True))

    return PerLayer(
        mix(plain.kept, quantised.kept),
        mix(plain.full, quantised.full),
        mix(plain.whole, quantised.whole),
    )


_KEPT: ModelMemo[tuple[object, ...], tuple[float, ...]] = ModelMemo()
"""`chunk_kept` of each chunk of a rank, per model and per what it reads besides the model: the
layer bytes (`PerLayer`), the chunks and the recompute and offloading settings (the search
estimates the memory of each ZeRO stage and TP-overlap choice of a base with the same ones)."""


def _chunks_kept(
    arch: ModelArch, layout: Layout, pers: tuple[PerLayer, ...], chunks: Chunks
) -> tuple[float, ...]:
    lay = layout
    key = (
        pers,
        chunks,
        lay.recompute,
        lay.recompute_method,
        lay.recompute_num_layers,
        lay.recompute_every,
        lay.cpu_offloading_num_layers,
    )
    if lay.recompute == "full" and lay.recompute_every:  # torchtitan's every N-th of the rank
        ws = wrapped(chunks, lay.recompute_every)
        ran = [tuple(range(i, i + 1) for i in w) for w in ws]
        return _KEPT.get(
            arch,
            key,
            lambda: tuple(
                chunk_kept(arch, lay, p, c, r) for p, c, r in zip(pers, chunks, ran, strict=True)
            ),
        )
    return _KEPT.get(
        arch,
        key,
        lambda: tuple(chunk_kept(arch, lay, p, c) for p, c in zip(pers, chunks, strict=True)),
    )


_PEAKS: dict[tuple[object, ...], float] = {}
"""`schedule_peak` per what it reads: the chunks' bytes, pp, vpp, the micro-batch group, the
rank, the micro-batches, the schedule, the pipeline message's bytes (held and early
receives: `schedule_peak`) and the p2p and EP overlaps; no model constant: never stale."""


def _peak(
    kept: tuple[float, ...],
    layout: Layout,
    rank: int,
    m: int,
    name: str,
    group: int | None,
    message: float = 0.0,
) -> float:
    overlaps = (layout.overlap_p2p_comm, layout.ep_comm_overlap)  # held_counts reads them too
    key = (kept, layout.pp, layout.vpp, group_size(layout, group), rank, m, name, message, overlaps)
    peak = _PEAKS.get(key)
    if peak is None:
        if len(_PEAKS) >= 1 << 16:
            _PEAKS.clear()
        peak = _PEAKS[key] = schedule_peak(kept, layout, rank, m, name, group, message, True)
    return peak


def stage_activations(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    sh: Shard,
    per: PerLayer,
    quantised: PerLayer | None = None,
) -> float:
    """Activation bytes at rank `rank`'s peak (before fragmentation): the micro-batches in flight
    (`schedule_peak`, the embedding's on the first chunk of rank 0, the MTP layers' in the chunk
    that holds them, every MTP depth's loss on the loss stage, `mtp_activations`) and on top
    what one operation works with: the loss on the last stage (logits), a layer being
    recomputed, the MoE dispatcher's tokens, the CP exchange's buffers. Megatron's loss and a
    layer's backward do not overlap (the loss backward frees the logits' buffers before the
    output layer's backward hands the gradient on): the larger counts (with a gathered loss, plus
    the logits buffers the pipeline still holds then; with PyTorch's loss, both). `quantised`:
    where the rank holds bf16 first / last layers among FP8 / NVFP4 ones, `per` are the
    unquantised layers' bytes and `quantised` the others' (`blended` per chunk)."""
    arch = job.arch
    if sh.recompute == "per_op" and layout.ep > 1:  # the EP all-to-alls' saved outputs
        per = _with_a2a(arch, per, sh, layout.ep)
        quantised = quantised and _with_a2a(arch, quantised, sh, layout.ep)
    vocab = arch.padded_vocab(layout.tp)
    last = rank == layout.output_rank  # the loss's stage: rank 0 in torchtitan's V
    pieces = bf16_ranges(job, chunks) if quantised is not None else ()
    pers = tuple(
        per if quantised is None else blended(arch, per, quantised, pieces, c) for c in chunks
    )
    kept = list(_chunks_kept(arch, layout, pers, chunks))
    if rank == 0:
        kept[0] += act.embedding_bytes(arch, sh) + vision.encoder_bytes(job, sh, layout)
        if job.t5_encoder is not None:  # pp 1 (rules.t5_scope): every decoder layer is here
            kept[0] += t5.encoder_bytes(job, sh, layout) + t5.cross_kept(job, sh, layout)
    logits = logits_bytes(arch, vocab, sh)
    loss = logits if last else 0.0  # the MTP depths' logits too: on the loss stage alone
    if rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers):
        kept[-1] += mtp_layers_kept(job, layout, sh, per) + mtp_kept(job, layout, sh, last)
    if last:  # every MTP depth's loss, wherever its layers ran
        kept[-1] += mtp_loss_kept(job, layout, sh)
    m = max(layout.num_microbatches(job.global_batch_size), 1)
    group = microbatch_group(job, layout)
    # Megatron's pipeline messages held at the peak (`early_receives.held_counts`: the output
    # sent, the input and gradient received for the next ops, the last input gradient; and the
    # interleaved schedule's early receives at a group above pp, `early_counts`), and those only
    # 1F1B's blocking exchange holds (`transient`): each [s / cp (/ tp under SP), b, h] in
    # pipeline_dtype, the parameters' (argument_utils.py:306)
    message = exchange = 0.0
    if job.framework != "torchtitan" and layout.pp > 1:
        message = pipeline_message_bytes(job, layout)
        exchange = message * transient(layout.pp, layout.vpp, rank, m, group_size(layout, group))
    stored = _peak(tuple(kept), layout, rank, m, schedule_name(job, layout), group, message)
    n_layers = layer_count(chunks)
    working = 0.0
    if sh.recompute in ("full", "per_op") and n_layers:
        working = recompute_working(arch, layout, per, chunks)
    if arch.moe_in(chunks):
        moe = moe_working(arch, sh, layout, per.full)
        if sh.recompute in ("full", "per_op") and n_layers:
            # a recomputed MoE layer holds its rebuilt activations and its tokens in flight
            # together, as a kept one does (`stored` + `working`)
            only = tuple(b if k.moe else 0.0 for b, k in zip(per.full, arch.kinds, strict=True))
            moe += recompute_working(arch, layout, replace(per, full=only), chunks)
        working = max(working, moe)
    if arch.has_dsa and any(k.mixer == "attention" for k in arch.kinds):
        # DSA's indexer scores and its dense path's score copies while a layer runs
        working = max(working, dsa.working_bytes(arch, sh))

    def rebuilt(kind: LayerKind) -> float:  # a recomputed layer of a kind, whole
        if sh.recompute not in ("full", "per_op") or not n_layers:
            return 0.0
        only = tuple(b if k == kind else 0.0 for b, k in zip(per.full, arch.kinds, strict=True))
        return recompute_working(arch, layout, replace(per, full=only), chunks)

    working = max(working, mixer_working(arch, layout.cp, sh, chunks, rebuilt))
    if n_layers:  # the module selective recompute rebuilds in the backward
        present = [k for k, n in zip(arch.kinds, arch.kind_counts(chunks), strict=True) if n]
        working = max(working, rebuilt_bytes(arch, sh, present))
    if last and sh.cross_entropy == "gathered":
        # the recomputed layer's working set comes after the loss backward has released all but
        # the two bf16 logits buffers the pipeline's output buffers hold (Hagemann et al.)
        working += GATHERED_HELD_BYTES_PER_LOGIT * sh.tokens * vocab
    # PyTorch's loss (torchtitan): no measured run separates its buffers from the recomputed
    # layer's, and its published peaks hold both (tests/model/test_memory_published.py)
    both = sh.cross_entropy == "pytorch"
    counts = arch.kind_counts(chunks)
    present = [k for k, n in zip(arch.kinds, counts, strict=True) if n]
    moving = offloading_totals(arch, layout, sh, chunks) if sh.offload else ()
    if any(moving):
        # the offloaded groups being reloaded and prefetched around the backward
        each = (
            offloaded_bytes(arch, k, sh, sh.offload, recompute=False)
            for k, n in zip(arch.kinds, moving, strict=True)
            if n
        )
        stored += window_bytes(max(each))
    acts = stored + max(loss + working if both else max(loss, working), exchange)
    if layout.cp > 1 and any(k.mixer == "attention" for k in present):
        te = job.framework != "torchtitan"  # Transformer Engine's exchanges
        acts += cp_time.exchange_bytes(arch, layout, sh.tokens, te)
    if last and layout.defer_embedding_wgrad_compute:  # the MTP depths' logits GEMMs too
        calls = deferred_calls(layout, m, 1 + arch.mtp_num_layers)
        acts += deferred_wgrad_bytes(arch, vocab, sh, calls)
    return acts


def mtp_layers_kept(job: Job, layout: Layout, sh: Shard, per: PerLayer) -> float:
    """What the MTP layers' transformer layers keep for one micro-batch on their rank: every
    depth's; block recompute leaves them whole (Megatron-LM d98e8a64 multi_token_prediction.py
    :1630-1633: "not supported for MTP yet. Skipping recompute"); torchtitan's activation
    checkpointing wraps model.layers only (b5bcd76c distributed/activation_checkpoint.py:
    155-160), so its MTP layers keep everything. Megatron's NVFP4 runs them in bf16
    (`mtp_precision`): their linear layers keep 16-bit inputs."""
    arch = job.arch
    if sh.quantised and not mtp_quantised(job):
        per = per_layer(arch, replace(sh, linear_bytes=sh.value_bytes))
    if job.framework == "torchtitan":
        return sum(n * b for n, b in zip(arch.mtp_counts(), per.full, strict=True))
    block = layout.recompute == "full" and layout.recompute_method == "block"
    return (per.whole_total if block else per.total)(arch.mtp_counts())


def deferred_calls(layout: Layout, m: int, per_micro_batch: int) -> int:
    """The deferred output-layer calls (`loss_activations.deferred_wgrad_bytes`) the last stage
    holds at its peak, with `per_micro_batch` calls per micro-batch (the output layer, and each
    MTP depth's logits on that stage): every deferred call (`Layout.deferred_wgrad_calls`)
    but the last micro-batch's, whose own tensors the peak counts already (the loss's working
    set), and which the flush drains next."""
    return min(layout.deferred_wgrad_calls(m * per_micro_batch), (m - 1) * per_micro_batch)
