"""A chunk's activation bytes per layer kind where some of its layers run unquantised among FP8
or NVFP4 ones (`blended`: Megatron's bf16 first / last layers, `bf16_layers.bf16_ranges`), as
`planner.model.stage_activations` counts a rank that holds both."""

from __future__ import annotations

from dataclasses import astuple

from planner.inputs.arch import ModelArch
from planner.model.fine_offload import Moved
from planner.model.layer_kept import PerLayer
from planner.model.schedule import Chunks


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
        plain.names or quantised.names,
    )
