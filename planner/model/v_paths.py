"""The step of a V schedule (ZBVZeroBubble, DualPipeV) over uneven ranks, exactly and cheaply: the
longest path through torch's action order (`v_schedule.rank_order`, timed as
`v_schedule.simulate_v` times it with no p2p), compiled once per (schedule, pp, m) into flat index
lists and run over each call's per-rank times.

Any m from one graph. Every rank's order is a warm-up, then iterations of one fixed pattern
(ZB-V's steady loop F, I, W of chunk 0 then of chunk 1; DualPipeV's step 4, [F0 B1] [F1 B0]),
then a tail. Iteration j of rank r runs micro-batch j + c of each of its kinds, c fixed per
(rank, kind), and a dependency (the next or previous stage, same micro-batch) goes from an
iteration to the same one or the next on a neighbouring rank. So m + K micro-batches are the order
at m with K whole iterations inserted at the same index h on every rank (the head, before it,
untouched; the tail, after it, each micro-batch + K; tests/model/test_v_paths.py checks this on
the orders themselves), and a path that crosses the inserted block on one rank c gains K t_c
(t_c = F_c + B_c, an iteration's work). At m_b = 2 pp + h + x, the order with h whole iterations
on every rank before the cut and x more than the fewest (rank 0's one) after it:

    step(m) = max_c  S_c + (m - m_b) t_c + Y_c        for m >= m_b,

S_c the time rank c's iteration h can start (the head's longest path), Y_c the longest path from
its start to the end (the tail's). Each term is a real path, so the step is never less. It is
never more where the longest path's turns from one rank to another (into the rank it stays on
through the block, out of it towards the tail's staggered ends: rank r's whole iterations end r
after rank 0's) fit in the head's h and the tail's x iterations. That bound is measured, not
proved: at h = 1, x = 0, 9 of about 220,000 random draws (pp 2-16, times with zeros and ties,
checked at two m each) fell short, by up to 0.13% of the step, each made exact by h = 2 or x = 1,
and a local search around them found none needing more; h = x = 3 leaves a margin, at about 15%
more nodes at pp 16. The brute force against `simulate_v` (tests/model/test_v_paths.py: every
small-integer time per rank, random uneven draws, m from the least torch runs to 12 pp, two
draws like those 9) finds it exact. Below m_b the whole order at m is timed. The slowest rank alone
(t_c = max t) sets the bubble at large m; a near-slowest one can set it for m up to (its detour's
excess) / (max t - t_c), which is why the bubble of uneven stages depends on m.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from planner.model.v_schedule import needs, produced, rank_order

KINDS = "FIWB"
"""Duration slots per rank: forward, input gradient, weight gradient, whole backward."""


Node = tuple[int, tuple[str, int, int] | None, tuple[str, int, int] | None]
"""(duration slot, what it completes as `v_schedule.produced` names it, what it waits for)."""

Columns = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
"""Three index lists, one entry per node."""


class Program(NamedTuple):
    """One (schedule, pp, m) order compiled: `head` timed forward, `tail` backward."""

    head: Columns
    """(prev, dep, duration slot) per head node in a topological order: its end is the larger of
    the two ends (index 0 is time 0) plus its duration; node i is index i + 1."""
    tail: Columns
    """(next, consumer, duration slot) per tail node in reverse topological order: the longest
    path from its start is its duration plus the larger of the two (index 0 is 0)."""
    entry: tuple[tuple[int, ...], ...]
    """Per rank, the head nodes its first tail action waits for (its previous action and the
    inputs of its step): S_c is the latest of their ends."""
    exit: tuple[int, ...]
    """Per rank, the tail index of its first tail action (Y_c). Both empty where not split."""


def whole_iteration_start(name: str, pp: int, rank: int, h: int) -> int:
    """Steps of rank `rank` before its iteration h (module docstring; v_schedule's phases): ZB-V's
    warm-up 2 (pp - r) - 1 + 2 r + 3 (pp - r) actions then 6 an iteration; DualPipeV's steps 1-3,
    2 (pp - r - 1) + 2 (r + 1) + 3 (pp - r - 1), then 2 an iteration (3 for the last rank's
    first, its F and B apart)."""
    if name == "ZBVZeroBubble":
        return 5 * pp - 3 * rank - 1 + 6 * h
    return 5 * pp - 3 * rank - 3 + 2 * h + (1 if rank == pp - 1 and h >= 1 else 0)


BASE_ITERATION = 3
"""h: the block goes after every rank's first 3 whole iterations (module docstring)."""
TAIL_ITERATIONS = 3
"""x: whole iterations after the block beyond the fewest (module docstring)."""


def base_microbatches(pp: int) -> int:
    """m_b: the m with h whole iterations before the cut and x + 1 after it on rank 0, which has
    the fewest, m - 2 pp + 1 (both schedules)."""
    return 2 * pp + BASE_ITERATION + TAIL_ITERATIONS


def _columns(rows: list[tuple[int, int, int]]) -> Columns:
    return tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows)


