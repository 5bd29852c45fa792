"""Megatron-FSDP's double buffer (`Layout.fsdp_double_buffer`) as Megatron-LM d98e8a64 pools it
(pgb: megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py): a
FixedPoolAllocator for the gathered parameters (with one for the MXFP8 transposes) and one for
the gradient buckets (pgb:2524-2576), each of two buffers of the most numerous group of units
with equal buckets, kept once allocated; the other units go to the backup allocator. Bytes by
group: `megatron_fsdp_bytes.Price`; `megatron_fsdp` places the pools in the step."""

from __future__ import annotations

from collections.abc import Sequence

from planner.model.megatron_fsdp_bytes import ELEMENTS, Pair, Price, Unit

Shape = tuple[tuple[float, float], ...]
"""A unit's buckets' (size, bytes an element), the empty ones left out (`shape`)."""


def cost(unit: Unit, price: Pair) -> float:
    """A unit's bytes at `price`."""
    return unit[0] * price[0] + unit[1] * price[1]


def shape(unit: Unit, price: Pair = (1.0, 1.0)) -> Shape:
    """A unit's buckets' (size, bytes an element) (its dense group's, its experts'), the empty
    ones left out: FixedPoolAllocator pools units equal in both (`_is_two_bucket_group_equal`
    compares sizes and dtypes, pgb:742-754)."""
    return tuple((x, b) for x, b in zip(unit, price, strict=True) if x)


def pool(units: list[Unit], prices: Sequence[Price], field: str) -> tuple[Shape | None, float]:
    """The double buffer's pooled shape for the `field` buffers (`Price`'s "grad" or "pool"):
    the most numerous group of units whose buckets are equal in number, size and dtype, the
    first in unit order where counts tie (FixedPoolAllocator, pgb:676-698); and one pooled
    unit's bytes. (None, 0) without units."""
    shapes: dict[Shape, list[float]] = {}
    for u, p in zip(units, prices, strict=True):
        shapes.setdefault(shape(u, getattr(p, field)), []).append(cost(u, getattr(p, field)))
    if not shapes:
        return None, 0.0
    most = max(shapes, key=lambda k: len(shapes[k]))
    return most, shapes[most][0]


def double_buffered(
    units: list[Unit], prices: Sequence[Price] | None = None, field: str = "grad"
) -> float:
    """Bytes of the `field` buffers (`Price`'s "grad" or "pool"; elements without `prices`)
    alive at once under double buffering: the fixed pool's two buffers of the most numerous
    group of units whose buckets are equal in number, size and dtype (FixedPoolAllocator,
    pgb:676-698: the first such group in unit order where counts tie; `_is_two_bucket_group_equal`,
    :742-754), kept once allocated (:855-860), and beside it the units outside that group,
    allocated apart by the backup allocator (:842-848): two of the largest of them at most, as
    the prefetch and the queue stop at two units (pgb:4420-4432, :3956-3978). A bucket that is
    not distributed never asks the pool (`megatron_fsdp_bytes`), so its share is never
    allocated: its bytes are 0."""
    p = prices if prices is not None else [ELEMENTS] * len(units)
    pooled_shape, pooled = pool(units, p, field)
    if pooled_shape is None:
        return 0.0
    apart = [
        cost(u, getattr(q, field))
        for u, q in zip(units, p, strict=True)
        if shape(u, getattr(q, field)) != pooled_shape
    ]
    return 2 * pooled + sum(sorted(apart, reverse=True)[:2])


def running(units: list[Unit], prices: Sequence[Price]) -> float:
    """The most a unit's own backward adds beside the pools (`Price.pool_running`) among
    `units`."""
    return max((cost(u, p.pool_running) for u, p in zip(units, prices, strict=True)), default=0.0)
