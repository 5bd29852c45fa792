"""A layout's pipeline split, from the fields that decide it (`Layout.split_key`): each virtual
stage's layers, each rank's chunks of decoder layers, the rank holding the MTP layers; remembered
per key (the search asks for the stages of thousands of layouts that share a split)."""

from __future__ import annotations

from functools import lru_cache

from planner.inputs import pipeline_layout


def split_evenly(n: int, parts: int) -> list[int]:
    """n items in `parts` parts as even as possible, the first parts one more."""
    base, extra = divmod(n, parts)
    return [base + (1 if c < extra else 0) for c in range(parts)]


SplitKey = tuple[int, int, tuple[int, ...] | None, tuple[str, ...] | None, bool, bool, bool]
"""(pp, vpp, pipeline_layers, pipeline_layout, account for embedding, account for loss, V)."""


def stage_of(pp: int, v: bool, k: int) -> tuple[int, int]:
    """(rank, chunk) of virtual stage k: chunk k // pp of rank k % pp, or under the V placement
    (`Layout.v_stages`) in the odd chunks of rank pp - 1 - k % pp (back from the last rank)."""
    c, r = divmod(k, pp)
    return (pp - 1 - r if v and c % 2 else r), c


@lru_cache(maxsize=4096)
def split_stages(key: SplitKey, num_layers: int, mtp_layers: int) -> tuple[str, ...]:
    pp, vpp, pipeline_layers, layout, embedding, loss, v = key
    if layout is not None:
        return layout
    e, lo = int(embedding), int(loss)
    given = pipeline_layers is not None
    per_rank = list(pipeline_layers or ()) if given else split_evenly(num_layers + e + lo, pp)
    chunks = [split_evenly(n, vpp) for n in per_rank]
    # the embedding and the loss take a layer's place in the first and the last stage
    chunks[0][0] -= e
    chunks[stage_of(pp, v, pp * vpp - 1)[0]][-1] -= lo
    placed = [stage_of(pp, v, k) for k in range(pp * vpp)]  # stages_of reads k at [k % pp]
    looped = [[max(chunks[r][c], 0) for r, c in placed[q::pp]] for q in range(pp)]
    return pipeline_layout.stages_of(looped, mtp_layers)


@lru_cache(maxsize=4096)
def split_chunk_layers(key: SplitKey, num_layers: int) -> tuple[tuple[range, ...], ...]:
    stages = split_stages(key, num_layers, 0)
    pp, v = key[0], key[6]
    out: list[list[range]] = [[] for _ in range(pp)]
    start = 0
    for k, stage in enumerate(stages):  # stage order: each rank's chunks come in chunk order
        n = stage.count("t")
        out[stage_of(pp, v, k)[0]].append(range(start, start + n))
        start += n
    return tuple(tuple(r) for r in out)


@lru_cache(maxsize=4096)
def split_mtp_rank(key: SplitKey, num_layers: int, mtp_layers: int) -> int:
    stages = split_stages(key, num_layers, mtp_layers)
    k = next(k for k, s in enumerate(stages) if "m" in s)
    return stage_of(key[0], key[6], k)[0]
