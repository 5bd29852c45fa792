"""Megatron-FSDP's double buffer (`Layout.fsdp_double_buffer`) as Megatron-LM d98e8a64 pools it
(pgb: megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py): an allocator
for the gathered parameters (with one for the MXFP8 transposes) and one for the gradient buckets
(pgb:2524-2576), each of two buffers (UB_BUFFER_NUM, :2526), kept once allocated. The
FixedPoolAllocator (`pool`, `fixed_pools`, `apart`) pools the most numerous group of units with
equal buckets and leaves the other units to the backup allocator; the MaxPoolAllocator
(--megatron-fsdp-max-pool-double-buffer, `Layout.fsdp_max_pool`: pgb:2528-2532) pools every unit
(`max_pooled`). Bytes by group: `megatron_fsdp_bytes.Price`; `megatron_fsdp` places the pools in
the step."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from planner.model.megatron_fsdp_bytes import Pair, Price, Unit

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


def apart(units: list[Unit], prices: Sequence[Price], field: str) -> float:
    """Bytes of the `field` buffers (`Price`'s "grad" or "pool") the backup allocator holds
    beside the fixed pool (`fixed_pools`) for one chunk's units (pgb:842-848): the units outside
    the pooled group (`pool`), two of the largest at most, as the prefetch and the queue stop
    at two units (pgb:4420-4432, :3956-3978). A bucket that is not distributed never asks the
    pool or the backup allocator (`megatron_fsdp_bytes`): its bytes are 0."""
    pooled_shape = pool(units, prices, field)[0]
    if pooled_shape is None:
        return 0.0
    outside = [
        cost(u, getattr(q, field))
        for u, q in zip(units, prices, strict=True)
        if shape(u, getattr(q, field)) != pooled_shape
    ]
    return sum(sorted(outside, reverse=True)[:2])


def fixed_pools(per_chunk: Sequence[list[Unit]], prices: Sequence[Sequence[Price]]) -> float:
    """Bytes of the FixedPoolAllocator's gradient and parameter pools on one GPU, held all step
    once grown: every model chunk's allocator names the same two buffers per dtype in the one
    global memory buffer (pgb:855-863, utils.py:777-795), so each grows to the largest pooled
    unit of any chunk in that dtype (a chunk's pooled shape's bytes an element)."""
    total = 0.0
    for field in ("grad", "pool"):
        top: dict[tuple[float, ...], float] = {}
        for units, p in zip(per_chunk, prices, strict=True):
            pooled_shape, one = pool(units, p, field)
            if pooled_shape is not None:
                key = tuple(b for _, b in pooled_shape)
                top[key] = max(top.get(key, 0.0), 2 * one)
        total += sum(top.values())
    return total


def running(units: list[Unit], prices: Sequence[Price]) -> float:
    """The most a unit's own backward adds beside the pools (`Price.pool_running`) among
    `units`."""
    return max((cost(u, p.pool_running) for u, p in zip(units, prices, strict=True)), default=0.0)


def max_pooled(units: Sequence[Unit], prices: Sequence[Price], field: str) -> float:
    """Bytes of the `field` buffers (`Price`'s "grad" or "pool") the MaxPoolAllocator holds for
    `units`, every one of them pooled (pgb:1071-1072; no backup allocator for a unit). It sorts
    each unit's buckets of one dtype from the largest (pgb:991-993; on a tie in size the later
    bucket, the experts', first), assigns the k-th to offset k of that dtype (:1009-1023) and
    names one buffer per (buffer of two, dtype, offset) (:960-967, :1160-1161), which grows to
    the largest request (utils.py:777-795): two buffers of, per dtype and offset, the largest
    bucket's bytes there. A bucket that is not distributed keeps its offset but never asks for
    it (`megatron_fsdp_bytes`: priced 0). Dtypes: the gradients' one communication dtype
    (pgb:2545-2552; planner prices every group's gradient bucket in `Job.grad_comm_bytes`); the
    parameters' that of the unit's `Price` (`chunk_prices` gives one to the units in bf16 and
    one to the quantised units, whose groups are "float8", pgb:1795-1798)."""
    maxima: dict[Hashable, list[float]] = {}
    for u, p in zip(units, prices, strict=True):
        price = getattr(p, field)
        top = maxima.setdefault(p if field == "pool" else None, [])
        buckets = sorted(
            ((x, i, x * b) for i, (x, b) in enumerate(zip(u, price, strict=True)) if x),
            reverse=True,
        )
        for k, (_, _, bytes_) in enumerate(buckets):
            if k == len(top):
                top.append(0.0)
            top[k] = max(top[k], bytes_)
    return 2 * sum(sum(top) for top in maxima.values())


def max_pools(per_chunk: Sequence[Sequence[Unit]], prices: Sequence[Sequence[Price]]) -> float:
    """Bytes of the MaxPoolAllocator's gradient and parameter pools on one GPU (`max_pooled`),
    held all step once grown: every model chunk's allocators name the same buffers in the one
    global memory buffer (utils.py:798-803), so each grows to the largest request of any chunk."""
    units = [u for chunk in per_chunk for u in chunk]
    flat = [p for chunk in prices for p in chunk]
    return max_pooled(units, flat, "grad") + max_pooled(units, flat, "pool")
