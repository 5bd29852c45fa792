"""Point-to-point messages the interleaved schedule receives before the op that needs them next:
with a micro-batch group g larger than pp, rank 0 holds the last rank's wrapped-round outputs,
and the last rank rank 0's wrapped-round gradients, several table entries ahead.

NVIDIA/Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py: the first rank keeps
g - pp + 1 forward receive buffers and the last rank as many backward ones (:1555-1563); the
leading rank of a direction posts each wrapped receive at iteration k for the ending rank's
table entry k - (pp - 1) (`recv_tensor_from_previous_stage`, :1285-1332; none for k < pp - 1, nor
where that entry is of the last chunk, which sends nothing on; none at the final iteration,
:1594-1595, :1788-1789, :1993-1994), with --overlap-p2p-communication (on by default with
interleaving: arguments.py:3118-3120 store_false) right after that iteration's forward
(`pp_post_forward`, :1771-1826) or backward (`pp_post_backward`, :1847-1888), and appends it to
the next chunk's inputs (gradients). The entry that consumes it is that micro-batch's next chunk,
g entries later (L in the last group of L micro-batches; the table, :989-1003); a backward
mirrors the table (:1248). Each receive is one micro-batch's hidden states at a chunk boundary:
[s / cp (/ tp under sequence parallelism), b, h] in pipeline_dtype (:1184-1187).

The receive of the rank's next forward (backward) every rank holds whatever g; `early_counts`
counts the others: the messages beyond it, alive until their entry comes. At g = pp none."""

from __future__ import annotations

from functools import lru_cache


def _table(m: int, vpp: int, group: int) -> list[tuple[int, int]]:
    """Megatron's schedule table: (micro-batch, chunk) per entry (`schedule.op_order`)."""
    return [
        (i, c)
        for first in range(0, m, group)
        for c in range(vpp)
        for i in range(first, m if first + group >= m else first + group)
    ]


@lru_cache(maxsize=1 << 12)
def early_counts(pp: int, vpp: int, m: int, group: int) -> tuple[int, ...]:
    """Messages rank 0 holds beyond its next forward's input when n of its forwards are done
    (entry n), n = 0 .. m x vpp; the same for the last rank's gradients when n of its backwards
    are done (the table mirrored: the same posting iterations and consuming entries). A receive
    posted at iteration k counts from the end of op k until its consumer runs, excluding the
    one op n itself needs."""
    total = m * vpp
    counts = [0] * (total + 1)
    if vpp < 2 or pp < 2:
        return tuple(counts)
    table = _table(m, vpp, group)
    index = {entry: k for k, entry in enumerate(table)}
    for k in range(pp - 1, total - 1):
        i, c = table[k - (pp - 1)]
        if c == vpp - 1:  # the ending rank's last chunk sends nothing on
            continue
        consumer = index[(i, c + 1)]
        # alive after op k (n = k + 1 done) until op `consumer` starts; early while
        # the next op (n) is not its consumer
        for n in range(k + 1, consumer):
            counts[n] += 1
    return tuple(counts)
