"""Which decoder layers torchtitan's "selective, every N-th layer" activation checkpointing wraps
(`[torchtitan] selective_layer_every = N`, torchtitan's `activation_checkpoint.mode =
"selective"` with `selective_ac_option = "N"`), per pipeline rank and model chunk.

Source: pytorch/torchtitan e347b1e5 (planner's TOML-era torchtitan, `TORCHTITAN_COMMIT`):
- distributed/activation_checkpoint.py:24 `_layer_sac_count = 0`, a module global, and :37-40
  `_apply_layer_sac`: `_layer_sac_count += 1`, then the block is wrapped whole where
  `_layer_sac_count % ac_freq == 0`. Nothing resets it: the count runs over every block the
  process (one pipeline rank) wraps.
- :238-247 `apply_ac` visits `model.layers.named_children()` in order (the ModuleDict of the
  kept layers, ascending), models/llama3/infra/parallelize.py:111-119 calls it on the module it
  is given, and distributed/pipeline_parallel.py:136-142 calls `parallelize_fn` on each model
  part of the rank in `model_parts` order, which is `_get_stage_indices()`'s (:451-473): stages
  r, r + pp, ... (looped schedules) or r, 2 pp - 1 - r (V schedules). Without pipelining
  train.py:254 parallelizes the one model.
So the rank's j-th block (1-based, its chunk 0's first, then chunk 1's, ...) is wrapped where
j % N == 0: per rank, not per chunk. A rank of v chunks of l layers each wraps
floor((c + 1) l / N) - floor(c l / N) layers of chunk c, floor(v l / N) in all: the same in every
chunk (l / N) only where N divides l. E.g. l = 3, v = 2, N = 2: positions 2, 4, 6, one layer of
chunk 0 (its second) and two of chunk 1 (its first and third).

torchtitan b5bcd76c (the Python-config era) has no every-N option: activation_checkpoint.py
:112-337 has FullAC (every block), SelectiveAC (per op) and MemoryBudgetAC, the config union
:332-337 selecting one of them or none (`rules.torchtitan_era.head_era` refuses the setting there).

`Layout.chunk_layers` numbers a rank's chunks in the same order (stage order, `stage_of`), so
`wrapped` reads it directly.
"""

from __future__ import annotations

from planner.inputs.layout import Layout

Chunks = tuple[range, ...]


def wrapped(chunks: Chunks, every: int) -> tuple[tuple[int, ...], ...]:
    """Per chunk of one rank (in the rank's order), the indices of the layers wrapped: the
    rank's j-th layer (1-based, across its chunks in order) where j % every == 0."""
    out, j = [], 0
    for c in chunks:
        got = []
        for layer in c:
            j += 1
            if j % every == 0:
                got.append(layer)
        out.append(tuple(got))
    return tuple(out)


def rank_wrapped(
    lay: Layout, num_layers: int, every: int
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """`wrapped` for every pipeline rank of the layout."""
    return tuple(wrapped(chunks, every) for chunks in lay.chunk_layers(num_layers))


def counts(lay: Layout, num_layers: int, every: int) -> tuple[tuple[int, ...], ...]:
    """Layers wrapped per rank and chunk."""
    return tuple(tuple(map(len, w)) for w in rank_wrapped(lay, num_layers, every))


def recomputed(chunks: Chunks, every: int) -> Chunks:
    """The rank's wrapped layers as one-layer ranges (what `ModelArch.kind_counts` reads): the
    layers run with full recompute, the rest plain; the every-N counterpart of block
    recompute's first k layers of each chunk (`rank_mix.rank_mix`)."""
    return tuple(range(i, i + 1) for w in wrapped(chunks, every) for i in w)


def last_wrapped(chunks: Chunks, every: int) -> bool:
    """Whether some chunk's last layer is wrapped. Its backward comes first and rebuilds that
    layer whole on top of all the chunk kept; a wrapped layer further in is rebuilt after the
    plain layer behind it has freed its activations (`layer_kept.recompute_working`'s
    block case, where the last layer is recomputed only in a chunk recomputed whole)."""
    ws = wrapped(chunks, every)
    return any(len(c) and w and w[-1] == c[-1] for c, w in zip(chunks, ws, strict=True))


def block_ranges(lay: Layout, chunks: Chunks) -> Chunks:
    """The layers of a rank (its `chunks`) that block full recompute runs recomputed, as
    ranges: torchtitan's every N-th of the rank where the layout has `recompute_every`
    (`recomputed`), else Megatron's first recompute_num_layers of each chunk."""
    if lay.recompute_every:
        return recomputed(chunks, lay.recompute_every)
    k = lay.recompute_num_layers
    return tuple(range(c.start, c.start + min(k, len(c))) for c in chunks)


def every_n(lay: Layout, every: int) -> Layout:
    """`lay` with torchtitan's every-N recompute: block full recompute carrying N, the models
    counting each rank's wrapped layers (`block_ranges`, `last_wrapped`)."""
    return lay.with_(
        recompute="full", recompute_method="block", recompute_num_layers=1, recompute_every=every
    )


def stand_in(lay: Layout, num_layers: int, every: int) -> Layout:
    """The layout of every-N recompute of `lay` (recompute "full"), as a plan reads it: `every_n`,
    or recompute none where no rank holds N layers (none is wrapped)."""
    ranks = lay.chunk_layers(num_layers)
    if all(sum(map(len, chunks)) < every for chunks in ranks):
        return lay.with_(recompute="none")
    return every_n(lay, every)