def _nodes(name: str, pp: int, m: int, rank: int) -> list[Node]:
    """Rank `rank`'s actions in order; an overlapped pair (DualPipeV) as a join (0 s, waiting
    for the backward's input), its forward (waiting for its own) and its backward, so the pair
    starts when both inputs are ready, as `simulate_v` starts it."""
    out: list[Node] = []
    for step in rank_order(name, pp, m, rank):
        if len(step) > 1:
            out.append((0, None, needs(pp, step[1], rank)))
        for a in step:
            slot = 1 + 4 * rank + KINDS.index(a.kind)
            out.append((slot, produced(pp, a, rank), needs(pp, a, rank) if a is step[0] else None))
    return out


@lru_cache(maxsize=256)
def compile_order(name: str, pp: int, m: int, split: bool) -> Program:
    """The order of `name` at pp, m as a Program: cut before iteration h if `split`, else all
    head."""
    nodes = [_nodes(name, pp, m, r) for r in range(pp)]
    cut = [len(n) for n in nodes]  # each rank's first tail node
    if split:
        for r in range(pp):  # a pair is 3 nodes: steps before h, plus 1 per pair among them
            steps = rank_order(name, pp, m, r)[: whole_iteration_start(name, pp, r, BASE_ITERATION)]
            cut[r] = sum(len(s) + (len(s) > 1) for s in steps)
    where = {n[1]: (r, i) for r in range(pp) for i, n in enumerate(nodes[r]) if n[1]}

    def dep(r: int, i: int) -> tuple[int, int] | None:
        """The other rank's node that node i of rank r waits for (an input of its own rank is
        earlier in its order, which covers it)."""
        key = nodes[r][i][2]
        if key is None:
            return None
        src = where[key]
        if src[0] == r and src[1] >= i:
            raise RuntimeError(f"{name} waits for a later action of its own rank {r}")
        return src if src[0] != r else None

    def topo(lo: list[int], hi: list[int]) -> list[tuple[int, int]]:
        """Nodes lo[r] .. hi[r] - 1 of each rank, each after its inputs."""
        out, pos = [], list(lo)
        seen = {(r, i) for r in range(pp) for i in range(lo[r])}
        while any(pos[r] < hi[r] for r in range(pp)):
            moved = False
            for r in range(pp):
                while pos[r] < hi[r] and ((d := dep(r, pos[r])) is None or d in seen):
                    seen.add((r, pos[r]))
                    out.append((r, pos[r]))
                    pos[r] += 1
                    moved = True
            if not moved:
                raise RuntimeError(f"{name} made no progress at pp {pp}, m {m}")
        return out

    head_order = topo([0] * pp, cut)
    e_at = {n: k + 1 for k, n in enumerate(head_order)}
    head = [
        (e_at[(r, i - 1)] if i else 0, e_at[d] if (d := dep(r, i)) else 0, nodes[r][i][0])
        for r, i in head_order
    ]
    tail_order = topo(cut, [len(n) for n in nodes])[::-1]
    g_at = {n: k + 1 for k, n in enumerate(tail_order)}
    consumer: dict[tuple[int, int], tuple[int, int]] = {}
    for r, i in tail_order:
        if (d := dep(r, i)) is not None:
            if d in consumer:
                raise RuntimeError(f"{name}: two other ranks' actions wait for one action")
            consumer[d] = (r, i)
    tail = [
        (g_at.get((r, i + 1), 0), g_at[consumer[(r, i)]] if (r, i) in consumer else 0, n[0])
        for r, i in tail_order
        for n in (nodes[r][i],)
    ]
    entry = []
    for r in range(pp) if split else ():
        into = [(r, cut[r] - 1)] if cut[r] else []
        first = [cut[r], cut[r] + 1] if nodes[r][cut[r]][0] == 0 else [cut[r]]  # a join: + its F
        into += [d for i in first if (d := dep(r, i)) is not None]
        entry.append(tuple(e_at[n] for n in into))
    return Program(
        _columns(head),
        _columns(tail),
        tuple(entry),
        tuple(g_at[(r, cut[r])] for r in range(pp)) if split else (),
    )


