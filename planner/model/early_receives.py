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
counts the others: the messages beyond it, alive until their entry comes. At g = pp none.
`held_counts` counts that receive and the other pipeline tensors every rank holds at its
activations' peak (the output sent, the last input gradient; 1F1B's too), `transient` those
only a blocking exchange holds."""

from __future__ import annotations

from functools import lru_cache

from planner.model.megatron_order import schedule_table, warmup


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
    table = schedule_table(m, vpp, group)
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


@lru_cache(maxsize=1 << 12)
def held_counts(pp: int, vpp: int, rank: int, m: int, group: int) -> tuple[int, ...]:
    """Pipeline messages beyond `early_counts` that rank `rank` of Megatron's schedule holds
    from the end of its steady-state forward k to the start of the backward after it (the
    moment its activations peak), k = 0 .. S - 1 (S steady iterations); `transient` adds those
    only the blocking exchange holds. Each is one [s / cp (/ tp), b, h] tensor.

    1F1B (`forward_backward_pipelining_without_interleaving`, no p2p overlap: arguments.py
    :1010-1012, batched blocking exchanges): from iteration 1 on, the previous iteration's
    output gradient (`output_tensor_grad`, :2416, held until the next exchange returns) and
    input gradient (`input_tensor_grad`, :2436, held until the next backward returns): one each
    but on the last rank (no gradient in) and the first (none out).

    Interleaved 1F1B with --overlap-p2p-communication (the default, arguments.py:3118-3120):
    after `pp_post_forward` (:1771-1826) the forward's output (sent and waited, its data freed
    only at the next `pp_pre_forward`, :1768), the next forward's input (received there, or
    earlier on the first rank: no receive into its chunk 0), the gradient the next backward
    takes (posted by the previous `pp_post_backward`, :1847-1888, or the warm-up's last, :1708-1728)
    and the previous backward's input gradient (the loop's `input_tensor_grad`, returned at
    :1888, reassigned only after this iteration's backward): none where the last rank's last
    chunk sends no output or takes no gradient, nor where the first rank's chunk 0 has no input
    gradient."""
    total = m * vpp
    warm = warmup(pp, vpp, rank, m * vpp, group)
    first, last = rank == 0, rank == pp - 1
    if vpp == 1:
        both = (not last) + (not first)
        return tuple(both if k else 0 for k in range(total - warm))
    table = schedule_table(m, vpp, group)
    out = []
    for k in range(total - warm):
        f = warm + k
        nxt = f + 1 < total and (not first or table[f + 1][1] > 0)
        output = not (last and table[f][1] == vpp - 1)
        grad = not (last and table[k][1] == 0)  # backward k runs chunk vpp - 1 - table's
        prev = k > 0 and not (first and table[k - 1][1] == vpp - 1)
        out.append(nxt + output + grad + prev)
    return tuple(out)


def transient(pp: int, vpp: int, rank: int, m: int, group: int) -> int:
    """Messages beyond `held_counts` a blocking exchange holds at the activations' peak: 1F1B's
    `send_forward_recv_backward` (:2416) allocates the new output gradient while the output
    (freed after it, :2423) and the previous gradient are alive: two but on the last rank; with
    every forward in the warm-up (no steady state) the last forward's output while it is sent
    (:2362-2368, :1655-1660), one. Interleaved with the p2p overlap: none beyond `held_counts`."""
    if rank == pp - 1:
        return 0
    if m * vpp <= warmup(pp, vpp, rank, m * vpp, group):
        return 1
    return 2 if vpp == 1 else 0
