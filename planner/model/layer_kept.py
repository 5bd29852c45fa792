"""What one micro-batch keeps in a pipeline rank's chunks of layers: each kind of layer's
activation bytes under a layout's split of them (`PerLayer`, `per_layer`), a chunk's under the
recompute policy and whole-layer offloading (`chunk_kept`, `chunks_kept`), and what a recomputed
layer adds while the backward rebuilds it (`recompute_working`).
`planner.model.stage_activations` holds them at the rank's peak."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import astuple, dataclass, replace

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.titan_every_layers import last_wrapped, wrapped
from planner.model import activations as act
from planner.model import cpu_offload
from planner.model.fine_offload import Moved, fraction_moves, group_moves, offloaded_bytes
from planner.model.job_memo import ModelMemo, kept_hash
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
    run without recompute (`fine_offload.offloading_layers`), every group moved; `kept`
    without full recompute."""
    groups: tuple[tuple[Moved, ...], ...] = ()
    """Per kind, what each offload group of a layer `kept` counts moves, in the order they open
    (`fine_offload.group_moves`); () where no module is offloaded."""
    whole_groups: tuple[tuple[Moved, ...], ...] = ()
    """`groups` of a layer `whole` counts."""
    fraction: float = 1.0
    """The activation offload fraction (`fine_offload.fraction_moves`)."""

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
        chunk's groups taken together in the order they open (`fine_offload.fraction_moves`,
        Megatron's per-chunk rule: the chunk's last groups stay)."""
        each = self.whole if whole else self.kept
        out = sum(each[j] for j in kinds)
        per = self.whole_groups if whole else self.groups
        if self.fraction >= 1.0 or not per:  # int(n x 0): every group moves
            return out
        groups = [m for j in kinds for m in per[j]]
        moves = fraction_moves([m.copied for m in groups], self.fraction)
        return out + sum(m.freed for m, mv in zip(groups, moves, strict=True) if not mv)


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

    return PerLayer(kept, full, whole, groups(True), groups(False), sh.offload_fraction)


def with_a2a(arch: ModelArch, per: PerLayer, sh: Shard, ep: int) -> PerLayer:
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
    n = len(chunk)
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    kinds = [index[kd] for kd in arch.layer_kinds[chunk.start : chunk.stop]]
    if layout.recompute != "full":
        if layout.cpu_offloading_num_layers:

            def window(start: int, length: int) -> float:
                return per.ordered(kinds[start : start + length])

            return cpu_offload.peak_window(n, layout.cpu_offloading_num_layers, window)
        return per.ordered(kinds)
    k = layout.recompute_num_layers
    if layout.recompute_method == "uniform":
        return math.ceil(n / k) * per.dense  # a layer input: the same for every kind
    if ran is None:  # the chunk's recomputed layers: Megatron's first k
        ran = (range(chunk.start, chunk.start + min(k, n)),)
    rest = [j for i, j in zip(chunk, kinds, strict=True) if not any(i in r for r in ran)]
    return sum(map(len, ran)) * per.dense + per.ordered(rest, True)


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

    def mix_groups(
        a: tuple[tuple[Moved, ...], ...], b: tuple[tuple[Moved, ...], ...]
    ) -> tuple[tuple[Moved, ...], ...]:
        if not a or not b:
            return a or b
        shares = (k / n if n else 0.0 for k, n in zip(inside, counts, strict=True))
        return tuple(
            tuple(
                Moved(*(y + s * (x - y) for x, y in zip(astuple(w), astuple(q), strict=True)))
                for w, q in zip(ws, qs, strict=True)
            )
            for ws, qs, s in zip(a, b, shares, strict=True)
        )

    return PerLayer(
        mix(plain.kept, quantised.kept),
        mix(plain.full, quantised.full),
        mix(plain.whole, quantised.whole),
        mix_groups(plain.groups, quantised.groups),
        mix_groups(plain.whole_groups, quantised.whole_groups),
        plain.fraction,
    )


_KEPT: ModelMemo[tuple[object, ...], tuple[float, ...]] = ModelMemo()
"""`chunk_kept` of each chunk of a rank, per model and per what it reads besides the model: the
layer bytes (`PerLayer`), the chunks and the recompute and offloading settings (the search
estimates the memory of each ZeRO stage and TP-overlap choice of a base with the same ones)."""


def chunks_kept(
    arch: ModelArch, layout: Layout, pers: tuple[PerLayer, ...], chunks: Chunks
) -> tuple[float, ...]:
    """`chunk_kept` of each of a rank's `chunks` (chunk c's layer bytes `pers[c]`; under
    torchtitan's every-N-th recompute, the rank's wrapped layers of each), remembered
    (`_KEPT`)."""
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
