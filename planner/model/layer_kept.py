"""What one micro-batch keeps in a pipeline rank's chunks of layers: each kind of layer's
activation bytes under a layout's split of them (`PerLayer`, `per_layer`), a chunk's under the
recompute policy and whole-layer offloading (`chunk_kept`, `chunks_kept`), and what a recomputed
layer adds while the backward rebuilds it (`recompute_working`).
`planner.model.stage_activations` holds them at the rank's peak."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.titan_every_layers import last_wrapped, wrapped
from planner.model import activations as act
from planner.model import cpu_offload
from planner.model.fine_offload import offloaded_bytes
from planner.model.job_memo import ModelMemo, kept_hash
from planner.model.per_op_saved import all_to_all_bytes
from planner.model.schedule import Chunks
from planner.model.shard import Shard


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

    def __hash__(self) -> int:  # the generated hash, once per object (the memos' keys)
        return kept_hash(self)

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
