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
only a blocking exchange holds.

Without the overlap (--no-overlap-p2p-communication, `Layout.overlap_p2p_comm` false) the
steady state runs each iteration's forward and backward first and then one batched, blocking
exchange (:1900-1949, `send_forward_backward_recv_forward_backward`): the receives of iteration k
are posted after its backward, so none is alive at its forward's peak; the warm-up's and the
cool-down's exchanges block in both modes (:1633-1660, :2053-2058).

Under the EP all-to-all overlap (--overlap-moe-expert-parallel-comm) each steady iteration is one
merged forward and backward (combined_1f1b.py:138-512, common model_chunk_schedule_plan.py
:500-610): the forward builds its chunk while the backward releases another, so the activations
stay at their peak, and at its end, with the p2p overlap, `post_forward` and `post_backward` run
inside it (:596-607) while the backward's output gradient is still referenced by
combined_forward_backward_step and the loop still holds the previous input gradient: two more
than `held_counts` counts for the plain schedule. Its extra warm-up forward
(schedules.py:966-970) only moves the peak one entry on: the state the plain schedule holds after
its forward k the merged one holds at the end of its iteration k - 1."""

from __future__ import annotations

from functools import lru_cache
from itertools import accumulate
from operator import add

from planner.model.megatron_order import schedule_table, warmup


@lru_cache(maxsize=1 << 12)
def early_counts(
    pp: int, vpp: int, m: int, group: int, steady_from: int | None = None
) -> tuple[int, ...]:
    """Messages rank 0 holds beyond its next forward's input when n of its forwards are done
    (entry n), n = 0 .. m x vpp; the same for the last rank's gradients when n of its backwards
    are done (the table mirrored: the same posting iterations and consuming entries). A receive
    posted at iteration k counts from the end of op k until its consumer runs, excluding the
    one op n itself needs. `steady_from`: rank 0's warm-up count without the p2p overlap, from
    which on its receives are posted after the iteration's backward (`_posted_after`)."""
    total = m * vpp
    if vpp < 2 or pp < 2 or group <= pp:
        # a receive posted at iteration k for entry k - (pp - 1) of micro-batch i is consumed
        # by (i, c + 1), L entries later (L: the size of i's group, at most `group`), so it is
        # early at no n in [k + 1, k - pp + 1 + L): none where the group is at most pp
        return (0,) * (total + 1)
    table = schedule_table(m, vpp, group)
    index = {entry: k for k, entry in enumerate(table)}
    starts = [0] * (total + 1)  # receives alive from entry n on, less those gone by it
    for k in range(pp - 1, total - 1):
        i, c = table[k - (pp - 1)]
        if c == vpp - 1:  # the ending rank's last chunk sends nothing on
            continue
        consumer = index[(i, c + 1)]
        # alive after op k (n = k + 1 done) until op `consumer` starts; early while
        # the next op (n) is not its consumer: each n in [_posted_after, consumer) counts it
        start = _posted_after(k, steady_from)
        if consumer > start:
            starts[start] += 1
            starts[consumer] -= 1
    return tuple(accumulate(starts))


def _posted_after(k: int, steady_from: int | None) -> int:
    """The forwards done at the first peak a receive posted at iteration k is alive at: k + 1
    (right after forward k: the overlap, and every warm-up exchange), or k + 2 where it is
    posted after iteration k's backward (a steady iteration without the overlap: alive from the
    next forward's peak on)."""
    return k + 2 if steady_from is not None and k >= steady_from else k + 1


