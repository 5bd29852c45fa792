"""Activation bytes a pipeline rank holds at its peak: the micro-batches in flight through its
model chunks in Megatron-LM's schedule, what each chunk keeps per micro-batch under the recompute
policy (full, selective modules, CPU offloading), and the working set one operation adds on top
(the loss, a recomputed layer, the MoE dispatcher's tokens, the CP exchange's buffers:
`cp_time.exchange_bytes`, torchtitan's `titan_cp.exchange_bytes`).

In flight: `planner.model.in_flight` (the micro-batches each schedule holds, per chunk).
"""

from __future__ import annotations

from dataclasses import fields, replace
from operator import itemgetter
from typing import NamedTuple

from planner.inputs.hybrid import LayerKind
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import activations as act
from planner.model import cp_time, dsa, t5, titan_cp, titan_sdpa, vision
from planner.model.bf16_blend import blended
from planner.model.bf16_layers import bf16_ranges
from planner.model.early_receives import transient
from planner.model.fp32 import pipeline_message_bytes
from planner.model.graph_buffers import chunk_copies, graph_shared_bytes, pool_holds_working
from planner.model.in_flight import SPLIT_BACKWARD, group_size, one_period, schedule_peak
from planner.model.job_memo import JobMemo
from planner.model.layer_kept import (
    PerLayer,
    chunks_kept,
    margin_bytes,
    mtp_layers_kept,
    recompute_working,
    with_a2a,
)
from planner.model.layer_kept import (
    per_layer as per_layer,  # re-exported: host_memory, memory and the tests import it here
)
from planner.model.layout_shard import SHARD_UNREAD, make_shard
from planner.model.loss_activations import (
    GATHERED_HELD_BYTES_PER_LOGIT,
    deferred_wgrad_bytes,
    logits_bytes,
)
from planner.model.mixer_working import mixer_working
from planner.model.moe_working import moe_working
from planner.model.mtp_activations import mtp_kept, mtp_loss_kept
from planner.model.offload_chunks import reload_window
from planner.model.pending_w import chunk_pending
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


_PEAKS: dict[tuple[object, ...], float] = {}
"""`schedule_peak` per what it reads: the chunks' bytes, pp, vpp, the micro-batch group, the
rank, the micro-batches (one key, 0, for every m whose walk is one period's:
`in_flight.one_period`), the schedule, the pipeline message's bytes (held and early
receives: `schedule_peak`) and the p2p and EP overlaps; no model constant: never stale."""


def _peak(
    kept: tuple[float, ...],
    layout: Layout,
    rank: int,
    m: int,
    name: str,
    group: int | None,
    message: float = 0.0,
    pending: tuple[float, ...] = (),
) -> float:
    # every m of one period's walk alike (`in_flight.one_period`): one key for all of them
    at = 0 if one_period(len(kept), layout, rank, m, name, group, message) and not pending else m
    overlaps = (layout.overlap_p2p_comm, layout.ep_comm_overlap)  # held_counts reads them too
    size = group_size(layout, group)
    key = (kept, layout.pp, layout.vpp, size, rank, at, name, message, overlaps, pending)
    peak = _PEAKS.get(key)
    if peak is None:
        if len(_PEAKS) >= 1 << 16:
            _PEAKS.clear()
        peak = _PEAKS[key] = schedule_peak(
            kept, layout, rank, m, name, group, message, True, pending
        )
    return peak


