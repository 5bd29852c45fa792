"""What one micro-batch keeps in a pipeline rank's chunks of layers: each kind of layer's
activation bytes under a layout's split of them (`PerLayer`, `per_layer`), a chunk's under the
recompute policy and whole-layer offloading (`chunk_kept`, `chunks_kept`), and what a recomputed
layer adds while the backward rebuilds it (`recompute_working`).
`planner.model.stage_activations` holds them at the rank's peak."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.titan_every_layers import last_wrapped, wrapped
from planner.model import activations as act
from planner.model import cpu_offload
from planner.model.fine_offload import Moved, group_moves, offloaded_bytes
from planner.model.job_memo import ModelMemo, kept_hash
from planner.model.mtp_precision import mtp_quantised
from planner.model.offload_chunks import fraction_moves
from planner.model.per_op_saved import all_to_all_bytes
from planner.model.schedule import Chunks
from planner.model.shard import Shard


@dataclass(frozen=True)
class PerLayer:
    """Activation bytes of one layer for one micro-batch, per kind of layer the model has
    (`ModelArch.kinds`, in order), for one layout."""

    kept: tuple[float, ...]
    """What a layer of each kind keeps under the layout's recompute policy, every offload group
    moved (`groups` adds back those that stay)."""
    full: tuple[float, ...]
    """Without full recompute: the working set while one layer is recomputed."""
    whole: tuple[float, ...]
    """What a layer that full recompute leaves whole keeps (block recompute's layers after a
    chunk's first N): `full` less what fine-grained offloading moves to the host from a layer
    run without recompute (`offload_chunks.offloading_layers`), every group moved; `kept`
    without full recompute."""
    groups: tuple[tuple[Moved, ...], ...] = ()
    """Per kind, what each offload group of a layer `kept` counts moves, in the order they open
    (`fine_offload.group_moves`); () where no module is offloaded."""
    whole_groups: tuple[tuple[Moved, ...], ...] = ()
    """`groups` of a layer `whole` counts."""
    fraction: float = 1.0
    """The activation offload fraction (`offload_chunks.fraction_moves`)."""
    names: tuple[tuple[str, ...], ...] = ()
    """Per kind, the names of a layer's offload groups, in the order they open (those of
    `whole_groups`; of `groups` where that kind's are not ())."""

    def __hash__(self) -> int:  # the generated hash, once per object (the memos' keys)
        return kept_hash(self)

    @property
    def dense(self) -> float:
        """A layer's kept bytes under full recompute (its input, the same for every kind), or a
        transformer's dense layer's."""
        return self.kept[0]

    def total(self, counts: tuple[int, ...]) -> float:
        """Kept bytes of `counts[j]` layers of each kind j, kind after kind (`ordered`)."""
        return self.ordered([j for j, n in enumerate(counts) for _ in range(n)])

    def whole_total(self, counts: tuple[int, ...]) -> float:
        """Kept bytes of `counts[j]` layers of each kind j that full recompute leaves whole."""
        return self.ordered([j for j, n in enumerate(counts) for _ in range(n)], True)

    def ordered(self, kinds: Sequence[int], whole: bool = False) -> float:
        """Kept bytes of one chunk's layers of these kinds (indices in `ModelArch.kinds`), in
        the order they run (left whole by full recompute where `whole`): each kind's bytes with
        every offload group moved, and the bytes the groups free that stay on the GPU, the
        chunk's groups taken together in the order they open (`kept_back`)."""
        each = self.whole if whole else self.kept
        return sum(each[j] for j in kinds) + kept_back(
            self.layer_groups(kinds, whole), self.fraction
        )

    def layer_groups(self, kinds: Sequence[int], whole: bool = False) -> list[Group]:
        """The offload groups of layers of these kinds, in the order they open, each with its
        name (`fine_offload.group_moves`; `whole_groups` where `whole`; without `names`, each
        group its own)."""
        per = self.whole_groups if whole else self.groups
        if not per:
            return []
        names = self.names or tuple(
            tuple(f"{j}.{i}" for i in range(len(g))) for j, g in enumerate(per)
        )
        return [g for j in kinds if per[j] for g in zip(names[j], per[j], strict=True)]


Group = tuple[str, Moved]
"""An offload group: its module's name and what it moves (`fine_offload.Moved`)."""


def kept_back(
    groups: Sequence[Group],
    fraction: float,
    last: bool = False,
    margin: frozenset[str] = frozenset(),
) -> float:
    """Bytes a chunk's offload groups (`groups`, in the order they open) free that stay on the GPU
    after all, as Megatron-LM d98e8a64 fine_grained_activation_offload.py decides per chunk:
    first the offload margin (`margin`: the names whose last group in the chunk
    post_warmup_callback marks not to offload, :625-639, `margin_bytes`); then the activation
    offload fraction over the other groups that copy anything, the last int(n x (1 - fraction))
    staying (:650-668, `offload_chunks.fraction_moves`); then, on the chunk whose backward follows
    its own forward (`last`: the last pipeline rank's last chunk), each name's last group, about
    to be used (`should_bulk_offload`, :1217-1225)."""
    if not groups or (fraction >= 1.0 and not last and not margin):
        return 0.0
    final = {name: i for i, (name, _) in enumerate(groups)}  # each name's last group
    held = {final[n] for n in margin if n in final}
    copies = [0.0 if i in held else m.copied for i, (_, m) in enumerate(groups)]
    moves = fraction_moves(copies, fraction)
    if last:
        held |= set(final.values())
    return sum(
        m.freed
        for i, ((_, m), mv) in enumerate(zip(groups, moves, strict=True))
        if i in held or not mv
    )


_PER_LAYER: ModelMemo[Shard, PerLayer] = ModelMemo()


def per_layer(arch: ModelArch, sh: Shard) -> PerLayer:
    """Each kind's activations under `sh`, kept (what fine-grained offloading leaves on the GPU)
    and whole; remembered per model (by identity: an lru_cache hashed the whole model) and
    shard."""
    return _PER_LAYER.get(arch, sh, lambda: _per_layer(arch, sh))


def _per_layer(arch: ModelArch, sh: Shard) -> PerLayer:
    # fine-grained offloading: the listed modules' saved inputs wait in host memory, all of
    # them here; per chunk the groups the offload fraction keeps are added back
    # (`PerLayer.ordered`); under full recompute only in the layers it leaves whole
    mods = sh.offload
    kept = tuple(
        act.layer_bytes(arch, k, sh) - offloaded_bytes(arch, k, sh, mods) for k in arch.kinds
    )
    full = tuple(act.layer_bytes(arch, k, sh, recompute=False) for k in arch.kinds)
    whole = tuple(
        b - offloaded_bytes(arch, k, sh, mods, recompute=False)
        for k, b in zip(arch.kinds, full, strict=True)
    )
    if not mods:
        return PerLayer(kept, full, whole)

    def groups(recompute: bool) -> tuple[tuple[Moved, ...], ...]:
        return tuple(
            tuple(m for _, m in group_moves(arch, k, sh, mods, recompute)) for k in arch.kinds
        )

    names = tuple(tuple(n for n, _ in group_moves(arch, k, sh, mods, False)) for k in arch.kinds)
    return PerLayer(kept, full, whole, groups(True), groups(False), sh.offload_fraction, names)


def with_a2a(arch: ModelArch, per: PerLayer, sh: Shard, ep: int) -> PerLayer:
    """`per` with what torchtitan's per-op policy saves of the EP all-to-alls added to each
    kind's kept bytes (`per_op_saved.all_to_all_bytes`)."""
    extra = tuple(all_to_all_bytes(arch, k, sh, ep) for k in arch.kinds)
    return replace(per, kept=tuple(b + e for b, e in zip(per.kept, extra, strict=True)))


def sub_counts(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """Layer counts of each kind, a less b."""
    return tuple(x - y for x, y in zip(a, b, strict=True))


def mtp_layers_kept(
    job: Job, layout: Layout, sh: Shard, per: PerLayer
) -> tuple[float, tuple[Group, ...]]:
    """What the MTP layers' transformer layers keep for one micro-batch on their rank with every
    offload group moved, and those groups, which open after the last chunk's in its forward
    (`layer_kept.chunk_kept`'s tail): every depth's; block recompute leaves them whole
    (Megatron-LM d98e8a64 multi_token_prediction.py :1630-1633: "not supported for MTP yet.
    Skipping recompute"); torchtitan's activation checkpointing wraps model.layers only
    (b5bcd76c distributed/activation_checkpoint.py:155-160), so its MTP layers keep everything.
    Megatron's NVFP4 runs them in bf16 (`mtp_precision`): their linear layers keep 16-bit
    inputs."""
    arch = job.arch
    if sh.quantised and not mtp_quantised(job):
        per = per_layer(arch, replace(sh, linear_bytes=sh.value_bytes))
    if job.framework == "torchtitan":
        return sum(n * b for n, b in zip(arch.mtp_counts(), per.full, strict=True)), ()
    block = layout.recompute == "full" and layout.recompute_method == "block"
    kinds = [j for j, n in enumerate(arch.mtp_counts()) for _ in range(n)]
    each = per.whole if block else per.kept
    return sum(each[j] for j in kinds), tuple(per.layer_groups(kinds, block))


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
    arch: ModelArch,
    layout: Layout,
    per: PerLayer,
    chunk: range,
    ran: Chunks | None = None,
    last: bool = False,
    tail: Sequence[Group] = (),
    margin: frozenset[str] = frozenset(),
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
    Otherwise each layer keeps what its recompute policy leaves (`PerLayer`). The offload groups
    that stay (`kept_back`) are the chunk's with `tail` after them (the MTP layers' groups, which
    open last in the last chunk's forward: their bytes are the caller's), `last` and `margin` as
    `kept_back` reads them."""
    base, groups = _chunk_parts(arch, layout, per, chunk, ran)
    return base + kept_back([*groups, *tail], per.fraction, last, margin)


def _chunk_parts(
    arch: ModelArch, layout: Layout, per: PerLayer, chunk: range, ran: Chunks | None
) -> tuple[float, list[Group]]:
    """`chunk_kept` as its layers' bytes with every offload group moved, and those groups."""
    n = len(chunk)
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    kinds = [index[kd] for kd in arch.layer_kinds[chunk.start : chunk.stop]]
    if layout.recompute != "full":
        if layout.cpu_offloading_num_layers:

            def window(start: int, length: int) -> float:
                return per.ordered(kinds[start : start + length])

            return cpu_offload.peak_window(n, layout.cpu_offloading_num_layers, window), []
        return sum(per.kept[j] for j in kinds), per.layer_groups(kinds)
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return math.ceil(n / k) * per.dense, []  # a layer input: the same for every kind
    if ran is None:  # the chunk's recomputed layers: Megatron's first k
        ran = (range(chunk.start, chunk.start + min(k, n)),)
    rest = [j for i, j in zip(chunk, kinds, strict=True) if not any(i in r for r in ran)]
    base = sum(map(len, ran)) * per.dense + sum(per.whole[j] for j in rest)
    return base, per.layer_groups(rest, True)


def margin_bytes(
    arch: ModelArch,
    layout: Layout,
    pers: tuple[PerLayer, ...],
    chunks: Chunks,
    last: bool = False,
    tail: Sequence[Group] = (),
) -> float:
    """Bytes of offload groups a rank keeps on the GPU once per step beyond what each chunk
    keeps per micro-batch (`chunks_kept`, same arguments): Megatron's offload margin
    (fine_grained_activation_offload.py:622-639, post_warmup_callback). As many group names as
    the chunk that opens the most distinct ones; each name's last group in the first chunk
    handler to run backward that opens it (the reversed walk of `_cached_chunks_backward`
    keeps the last group it meets per name, :627-629): the handlers are cached per forward
    and reused every step (:804-818), so that is micro-batch 0 of the rank's highest chunk
    that opens the name (the backward runs chunk v - 1 first); names in the order that walk
    first meets them (chunk 0's first), as many as the margin. The margin's groups no
    longer count towards the chunk's fraction (:651-655: `kept_back`). That micro-batch is in
    flight from its forward to the rank's first backward(s), where the peak of 1F1B and of
    even interleaved chunks lies (`in_flight.schedule_peak`'s first steady step): counted on
    top of the peak, at most this much too high where the peak is later. Remembered under
    `chunks_kept`'s key (`_MARGIN`: it reads what that reads)."""
    key = _kept_key(layout, pers, chunks, last, tail)
    return _MARGIN.get(arch, key, lambda: _margin_bytes(arch, layout, pers, chunks, last, tail))


def _margin_bytes(
    arch: ModelArch,
    layout: Layout,
    pers: tuple[PerLayer, ...],
    chunks: Chunks,
    last: bool,
    tail: Sequence[Group],
) -> float:
    if not pers or not any(p.names for p in pers):
        return 0.0
    rans = _rans(layout, chunks)
    lists = [
        _chunk_parts(arch, layout, p, c, r)[1] for p, c, r in zip(pers, chunks, rans, strict=True)
    ]
    lists[-1] = [*lists[-1], *tail]
    count = max(len({n for n, _ in g}) for g in lists)
    home: dict[str, int] = {}  # per name, the highest chunk that opens it, in first-met order
    for c, g in enumerate(lists):
        for name, _ in g:
            home[name] = c
    chosen = list(home)[:count]
    extra = 0.0
    for c, (g, per) in enumerate(zip(lists, pers, strict=True)):
        names = frozenset(n for n in chosen if home[n] == c)
        if names:
            end = last and c == len(lists) - 1
            extra += kept_back(g, per.fraction, end, names) - kept_back(g, per.fraction, end)
    return extra


_MARGIN: ModelMemo[tuple[object, ...], float] = ModelMemo()
"""`margin_bytes` per model and `_kept_key`."""

_KEPT: ModelMemo[tuple[object, ...], tuple[float, ...]] = ModelMemo()
"""`chunk_kept` of each chunk of a rank, per model and per what it reads besides the model: the
layer bytes (`PerLayer`), the chunks and the recompute and offloading settings (the search
estimates the memory of each ZeRO stage and TP-overlap choice of a base with the same ones)."""


def _rans(layout: Layout, chunks: Chunks) -> list[Chunks | None]:
    """Per chunk, its recomputed layers where not Megatron's first N: under torchtitan's every
    N-th recompute, the rank's wrapped layers of each."""
    if layout.recompute == "full" and layout.recompute_every:
        return [tuple(range(i, i + 1) for i in w) for w in wrapped(chunks, layout.recompute_every)]
    return [None for _ in chunks]


def chunks_kept(
    arch: ModelArch,
    layout: Layout,
    pers: tuple[PerLayer, ...],
    chunks: Chunks,
    last: bool = False,
    tail: tuple[Group, ...] = (),
) -> tuple[float, ...]:
    """`chunk_kept` of each of a rank's `chunks` (chunk c's layer bytes `pers[c]`; under
    torchtitan's every-N-th recompute, the rank's wrapped layers of each), the last chunk's with
    `tail` after its groups and `last` (the last pipeline rank: its last chunk's backward follows
    its own forward), remembered (`_KEPT`)."""
    lay, key = layout, _kept_key(layout, pers, chunks, last, tail)
    v = len(chunks)

    def compute() -> tuple[float, ...]:
        return tuple(
            chunk_kept(arch, lay, p, c, r, *((last, tail) if i == v - 1 else (False, ())))
            for i, (p, c, r) in enumerate(zip(pers, chunks, _rans(lay, chunks), strict=True))
        )

    return _KEPT.get(arch, key, compute)


def _kept_key(
    lay: Layout, pers: tuple[PerLayer, ...], chunks: Chunks, last: bool, tail: Sequence[Group]
) -> tuple[object, ...]:
    """What `chunks_kept` and `margin_bytes` read besides the model: the layer bytes, the chunks,
    the recompute and CPU-offloading settings, `last` and `tail`."""
    return (
        pers,
        chunks,
        lay.recompute,
        lay.recompute_method,
        lay.recompute_num_layers,
        lay.recompute_every,
        lay.cpu_offloading_num_layers,
        last,
        tuple(tail),
    )