@lru_cache(maxsize=1 << 12)
def held_counts(
    pp: int, vpp: int, rank: int, m: int, group: int, overlap: bool = True, merged: bool = False
) -> tuple[int, ...]:
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
    gradient.

    Without the overlap (`overlap` false; module docstring) the next forward's input is received
    only after the backward: none but on rank 0, where a wrapped input posted before iteration k
    is there (with g above pp). With the EP overlap (`merged`, module docstring) the peak after
    iteration k - 1 (k >= 1) holds that iteration's output gradient and the input gradient
    before it too; without the p2p overlap as well, the larger of those two and the exchange's
    next input and gradient; at k = 0, the end of its warm-up (one forward longer), the output
    or the first gradient."""
    total = m * vpp
    warm = warmup(pp, vpp, rank, m * vpp, group)
    first, last = rank == 0, rank == pp - 1
    n = total - warm  # steady iterations
    if n <= 0:
        return ()
    if vpp == 1:
        both = (not last) + (not first)
        return tuple(both if k else 0 for k in range(n))
    if overlap and not merged:  # the plain schedule with the p2p overlap: a closed form
        return _overlapped(pp, vpp, rank, m, group, warm, n)
    table = schedule_table(m, vpp, group)
    index = {entry: k for k, entry in enumerate(table)}

    def grad(k: int) -> bool:  # backward k's output gradient (it runs chunk vpp - 1 - table's)
        return not (last and table[k][1] == 0)

    def input_grad(k: int) -> bool:  # backward k's input gradient, sent on
        return k >= 0 and not (first and table[k][1] == vpp - 1)

    def early(k: int, by: int) -> bool:  # entry k's wrapped receive posted at iteration `by`
        i, c = table[k]  # or before (the leading rank's: posted at (i, c - 1)'s + pp - 1)
        return c > 0 and index[(i, c - 1)] + pp - 1 <= by

    out = []
    for k in range(n):
        f = warm + k
        nxt = f + 1 < total and (not first or table[f + 1][1] > 0)
        output = not (last and table[f][1] == vpp - 1)
        sent = output + input_grad(k - 1)
        if merged and not k:  # the end of its warm-up: its last exchange batches the three
            # without the overlap (:1633-1651), else frees its output before the first gradient
            # is posted (:1655-1728) or, every forward in its warm-up, received (:1962-1970)
            batched = not overlap and f + 1 < total
            out.append(nxt + (output + grad(0) if batched else max(output, grad(0))))
        elif merged:  # still referenced as the merged op ends: its gradient, the input gradient
            held = grad(k - 1) + input_grad(k - 2)  # before it
            if overlap:
                out.append(sent + grad(k) + nxt + held)
            else:  # that moment (a leading rank's next receive in already at g above pp), or
                # the exchange after it
                held += (first and nxt and early(f + 1, f - 1)) + (last and early(k, k - 2))
                out.append(sent + max(held, grad(k) + nxt))
        elif overlap or not (nxt and first):  # (no next input; without the overlap not yet in)
            out.append(sent + grad(k) + (nxt and overlap))
        else:  # rank 0's wrapped input: there if posted before iteration f (at g above pp)
            out.append(sent + grad(k) + early(f + 1, f - 1))
    return tuple(out)


def _overlapped(
    pp: int, vpp: int, rank: int, m: int, group: int, warm: int, n: int
) -> tuple[int, ...]:
    """`held_counts` of an interleaved rank with the p2p overlap and no EP merge (its loop's
    `sent + grad(k) + nxt` branch), n >= 1 steady iterations after `warm` warm-up forwards."""
    total = m * vpp
    first, last = rank == 0, rank == pp - 1
    if not first and not last:  # each of the four but the first's prev and the last's next
        return (2,) if n == 1 else (3, *(4,) * (n - 2), 3)
    # steady forward k (f = warm + k): the next forward's input but after the step's last
    # forward (on the first rank none into chunk 0), the forward's output (none from the last
    # rank's last chunk), backward k's gradient (it runs chunk vpp - 1 - table's: none into the
    # last rank's), the previous backward's input gradient but before the first (none out of
    # the first rank's chunk 0): each a 0 / 1 per entry, from the table's chunks (`_marks`)
    above_0, below_top = _marks(m, vpp, group)  # chunk > 0 (so not 0), chunk < vpp - 1
    nxt = (above_0[warm + 1 : total] if first else (1,) * (n - 1)) + (0,)
    output = below_top[warm:total] if last else (1,) * n
    grad = above_0[:n] if last else (1,) * n
    prev = (0,) + (below_top[: n - 1] if first else (1,) * (n - 1))
    return tuple(map(add, map(add, nxt, output), map(add, grad, prev)))


@lru_cache(maxsize=1 << 10)
def _marks(m: int, vpp: int, group: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per entry of the schedule table (`megatron_order.schedule_table`), 1 where its chunk is
    above 0, and 1 where it is below vpp - 1, else 0: what `held_counts` reads of the table,
    for every rank alike. Each group of L micro-batches runs chunks 0 .. vpp - 1, L entries
    each."""
    above: list[int] = []
    below: list[int] = []
    for first in range(0, m, group):
        size = min(group, m - first)
        above += [0] * size + [1] * (size * (vpp - 1))
        below += [1] * (size * (vpp - 1)) + [0] * size
    return tuple(above), tuple(below)


def transient(pp: int, vpp: int, rank: int, m: int, group: int) -> int:
    """Messages beyond `held_counts` a blocking exchange holds at the activations' peak: 1F1B's
    `send_forward_recv_backward` (:2416) allocates the new output gradient while the output
    (freed after it, :2423) and the previous gradient are alive: two but on the last rank; with
    every forward in the warm-up (no steady state) the last forward's output while it is sent
    (:2362-2368, :1655-1660), one. Interleaved: none beyond `held_counts`, with the p2p overlap
    or without it (its batched exchange runs after the backward has released a chunk, which
    keeps more than the two messages it adds)."""
    if rank == pp - 1:
        return 0
    if m * vpp <= warmup(pp, vpp, rank, m * vpp, group):
        return 1
    return 2 if vpp == 1 else 0
