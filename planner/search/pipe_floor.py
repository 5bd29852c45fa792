"""The pipeline's steady state and fill and drain, from below: what `bound.base_bound`,
`bound.below` and `variant_bound.variant_bound` add to the stage floors under the schedules
whose bubble is the stages' whole time (`bound.fill_drain`).

Below pp micro-batches torch's looped schedules (`looped_order.unfilled`) are timed in their own
order (`looped_order.looped_step`), which can be shorter than the interleaved closed form where an
early rank is the slowest (pp 4, v 2, m 2, stage times 10, 1, 1, 1 in thirds forward: 21 against
21.5): there the floor is one any such order keeps. Rank r's first op is a chunk-0 forward, after
micro-batch 0's chunk-0 forwards on ranks 0 .. r - 1 (sum_{q<r} F_q / d); it runs m t_r of ops;
its last op is a chunk-0 backward (the backwards run the chunks last first), after which that
micro-batch's chunk-0 backwards cross ranks r - 1 .. 0 (sum_{q<r} B_q / d): step >= m t_r +
sum_{q<r} t_q / d = `one_f_one_b.floor`(t, m d) / d. And micro-batch 0 alone crosses every
chunk of every rank forward and back: step >= sum_r t_r. Both are nondecreasing in every t_r and
linear in them; over every order of the ranks the least is the descending one's
(`one_f_one_b.order_free_floor`'s exchange, with (m d - 1) >= 0 in place of m - 1)."""

from __future__ import annotations

from collections.abc import Sequence

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import one_f_one_b
from planner.model.looped_order import unfilled
from planner.model.schedule import schedule_name
from planner.model.torch_schedules import schedule_microbatches


def fills(job: Job, layout: Layout) -> bool:
    """Whether the layout's schedule runs at least as many micro-batches a schedule as pipeline
    ranks, where `pipeline_floor`'s closed form holds; False for torch's looped schedules below
    pp (module docstring; of one of torchtitan's k schedules a step, `schedule_microbatches`)."""
    name = schedule_name(job, layout)
    return not unfilled(name, layout.pp, schedule_microbatches(job, layout))


def pipeline_floor(g: Sequence[float], m: int, d: int, ordered: bool, filled: bool = True) -> float:
    """No step of the schedule with fill and drain divisor d (`bound.fill_drain`) and stage
    times >= g (per micro-batch) is shorter, steady state and bubble: interleaved (d > 1),
    (m - 1/d) max_r g_r + sum_r g_r / d (`schedule.schedule_bubble`'s closed form,
    nondecreasing in every g_r as m >= 1/d); 1F1B and GPipe (d = 1), whose exact step
    `one_f_one_b.step` is less than that where an early stage is the slowest,
    `one_f_one_b.floor` with g in rank order (`ordered`), else the least over every order,
    `one_f_one_b.order_free_floor`. GPipe's closed form m max + sum - max is at least either.
    Equal stages t: (m + pp - 1) t either way, the closed form. Not `filled` (`fills`): torch's
    looped order below pp, max(sum_r g_r, that floor at m d over d) (module docstring); m may
    be the step's, k schedules of m / k each (k x a schedule's floor is no less)."""
    if d > 1 and filled:
        return (m - 1 / d) * max(g) + sum(g) / d
    out = (one_f_one_b.floor if ordered else one_f_one_b.order_free_floor)(g, m * d) / d
    return out if filled else max(out, sum(g))


def scaled_floor(
    descending: Sequence[float], worst: float, m_top: int, m: int, d: int = 1, total: float = 0.0
) -> float:
    """1F1B's (d = 1) `pipeline_floor` at m micro-batches of stage floors h_r >= g_r m_top / m,
    g `descending` (the floors at m_top, largest first: their order over the ranks unknown), and
    max_r h_r >= worst m_top / m (`bound.below`, where the spares raise the worst rank's):
    order_free_floor is linear in the stage times, so it is m_top / m of g's at m. With d > 1,
    torch's looped schedules below pp (`pipeline_floor` not filled), and sum_r h_r >= total
    m_top / m: the same, at m d over d, and at least that sum."""
    out = one_f_one_b.floor(descending, m * d) / d if descending else 0.0
    return m_top / m * max(out, m * worst, total)
