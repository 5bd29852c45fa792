"""The checkpoint interval: Young's and Daly's estimates, Daly's complete wall-time model (with
the asynchronous save's lag and a run's final save), and the whole-step interval that minimises
it (planner/ops/resilience.py puts a job's figures in).

Young (1974):  tau = sqrt(2 delta M)
Daly (2006):   tau = sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + delta / (9 x 2M)) - delta
               for delta < 2M, else tau = M
("A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22 (2006) 303-312, the perturbation solution). Both estimate where
a continuous tau minimises the complete model; a job checkpoints every whole number of steps,
and rounding the estimate to the nearest step is not always the best whole step (it can move
goodput the wrong way as failures rise or storage slows), so the interval is found among whole
steps: `best_whole_steps` over each span where the model's wall time is unimodal in tau.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def young_interval(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 delta M), the first-order optimum compute time between
    checkpoints that each cost delta, under Poisson failures with mean time M."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006), higher-order estimate:
    sqrt(2 delta M)(1 + sqrt(delta/2M)/3 + delta/(9 x 2M)) - delta for delta < 2M, else M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def daly_wall_time(
    solve_s: float,
    tau_s: float,
    delta_s: float,
    mtbf_s: float,
    restart_s: float,
    lag_s: float = 0.0,
) -> float:
    """Daly (2006), complete model: expected wall-clock time to finish `solve_s` of work with a
    checkpoint costing delta after every tau of work, restart R, exponential failures of mean M:
    M e^(R/M) (e^((tau + delta)/M) - 1) solve / tau.

    With a `lag` (an asynchronous save: the last `lag` of each span of tau + delta is training
    under the write, lost with the checkpoint at an interruption, so it blocks delta - lag and
    restarts in R + lag) the same model, M e^((R + lag)/M) (e^((tau + delta - lag)/M) - 1) solve
    / tau, is spelled M e^(R/M) (e^((tau + delta)/M) - e^(lag/M)) solve / tau: the same float
    operations as without the lag but a subtraction, so never above it in floating point."""
    return (
        mtbf_s
        * math.exp(restart_s / mtbf_s)
        * (math.expm1((tau_s + delta_s) / mtbf_s) - math.expm1(lag_s / mtbf_s))
        * solve_s
        / tau_s
    )


def final_write_s(mtbf_s: float, restart_s: float, lag_s: float) -> float:
    """The expected wall time a run's last asynchronous save adds to `daly_wall_time`: its
    write has no training after it to hide under, so the last segment is a synchronous one,
    M e^(R/M) (e^((tau + delta)/M) - 1), the steady-state segment plus M e^(R/M) (e^(lag/M) - 1)
    (= lag without failures). Megatron-LM saves at the end of training (d98e8a64
    megatron/training/training.py:2056) and its exit waits for the async write
    (`maybe_finalize_async_save(blocking=True, terminate=True)`, :2130)."""
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(lag_s / mtbf_s)


def best_whole_steps(cost: Callable[[int], float], lo: int, hi: int) -> int:
    """The k in [lo, hi] of least cost(k), for a cost unimodal over [lo, hi] (falling, then
    rising; an inf tail, past the largest float, counts as rising), by ternary search: of two
    inner points the higher one and what lies beyond it cannot hold the least. Compared at
    points a third of the bracket apart, not at neighbours (whose costs a float cannot tell
    apart where an interval is many steps), so the cost found is the least to within a few
    float roundings."""
    seen: dict[int, float] = {}

    def at(k: int) -> float:
        if k not in seen:
            seen[k] = cost(k)
        return seen[k]

    while hi - lo > 2:
        third = (hi - lo) // 3
        m1, m2 = lo + third, hi - third
        if at(m1) < at(m2):
            hi = m2 - 1
        elif at(m1) > at(m2):
            lo = m1 + 1
        elif at(m1) == math.inf:  # both past the largest float: any finite cost is before
            hi = m1
        else:
            lo, hi = m1, m2
    return min(range(lo, hi + 1), key=at)


def least_wall_time(delta_s: float, mtbf_s: float, restart_s: float) -> float:
    """A lower bound on `daly_wall_time` per unit of work (1 / goodput) over every interval
    tau > 0, for segments that each block at least delta: e^(R/M) (1 + sqrt(2 delta / M) +
    delta / M). From e^x - 1 >= x + x^2 / 2 (x >= 0),
        M (e^((tau + delta)/M) - 1) / tau >= 1 + delta/tau + tau/2M + delta/M + delta^2/(2 M tau)
    and delta/tau + tau/2M >= 2 sqrt(delta/2M) = sqrt(2 delta/M) (arithmetic and geometric
    means), the last term dropped. With a lag (an asynchronous save) the model is
    M e^((R + lag)/M) (e^((tau + delta' - lag)/M) - 1) / tau, whose exponents are no smaller
    than R and tau + H for the copy H alone (delta' = H + C, lag = min(C, tau)): the bound at
    delta = H holds it. A run's last write only adds (`final_write_s`)."""
    return math.exp(restart_s / mtbf_s) * (
        1.0 + math.sqrt(2.0 * delta_s / mtbf_s) + delta_s / mtbf_s
    )