def _durations(fwd: Sequence[float], bwd: Sequence[float], wgt: Sequence[float]) -> list[float]:
    out = [0.0]
    for f, b, w in zip(fwd, bwd, wgt, strict=True):
        out += [f / 2, (b - w) / 2, w / 2, b / 2]  # each chunk half the rank's
    return out


def least_microbatches(name: str, pp: int) -> int:
    """The fewest micro-batches at which `name`'s closed form over equal stages holds
    (`v_bubble.V_BUBBLES`): ZB-V 2 pp - 1 (below it torch leaves empty slots, and `v_step`
    times the order), DualPipeV 2 pp (below it torch raises, `torch_schedules.refusal`)."""
    return 2 * pp - 1 if name == "ZBVZeroBubble" else 2 * pp


def _head_ends(prog: Program, dur: list[float]) -> list[float]:
    e = [0.0]
    put = e.append
    for a, b, s in zip(*prog.head, strict=True):
        x, y = e[a], e[b]
        put((x if x > y else y) + dur[s])
    return e


@lru_cache(maxsize=4096)
def carrier_terms(
    name: str, pp: int, fwd: tuple[float, ...], bwd: tuple[float, ...], wgt: tuple[float, ...]
) -> tuple[float, ...]:
    """S_c + Y_c per rank c at m_b (module docstring): step(m) = max_c of it + (m - m_b) t_c for
    every m >= m_b. Kept per stage times: layouts that differ only in m (data parallelism,
    batch) share them."""
    dur = _durations(fwd, bwd, wgt)
    prog = compile_order(name, pp, base_microbatches(pp), True)
    e = _head_ends(prog, dur)
    g = [0.0]
    put = g.append
    for a, b, s in zip(*prog.tail, strict=True):
        x, y = g[a], g[b]
        put((x if x > y else y) + dur[s])
    ends = zip(prog.entry, prog.exit, strict=True)
    return tuple(max(e[i] for i in into) + g[out] for into, out in ends)


def v_step(
    name: str,
    pp: int,
    m: int,
    fwd: Sequence[float],
    bwd: Sequence[float],
    wgt: Sequence[float],
) -> float:
    """Seconds of one step of V schedule `name` over m micro-batches, each rank's forward, whole
    backward and its weight-gradient part per micro-batch (`simulate_v`'s step with no p2p time,
    module docstring)."""
    base = base_microbatches(pp)
    if m < base:
        return max(_head_ends(compile_order(name, pp, m, False), _durations(fwd, bwd, wgt)))
    terms = carrier_terms(name, pp, tuple(fwd), tuple(bwd), tuple(wgt))
    return max(a + (m - base) * (f + b) for a, f, b in zip(terms, fwd, bwd, strict=True))
