"""The pipeline's steady state and fill and drain, from below: what `bound.base_bound`,
`bound.below` and `bound.variant_bound` add to the stage floors under the schedules whose bubble
is the stages' whole time (`bound.fill_drain`)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.model import one_f_one_b


def pipeline_floor(g: Sequence[float], m: int, d: int, ordered: bool) -> float:
    """No step of the schedule with fill and drain divisor d (`bound.fill_drain`) and stage
    times >= g (per micro-batch) is shorter, steady state and bubble: interleaved (d > 1),
    (m - 1/d) max_r g_r + sum_r g_r / d (`schedule.schedule_bubble`'s closed form,
    nondecreasing in every g_r as m >= 1/d); 1F1B and GPipe (d = 1), whose exact step
    `one_f_one_b.step` is less than that where an early stage is the slowest,
    `one_f_one_b.floor` with g in rank order (`ordered`), else the least over every order,
    `one_f_one_b.order_free_floor`. GPipe's closed form m max + sum - max is at least either.
    Equal stages t: (m + pp - 1) t either way, the closed form."""
    if d > 1:
        return (m - 1 / d) * max(g) + sum(g) / d
    return one_f_one_b.floor(g, m) if ordered else one_f_one_b.order_free_floor(g, m)


def scaled_floor(descending: Sequence[float], worst: float, m_top: int, m: int) -> float:
    """1F1B's (d = 1) `pipeline_floor` at m micro-batches of stage floors h_r >= g_r m_top / m,
    g `descending` (the floors at m_top, largest first: their order over the ranks unknown), and
    max_r h_r >= worst m_top / m (`bound.below`, where the spares raise the worst rank's):
    order_free_floor is linear in the stage times, so it is m_top / m of g's at m."""
    out = one_f_one_b.floor(descending, m) if descending else 0.0
    return m_top / m * max(out, m * worst)
