"""Which of a pipeline rank's fine-grained offload groups move, chunk by chunk (what each group of
one layer moves: `planner.model.fine_offload`): the layers whose groups move under full recompute
(`offloading_layers`), the activation offload fraction over a chunk's groups
(`fraction_moves`), the last rank's last groups (`should_bulk_offload`); and from them what a
rank's chunks copy to the host (`chunk_copies`) and what they reload onto the GPU at once
(`reload_window`). (NVIDIA/Megatron-LM d98e8a64,
megatron/core/pipeline_parallel/fine_grained_activation_offload.py.)"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from planner.inputs.arch import ModelArch
from planner.inputs.layout import Layout
from planner.inputs.titan_every_layers import block_ranges
from planner.model.fine_offload import Moved, group_moves
from planner.model.job_memo import ModelMemo
from planner.model.schedule import Chunks
from planner.model.shard import Shard


def fraction_moves(copies: Sequence[float], fraction: float) -> list[bool]:
    """Per offload group of one model chunk, in the order its forward opens them (every layer's
    groups, layer after layer; `copies`: the bytes each copies), whether it moves under
    --activation-offload-fraction: of the groups that copy anything, all but the last
    int(n x (1 - fraction)), which stay on the GPU (Megatron-LM d98e8a64
    fine_grained_activation_offload.py:650-668, post_warmup_callback, per chunk, `reversed`).
    A group that copies nothing moves nothing either way. The one rule memory
    (`layer_kept.chunk_kept`) and the transfer times (`stage_offload`, `chunk_copies`) read;
    not host memory, which holds the warm-up step's copies of every group (`host_memory`)."""
    eligible = [i for i, c in enumerate(copies) if c > 0.0]
    stay = set(eligible[len(eligible) - int(len(eligible) * (1.0 - fraction)) :])
    return [i not in stay for i in range(len(copies))]


def moving_layers(kinds: Sequence[int], counts: Sequence[int]) -> list[bool]:
    """Per layer of a chunk (its kinds' indices in `ModelArch.kinds`, in order), whether its
    groups move, of `counts[j]` layers of kind j that move (`offloading_layers`): each kind's
    last ones (block recompute checkpoints a chunk's first N)."""
    left = list(counts)
    moves = [False] * len(kinds)
    for i in reversed(range(len(kinds))):
        if left[kinds[i]] > 0:
            left[kinds[i]] -= 1
            moves[i] = True
    return moves


Tail = Sequence[tuple[str, Moved]]
"""Named offload groups after a chunk's own (`_chunk_moves`' tail)."""

Sums = tuple[float, float | None]
"""One chunk's offload groups that move (`_chunk_sums`): the bytes per micro-batch they copy to
the host and back, and the most one layer's of them reload at once (None: no layer moves)."""


def _chunk_moves(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks, last: bool = False, tail: Tail = ()
) -> tuple[Sums, ...]:
    """Per chunk of one rank, what its offload groups that move copy and reload (`Sums`,
    `_chunk_sums`): of its layers that move their groups (`moving_kinds`), and after the last
    chunk's its `tail` (the MTP layers' groups that open after its own, gpt_model.py:600,
    :711-712, as one more layer); on the last rank's last chunk (`last`) not each name's last
    group. Remembered per model and what a chunk's sums read (`_SUMS`): ranks and layouts whose
    chunks' moving layers are of the same kinds share them."""
    mods = frozenset(lay.offload_modules)
    fraction = lay.activation_offload_fraction
    out = []
    v = len(chunks)
    for i, layers in enumerate(moving_kinds(arch, lay, sh, chunks)):
        after = tuple(tail) if i == v - 1 else ()
        key = (sh, mods, fraction, layers, last and i == v - 1, after)
        out.append(_SUMS.get(arch, key, partial(_chunk_sums, arch, *key)))
    return tuple(out)


def moving_kinds(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks
) -> tuple[tuple[int, ...], ...]:
    """Per chunk of one rank, the kinds (indices in `ModelArch.kinds`) of its layers that move
    their offload groups, in order (`offloading_layers`, `moving_layers`), remembered per model
    and all they read besides: the chunks, the shard's recompute, whether any module is
    offloaded and the layout's recompute method, N and every-N (`_MOVING`)."""
    key = (
        chunks,
        sh.recompute,
        bool(lay.offload_modules),
        lay.recompute_method,
        lay.recompute_num_layers,
        lay.recompute_every,
    )
    return _MOVING.get(arch, key, lambda: _moving_kinds(arch, lay, sh, chunks))


_MOVING: ModelMemo[tuple[object, ...], tuple[tuple[int, ...], ...]] = ModelMemo(1 << 14)


