"""Pipeline schedules: micro-batches, bubbles and the step time of a pipeline.

p = pipeline stages, m = micro-batches per pipeline per step, v = virtual chunks per rank.
m = global_batch / (dp x micro_batch_size) (Megatron `num_microbatches_calculator.py`).

Bubble (Narayanan et al. 2021, arXiv:2104.04473; ecosystem.md 3.3): with 1F1B each micro-batch
passes every stage once on the way in (fill) and once on the way out (drain). With per-micro-batch
stage times t_r (forward + backward) the step takes

    T = m * max_r t_r + (sum_r t_r - max_r t_r) / v,

i.e. the slowest stage sets the steady-state pace and the fill/drain is the time the other stages
take, shortened v-fold by the interleaved schedule (each chunk is 1/v of a stage). With equal stages
the bubble is (p-1)/(v*m) of the ideal time m*t: the textbook (p-1)/m for 1F1B and
(p-1)/(v*m) for interleaved 1F1B; as a fraction of the whole step, (p-1)/(v*m + p-1).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.layout import Layout


def num_microbatches(global_batch_size: int, dp: int, micro_batch_size: int) -> int:
    """Micro-batches per pipeline per step: global_batch / (dp x micro_batch_size)."""
    return max(global_batch_size // (dp * micro_batch_size), 1)


def bubble_ratio(pp: int, m: int, vpp: int = 1) -> float:
    """Bubble time / ideal time for equal stages: (p-1)/(v*m)."""
    return (pp - 1) / (vpp * m)


def bubble_fraction(pp: int, m: int, vpp: int = 1) -> float:
    """Bubble time / total step time for equal stages: (p-1)/(v*m + p-1)."""
    return (pp - 1) / (vpp * m + pp - 1)


def pipeline_time(stage_times: Sequence[float], m: int, vpp: int = 1) -> tuple[float, float]:
    """(steady, bubble) seconds of one step, from each stage's time per micro-batch.

    steady = m * max(t), bubble = (sum(t) - max(t)) / v."""
    slowest = max(stage_times)
    return m * slowest, (sum(stage_times) - slowest) / vpp


def stage_ranges(num_layers: int, lay: Layout) -> list[range]:
    """The decoder layers of each pipeline rank (Layout.stage_layers: given or even split)."""
    out, start = [], 0
    for n in lay.stage_layers(num_layers):
        out.append(range(start, start + n))
        start += n
    return out