def held_peak(job: Job, layout: Layout, rank: int, kept: tuple[float, ...]) -> float:
    """The most bytes rank `rank` holds at once over its schedule, chunk c keeping kept[c] per
    micro-batch: `_peak` at the job's micro-batches, schedule and micro-batch group, no
    messages (the graphs' pool, the host's offloaded groups)."""
    m = max(layout.num_microbatches(job.global_batch_size), 1)
    return _peak(kept, layout, rank, m, schedule_name(job, layout), microbatch_group(job, layout))


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
    unquantised layers' bytes and `quantised` the others' (`blended` per chunk).
    `activation_parts` computes what reads neither the micro-batches nor expert parallelism,
    `peak_bytes` the rest from it."""
    parts = activation_parts(job, layout, rank, chunks, sh, per, quantised)
    return peak_bytes(job, layout, rank, sh, per, parts)


class Parts(NamedTuple):
    """What `stage_activations` computes of a rank that reads neither its micro-batches (dp)
    nor the expert-parallel size, the token dispatcher or the EP overlap (but through `sh`, and
    the size where per-op recompute saves the all-to-alls' outputs): `peak_bytes` adds the rest
    in the same order, so the bytes are the same, bit for bit."""

    kept: tuple[float, ...]
    """What one micro-batch keeps in each chunk (`schedule_peak`'s)."""
    message: float
    """One pipeline message's bytes (0 where none is held)."""
    pipelined: bool
    """Whether Megatron's blocking exchange holds messages too (`early_receives.transient`)."""
    loss: float
    working: float
    """The recomputed layer's working set (0 without recompute), before the MoE layer's."""
    moe: tuple[float, ...] | None
    """None without MoE layers; else what a recomputed MoE layer adds to its dispatcher's working
    set (`moe_working`), or nothing."""
    after: tuple[float, ...]
    """The working sets compared after the MoE layer's, in order."""
    gathered: float | None
    """The logits buffers a gathered loss holds beside the working set (None: not held)."""
    both: bool
    """PyTorch's loss, or per-layer graphs' pool: the loss's buffers and the working set add."""
    window: float | None
    """Fine-grained offloading's reload window on top of what is stored (None: none)."""
    cp_bytes: float | None
    """The CP exchange's buffers (None: no CP attention on the rank)."""
    last: bool
    vocab: int
    pending: tuple[float, ...] = ()
    """What a pending W keeps per chunk (`pending_w`) under torch's split backward; () else."""


def activation_parts(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    sh: Shard,
    per: PerLayer,
    quantised: PerLayer | None = None,
) -> Parts:
    """`stage_activations`' `Parts`."""
    arch = job.arch
    if sh.recompute == "per_op" and layout.ep > 1:  # the EP all-to-alls' saved outputs
        per = with_a2a(arch, per, sh, layout.ep)
        quantised = quantised and with_a2a(arch, quantised, sh, layout.ep)
    vocab = arch.padded_vocab(layout.tp)
    last = rank == layout.output_rank  # the loss's stage: rank 0 in torchtitan's V
    pieces = bf16_ranges(job, chunks) if quantised is not None else ()
    pers = tuple(
        per if quantised is None else blended(arch, per, quantised, pieces, c) for c in chunks
    )
    mtp = rank == layout.mtp_rank(arch.num_layers, arch.mtp_num_layers)
    mtp_base, tail = mtp_layers_kept(job, layout, sh, per) if mtp else (0.0, ())
    # the last rank's last chunk keeps each name's last group (`layer_kept.kept_back`)
    final = rank == layout.pp - 1 and job.framework != "torchtitan"
    kept = list(chunks_kept(arch, layout, pers, chunks, final, tail))
    kept = chunk_copies(arch, sh, kept, rank == 0, rank == layout.output_rank)
    if rank == 0:
        kept[0] += act.embedding_bytes(arch, sh) + vision.encoder_bytes(job, sh, layout)
        if job.t5_encoder is not None:  # pp 1 (rules.t5_scope): every decoder layer is here
            kept[0] += t5.encoder_bytes(job, sh, layout) + t5.cross_kept(job, sh, layout)
    logits = logits_bytes(arch, vocab, sh)
    loss = logits if last else 0.0  # the MTP depths' logits too: on the loss stage alone
    if mtp:
        kept[-1] += mtp_base + mtp_kept(job, layout, sh, last)
    if last:  # every MTP depth's loss, wherever its layers ran
        kept[-1] += mtp_loss_kept(job, layout, sh)
    # Megatron's pipeline messages held at the peak (`early_receives.held_counts`: the output
    # sent, the input and gradient received for the next ops, the last input gradient; and the
    # interleaved schedule's early receives at a group above pp, `early_counts`), and those only
    # 1F1B's blocking exchange holds (`transient`): each [s / cp (/ tp under SP), b, h] in
    # pipeline_dtype, the parameters' (argument_utils.py:306)
    message = 0.0
    pipelined = job.framework != "torchtitan" and layout.pp > 1
    if pipelined:
        message = pipeline_message_bytes(job, layout)
    n_layers = layer_count(chunks)
    working = 0.0
    if sh.recompute in ("full", "per_op") and n_layers:
        working = recompute_working(arch, layout, per, chunks)
    moe: tuple[float, ...] | None = None
    if arch.moe_in(chunks):
        moe = ()
        if sh.recompute in ("full", "per_op") and n_layers:
            # a recomputed MoE layer holds its rebuilt activations and its tokens in flight
            # together, as a kept one does (`stored` + `working`)
            only = tuple(b if k.moe else 0.0 for b, k in zip(per.full, arch.kinds, strict=True))
            moe = (recompute_working(arch, layout, replace(per, full=only), chunks),)
    after: list[float] = []
    if arch.has_dsa and any(k.mixer == "attention" for k in arch.kinds):
        # DSA's indexer scores and its dense path's score copies while a layer runs
        after.append(dsa.working_bytes(arch, sh))

    def rebuilt(kind: LayerKind) -> float:  # a recomputed layer of a kind, whole
        if sh.recompute not in ("full", "per_op") or not n_layers:
            return 0.0
        only = tuple(b if k == kind else 0.0 for b, k in zip(per.full, arch.kinds, strict=True))
        return recompute_working(arch, layout, replace(per, full=only), chunks)

    after.append(mixer_working(arch, layout.cp, sh, chunks, rebuilt))
    if titan_sdpa.flash_runs(job):  # torchtitan's deterministic SDPA: its workspace beside a
        # recomputed layer's rebuilt activations (`working`) in its backward
        after.append(titan_sdpa.flash_backward_bytes(job, layout.cp, sh) + working)
    if n_layers:  # the module selective recompute rebuilds in the backward
        present = [k for k, n in zip(arch.kinds, arch.kind_counts(chunks), strict=True) if n]
        after.append(rebuilt_bytes(arch, sh, present))
    gathered = None
    if last and sh.cross_entropy == "gathered":
        # the recomputed layer's working set comes after the loss backward has released all but
        # the two bf16 logits buffers the pipeline's output buffers hold (Hagemann et al.)
        gathered = GATHERED_HELD_BYTES_PER_LOGIT * sh.tokens * vocab
    # PyTorch's loss (torchtitan): no measured run separates its buffers from the recomputed
    # layer's, and its published peaks hold both (tests/model/test_memory_published.py); not the
    # chunked loss: its backward ends in the loss call (b5bcd76c loss.py:676-700, then :713-720);
    # nor can the loss reuse graphed layers' working sets, in the graphs' own memory pool
    both = (sh.cross_entropy == "pytorch" and sh.loss_chunks == 1) or pool_holds_working(sh)
    counts = arch.kind_counts(chunks)
    present = [k for k, n in zip(arch.kinds, counts, strict=True) if n]
    # the offloaded groups being reloaded and prefetched around the backward, the MTP layers'
    window = reload_window(arch, layout, sh, chunks, final, tail) if sh.offload else None
    if window is not None:  # and the offload margin's groups, once (`margin_bytes`)
        window += margin_bytes(arch, layout, pers, chunks, final, tail)
    cp_bytes = None
    if layout.cp > 1 and any(k.mixer == "attention" for k in present):
        if job.framework == "torchtitan":  # PyTorch's all-gathered K/V
            cp_bytes = titan_cp.exchange_bytes(arch, layout, sh.tokens)
        else:  # Transformer Engine's exchanges
            cp_bytes = cp_time.exchange_bytes(arch, layout, sh.tokens)
    pending: tuple[float, ...] = ()
    if layout.pp > 1 and schedule_name(job, layout) in SPLIT_BACKWARD:
        v = len(chunks)
        pending = chunk_pending(
            arch,
            layout,
            sh,
            [arch.kind_counts((c,)) for c in chunks],
            [rank == 0 and c == 0 for c in range(v)],
            [last and c == v - 1 for c in range(v)],
        )
    return Parts(
        kept=tuple(kept),
        message=message,
        pipelined=pipelined,
        loss=loss,
        working=working,
        moe=moe,
        after=tuple(after),
        gathered=gathered,
        both=both,
        window=window,
        cp_bytes=cp_bytes,
        last=last,
        vocab=vocab,
        pending=pending,
    )


ACTIVATION_PARTS: JobMemo[tuple[object, ...], Parts] = JobMemo()
"""`activation_parts` per job and `parts_key`: `memory.estimate` asks it of every layout a
search estimates; layouts that differ only in the fields `activation_parts` does not read share
it (`_PARTS_UNREAD`: their expert parallelism, their dp; a search's other micro-batch counts,
and `planner.search.scaling`'s other GPU counts, whose jobs it reads alike)."""

_PARTS_UNREAD = frozenset(
    {
        "dp",
        "ep",
        "moe_token_dispatcher_type",
        "moe_flex_dispatcher_backend",
        "moe_flex_dispatcher_num_sms",
        "ep_comm_overlap",
        "zero_stage",
        "tp_comm_overlap",
    }
)
"""The layout fields `activation_parts` does not read (but through the shard, which is in its
key): the micro-batches (dp) are `peak_bytes`', as are the expert-parallel size, the dispatcher,
its backend and SMs and the EP overlap (`moe_working`'s; the shard reads them for the MoE
layers' token loads, `layout_shard.make_shard`), but ep where per-op recompute saves the
all-to-alls' outputs (`with_a2a`: in the key then); neither reads the ZeRO stage or the TP
overlap (`memory._ACTIVATIONS_READ`). The p2p and EP overlaps' pipeline messages
(`early_receives.held_counts`, `early_counts`) are `peak_bytes`' too (`_peak`, its key holding
both), never read here; the p2p overlap stays in this key all the same. Every other field is in
the key: the degrees, the split and the ranks it places (the output and MTP ranks), the
recompute and offloading fields (`chunks_kept`, `recompute_working`, the encoders' and MTP
layers' bytes, `reload_window`), cp and its exchange (`cp_time.exchange_bytes`)."""

_PARTS_READ = itemgetter(*(f.name for f in fields(Layout) if f.name not in _PARTS_UNREAD))


def remembered_parts(
    job: Job,
    layout: Layout,
    rank: int,
    chunks: Chunks,
    sh: Shard,
    per: PerLayer,
    quantised: PerLayer | None = None,
) -> Parts:
    """`activation_parts`, remembered (`ACTIVATION_PARTS`) per job and key: the layout's fields
    but `_PARTS_UNREAD`, ep where per-op recompute reads it, the rank (whose chunks are the
    split's: `chunks` is `layout.chunk_layers(...)[rank]`, as `memory` asks it), and the layer
    bytes it is given (`sh`, `per`, `quantised`: values, compared whole). Of the job it reads
    the model, the training code, its precision and bf16 layers, its encoders and MTP depths,
    never the cluster: `planner.search.scaling` shares the memo between the jobs of a curve,
    which differ in their GPU count alone."""
    ep = layout.ep if sh.recompute == "per_op" else 0
    key = (*_PARTS_READ(layout.__dict__), rank, ep, sh, per, quantised)
    memo = ACTIVATION_PARTS.of(job)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = activation_parts(job, layout, rank, chunks, sh, per, quantised)
    return hit


def peak_bytes(
    job: Job, layout: Layout, rank: int, sh: Shard, per: PerLayer, parts: Parts
) -> float:
    """`stage_activations` from its `parts`: what reads the micro-batches (the schedule's peak,
    the blocking exchange's messages, the deferred output-layer calls) and the MoE dispatcher's
    working set (`moe_working`: the expert-parallel size, the dispatcher, the EP overlap)."""
    arch = job.arch
    m = max(layout.num_microbatches(job.global_batch_size), 1)
    group = microbatch_group(job, layout)
    exchange = 0.0
    if parts.pipelined:
        exchange = parts.message * transient(
            layout.pp, layout.vpp, rank, m, group_size(layout, group)
        )
    name = schedule_name(job, layout)
    stored = _peak(parts.kept, layout, rank, m, name, group, parts.message, parts.pending)
    working = parts.working
    if parts.moe is not None:
        moe = moe_working(arch, sh, layout, per.full)
        for rebuilt in parts.moe:
            moe += rebuilt
        working = max(working, moe)
    for other in parts.after:
        working = max(working, other)
    if parts.gathered is not None:
        working += parts.gathered
    if parts.window is not None:
        stored += parts.window
    stored += graph_shared_bytes(arch, sh)  # Transformer Engine's graphs' shared buffers
    loss = parts.loss
    acts = stored + max(loss + working if parts.both else max(loss, working), exchange)
    if parts.cp_bytes is not None:
        acts += parts.cp_bytes
    if parts.last and layout.defer_embedding_wgrad_compute:  # the MTP depths' logits GEMMs too
        calls = deferred_calls(layout, m, 1 + arch.mtp_num_layers)
        acts += deferred_wgrad_bytes(arch, parts.vocab, sh, calls)
    return acts


def deferred_calls(layout: Layout, m: int, per_micro_batch: int) -> int:
    """The deferred output-layer calls (`loss_activations.deferred_wgrad_bytes`) the last stage
    holds at its peak, with `per_micro_batch` calls per micro-batch (the output layer, and each
    MTP depth's logits on that stage): every deferred call (`Layout.deferred_wgrad_calls`)
    but the last micro-batch's, whose own tensors the peak counts already (the loss's working
    set), and which the flush drains next."""
    return min(layout.deferred_wgrad_calls(m * per_micro_batch), (m - 1) * per_micro_batch)
