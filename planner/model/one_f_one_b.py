"""Megatron-LM's 1F1B step with uneven stages, exactly.

`schedule.pipeline_time`'s m max_r t_r + (sum_r t_r - max_r t_r) is exact when the last stage is
the slowest (or the stages are equal); where an earlier stage is the slowest, its warm-up forwards
overlap the later stages' fill and drain, and the closed form overstates the step (Llama 3.1 8B tp2
pp4 dp2 m 16, layers 10,8,8,6: +3.8%). `step` times Megatron's own op order instead
(forward_backward_pipelining_without_interleaving, Megatron-LM d98e8a64
megatron/core/pipeline_parallel/schedules.py:2277-2278 the warm-up, pp - rank - 1 forwards at
most m; then one forward, one backward; then the cool-down backwards), each op when its rank is free
and its input is ready (the forward from the previous rank, the gradient from the next), in
O(pp x m) along an op order found once per (pp, m), and keeps the closed form where it is exact.

Lower bound (`floor`, the search's): rank r starts no op before micro-batch 0's forward crossed
ranks 0 .. r - 1, runs m (F_r + B_r) of work, and its last op (micro-batch m - 1's backward) must
then cross ranks r - 1 .. 0: step >= m t_r + sum_{q<r} t_q for every r, each term nondecreasing
in every stage time."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache


def closed_form(times: Sequence[float], m: int) -> float:
    """m max_r t_r + sum_r t_r - max_r t_r: exact when the last stage is the slowest."""
    slowest = max(times)
    return m * slowest + sum(times) - slowest


def floor(times: Sequence[float], m: int) -> float:
    """max_r (m t_r + sum_{q<r} t_q): no 1F1B step (nor any order's) with stage times >= `times`
    is shorter (module docstring)."""
    out, before = 0.0, 0.0
    for t in times:
        out = max(out, m * t + before)
        before += t
    return out


def order_free_floor(times: Sequence[float], m: int) -> float:
    """The least `floor` over every order of the stages `times`: the floor with them in
    descending order. Exchange argument: where a stage p precedes a longer q, swapping them turns
    the pair's terms max(S + m p, S + p + m q) into max(S + m q, S + q + m p), no more as
    (m - 1)(q - p) >= 0, and leaves the other terms as they were (Jackson's rule for the
    largest tail, the tails (m - 1) t). So no 1F1B step of stage times >= some order of `times`
    is shorter, wherever the ranks' order is unknown."""
    return floor(sorted(times, reverse=True), m)


def _order(pp: int, m: int, rank: int) -> list[tuple[int, int]]:
    """Rank's ops as (0 forward / 1 backward, micro-batch), Megatron's 1F1B order."""
    warm = min(pp - rank - 1, m)
    ops = [(0, i) for i in range(warm)]
    for k in range(m - warm):
        ops += [(0, warm + k), (1, k)]
    return ops + [(1, k) for k in range(m - warm, m)]


@lru_cache(maxsize=32)
def _program(pp: int, m: int) -> tuple[tuple[int, int, int], ...]:
    """Every op of the step in an order that times each after its inputs, as (index of the
    rank's previous op, index of the op whose output it needs, duration slot 2 rank + kind);
    -1: none (the sentinel after the last op, 0). Found by sweeping the ranks until every op
    is placed, each rank as far as its inputs allow; the order depends on pp and m alone."""
    orders = [_order(pp, m, r) for r in range(pp)]
    at = [([-1] * m, [-1] * m) for _ in range(pp)]  # each op's index in prog once placed
    prog: list[tuple[int, int, int]] = []
    pos, last = [0] * pp, [-1] * pp
    while len(prog) < 2 * m * pp:
        before = len(prog)
        for r in range(pp):
            while pos[r] < 2 * m:
                kind, i = orders[r][pos[r]]
                if kind == 0:
                    need = at[r - 1][0][i] if r > 0 else -1
                    if r > 0 and need < 0:
                        break
                else:
                    need = at[r + 1][1][i] if r < pp - 1 else at[r][0][i]
                    if need < 0:
                        break
                prog.append((last[r], need, 2 * r + kind))
                last[r] = at[r][kind][i] = len(prog) - 1
                pos[r] += 1
        if len(prog) == before:  # pragma: no cover - Megatron's 1F1B is deadlock-free
            raise RuntimeError("1F1B order made no progress")
    return tuple(prog)


def simulate_1f1b(fwd: Sequence[float], bwd: Sequence[float], m: int) -> float:
    """The step of Megatron's 1F1B with per-rank forward and backward seconds per micro-batch
    (point-to-point already in them: its sends block): each op when its rank is free and its
    input is ready, along `_program`'s order (the longest path through the ops)."""
    dur = [t for pair in zip(fwd, bwd, strict=True) for t in pair]
    prog = _program(len(dur) // 2, m)
    end = [0.0] * (len(prog) + 1)  # end[-1]: the sentinel, never written
    for n, (prev, need, slot) in enumerate(prog):
        a, b = end[prev], end[need]
        end[n] = (a if a > b else b) + dur[slot]
    return max(end)


def step(fwd: Sequence[float], bwd: Sequence[float], m: int) -> float:
    """Megatron's 1F1B step (steady state plus fill and drain) from each rank's forward and
    backward per micro-batch: the closed form where the last stage is the slowest (equal
    stages among them), else the simulation (`simulate_1f1b`), remembered by its stage times."""
    times = [f + b for f, b in zip(fwd, bwd, strict=True)]
    if times[-1] >= max(times):
        return closed_form(times, m)
    return _simulated(tuple(fwd), tuple(bwd), m)


@lru_cache(maxsize=4096)
def _simulated(fwd: tuple[float, ...], bwd: tuple[float, ...], m: int) -> float:
    return simulate_1f1b(fwd, bwd, m)
