"""The bubbles of torch's two V schedules, ZBVZeroBubble and DualPipeV, from torch's own action
order (pytorch/pytorch 00722e64 torch/distributed/pipelining/schedules.py, each class's
`_calculate_single_rank_operations`, rebuilt in `planner.model.v_schedule.rank_order`) rather
than from their papers' formulas: the step is the longest path through that order (an action
runs after the one before it on its rank and the one it reads, `v_schedule.simulate_v` with no
p2p time), one rank's whole work plus a detour through the others, and each closed form below is
the largest detour, exact against the simulation for equal stages (tests/model/test_zbv_bubble.py,
tests/model/test_dualpipev_bubble.py). p stages; F, B, W a stage's forward, whole backward and
its weight-gradient part per micro-batch (each of its two chunks half of them), I = B - W its
input-gradient part.

  ZBVZeroBubble (m >= 2p - 1)   max(max(F, I) + (p-2) W,  (p-1)(I + X),
                                    (2p-3) F - (p-2) I + (p-1) X + Y) / 2,
                                X = max(I - 2W, 0), Y = max(F - I - W, 0): (p - 1) chunk forwards
                                at F = I = W, where the ZB-V paper's (p-1)(F+B-3W)/2 has none
  DualPipeV (m >= 2p)           (max((p-2) F + (p-1) I, 2 (p-1) F) + (p-1) max(I - W, 0)) / 2,
                                the overlapped forward-and-backward pair taken as F + B (what
                                its overlap hides is communication, which planner does not model
                                there); the DualPipe README's (PP/2-1)(F&B+B-3W) at F = I = W

With uneven stages (`v_bubble`) the bubble is the step of `planner.model.v_paths`, the same
longest path through the same order at the layout's own m, exact against `simulate_v`, less m
times the slowest rank's F + B: max_c S_c + (m - m_b) t_c + Y_c, S and Y timed once from the
order at m_b = 2p + 6, the whole order below it. The mean of the stages but the slowest, which
this took before, overstated it wherever the slowest rank's own detours are short (Llama 3.1 8B
on 8 H100, TP 2, PP 4, m 32, layers 7/9/8/8 a rank: 61 ms for ZB-V where the order idles 40 ms,
113 ms for DualPipeV against 55 ms)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from planner.model.v_paths import base_microbatches, carrier_terms, least_microbatches, v_step


def zbv_bubble(p: int, fwd: float, bwd: float, wgt: float) -> float:
    """Idle seconds of torch's ScheduleZBVZeroBubble over p equal stages (p >= 2) and m >= 2p - 1
    micro-batches (module docstring). Its eight longest detours (tests/model/test_zbv_bubble.py
    enumerates them) are the same for every such m; e.g. (p-1) i (i a chunk's I): the first
    micro-batch's chunk-1 input gradient crosses ranks 0 .. p-1 while rank p-1 has run only its
    2p forwards (warm-up: 1, p-1 pairs, then chunk 1's F, I, W), plus (p-1)(i - 2w) where the
    last one's chunk-0 input gradient crosses back to rank 0 while rank p-1 has only its 2p-1
    deferred W left (cool-down: p-1 pairs of I without W). They group as the max of three."""
    i = bwd - wgt
    x = max(i - 2 * wgt, 0.0)
    y = max(fwd - i - wgt, 0.0)
    return (
        max(
            max(fwd, i) + (p - 2) * wgt,
            (p - 1) * (i + x),
            (2 * p - 3) * fwd - (p - 2) * i + (p - 1) * x + y,
        )
        / 2
    )


def dualpipev_bubble(p: int, fwd: float, bwd: float, wgt: float) -> float:
    """Idle seconds of torch's ScheduleDualPipeV over p equal stages (p >= 2) and m >= 2p
    micro-batches (module docstring): the fill, (p-2) forwards and (p-1) input gradients or
    2 (p-1) forwards of half a stage, and the drain's (p-1) input gradients beyond their weight
    gradients."""
    i = bwd - wgt
    return (max((p - 2) * fwd + (p - 1) * i, 2 * (p - 1) * fwd) + (p - 1) * max(i - wgt, 0.0)) / 2


V_BUBBLES: dict[str, Callable[[int, float, float, float], float]] = {
    "ZBVZeroBubble": zbv_bubble,
    "DualPipeV": dualpipev_bubble,
}
"""torch's V schedules -> their bubble over p equal stages."""


def v_bubble(
    name: str,
    stages: Sequence[tuple[float, float]],
    weights: Sequence[float],
    m: int | None = None,
) -> float:
    """The bubble of V schedule `name` over m micro-batches from each stage's (forward, backward)
    and weight-gradient seconds (module docstring): the step less m times the slowest stage's
    F + B. The closed form where the stages are equal and m is at least `least_microbatches`
    (it holds for every such m); m None the limit of many micro-batches, where only the slowest
    stages' detours count. ZB-V below 2p - 1 micro-batches (torch idles in the empty slots of
    the missing ones) is the order's own step, `v_paths.v_step`; DualPipeV below 2p, which torch
    refuses (`torch_schedules.refusal`), is priced at 2p. 0 for one stage."""
    pp = len(stages)
    if pp < 2:
        return 0.0
    least = least_microbatches(name, pp)
    if m is not None and name == "DualPipeV":
        m = max(m, least)
    if (m is None or m >= least) and all(
        (*stages[r], weights[r]) == (*stages[0], weights[0]) for r in range(pp)
    ):
        return V_BUBBLES[name](pp, *stages[0], weights[0])
    fwd = [f for f, _ in stages]
    bwd = [b for _, b in stages]
    top = max(f + b for f, b in stages)
    if m is None:
        terms = carrier_terms(name, pp, tuple(fwd), tuple(bwd), tuple(weights))
        slowest = [a for a, (f, b) in zip(terms, stages, strict=True) if f + b == top]
        return max(max(slowest) - base_microbatches(pp) * top, 0.0)
    return max(v_step(name, pp, m, fwd, bwd, weights) - m * top, 0.0)  # >= 0 but for rounding