def _moving_kinds(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks
) -> tuple[tuple[int, ...], ...]:
    index = {kind: j for j, kind in enumerate(arch.kinds)}
    out = []
    for c, counts in zip(chunks, offloading_layers(arch, lay, sh, chunks), strict=True):
        kinds = [index[kd] for kd in arch.layer_kinds[c.start : c.stop]]
        mv = moving_layers(kinds, counts)
        out.append(tuple(j for j, m in zip(kinds, mv, strict=True) if m))
    return tuple(out)


_SUMS: ModelMemo[tuple[object, ...], Sums] = ModelMemo(1 << 16)
"""`_chunk_sums` per model and all it reads besides: the shard, the modules, the fraction, the
chunk's moving layers' kinds, whether it is the last rank's last chunk and its tail (no
calibrated constant)."""


def _chunk_sums(
    arch: ModelArch,
    sh: Shard,
    mods: frozenset[str],
    fraction: float,
    layers: tuple[int, ...],
    final: bool,
    tail: tuple[tuple[str, Moved], ...],
) -> Sums:
    """One chunk's `Sums`: `layers`, the kinds (indices in `ModelArch.kinds`) of its layers that
    move their groups, in order, and `tail` as one more (`_chunk_moves`); each group's `Moved`
    (`group_moves`, recompute=False) and whether it moves: `fraction_moves` over the chunk's
    groups in the order they open; where `final` (the last rank's last chunk), not each name's
    last group (`should_bulk_offload`, :1217-1225)."""
    each = [group_moves(arch, kd, sh, mods, False) for kd in arch.kinds]
    groups = [each[j] for j in layers] + ([tail] if tail else [])
    flat = [g for layer in groups for g in layer]
    moves = fraction_moves([m.copied for _, m in flat], fraction)
    for k in {n: k for k, (n, _) in enumerate(flat)}.values() if final else ():
        moves[k] = False
    it = iter(moves)
    marked = [[(m, next(it)) for _, m in g] for g in groups]
    copied = sum(m.copied for g in marked for m, mv in g if mv)
    reloads = [sum(m.reloaded for m, mv in g if mv) for g in marked]
    return copied, max(reloads) if reloads else None


def chunk_copies(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks, last: bool = False, tail: Tail = ()
) -> tuple[float, ...]:
    """Per chunk of one rank, the bytes per micro-batch its offload groups that move copy to
    the host and back (`_chunk_moves`, `last` and `tail` as it reads them)."""
    return tuple(copied for copied, _ in _chunk_moves(arch, lay, sh, chunks, last, tail))


def reload_window(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks, last: bool = False, tail: Tail = ()
) -> float | None:
    """Offloaded bytes on the GPU at a rank's peak, reloaded around the backward
    (`window_bytes`): of the rank's layers that move groups, the MTP layers' `tail` among them
    (`last` and `tail` as `_chunk_moves` reads them), the most one layer's moving groups reload
    at once (`Moved.reloaded`; 0 where they all stay); None where no layer moves any."""
    most = [r for _, r in _chunk_moves(arch, lay, sh, chunks, last, tail) if r is not None]
    if not most:
        return None
    return window_bytes(max(most))


def offloading_layers(
    arch: ModelArch, lay: Layout, sh: Shard, chunks: Chunks
) -> tuple[tuple[int, ...], ...]:
    """Per chunk of one rank, per layer kind (`ModelArch.kinds`): the layers whose offload groups
    move (`fine_offload.offloaded_bytes(..., recompute=False)` each; `fine_offload`'s docstring):
    every layer without full or per-op recompute; under full recompute those it leaves whole: a
    chunk's layers after its first recompute_num_layers (block), none (uniform), those
    torchtitan's every-N-th checkpointing does not wrap (both `titan_every_layers.block_ranges`,
    the layers the models count recomputed); none under per-op recompute."""
    zero = tuple(0 for _ in arch.kinds)
    if not lay.offload_modules or sh.recompute == "per_op":
        return tuple(zero for _ in chunks)
    if sh.recompute != "full":
        return tuple(arch.kind_counts((c,)) for c in chunks)
    if lay.recompute_method == "uniform":
        return tuple(zero for _ in chunks)
    ran = block_ranges(lay, chunks)
    return tuple(
        tuple(
            n - r
            for n, r in zip(
                arch.kind_counts((c,)),
                arch.kind_counts(tuple(x for x in ran if x.start in c)),
                strict=True,
            )
        )
        for c in chunks
    )


WINDOW_LAYERS = 2
"""Layers whose offloaded groups are on the GPU at once besides what each layer keeps: the one whose
backward runs (reloaded) and the next, prefetched (Megatron's offload manager reloads one group
ahead); the forward's device-to-host copies free each group as its copy completes."""


def window_bytes(per_layer: float) -> float:
    """Offloaded bytes on the GPU at a rank's peak: WINDOW_LAYERS layers' groups, each layer's
    what its reload puts back at once (`Moved.reloaded`)."""
    return WINDOW_LAYERS * per_layer
