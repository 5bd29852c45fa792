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

With uneven stages each is taken at the mean F, B, W of every stage but the slowest (by F + B),
whose fill and drain it is (`v_bubble`), as `schedule.schedule_bubble` takes sum - max."""

from __future__ import annotations

from collections.abc import Callable, Sequence


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


def v_bubble(name: str, stages: Sequence[tuple[float, float]], weights: Sequence[float]) -> float:
    """The bubble of V schedule `name` from each stage's (forward, backward) and weight-gradient
    seconds: its form at the mean of every stage but the slowest (module docstring); 0 for one
    stage."""
    slow = max(range(len(stages)), key=lambda r: sum(stages[r]))
    rest = [(*stages[r], weights[r]) for r in range(len(stages)) if r != slow]
    if not rest:
        return 0.0
    f, bwd, w = (sum(col) / len(rest) for col in zip(*rest, strict=True))
    return V_BUBBLES[name](len(stages), f, bwd, w)
