"""The MAP fit of chosen constants to measured step times (Gauss-Newton on log step time, in
fitting coordinates; `planner.calibration.fit` says what is minimised and why), robust to a run
far off (Cauchy's weights)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from planner.calibration.measured import MeasuredRun
from planner.calibration.selection import OBSERVATION_SD
from planner.model import calibratable, cost
from planner.model.calibratable import BY_KEY

STEP = 0.02
"""Finite-difference step in log(constant) (a linear constant's: a twentieth of its spread)."""
ITERATIONS = 8
"""Gauss-Newton (and IRLS) iterations at most; they stop once a step moves every constant by
less than 5% of its finite-difference step."""
BACKTRACKS = 6
"""Halvings of a Gauss-Newton step that raises the objective, at most, before the fit stops."""
OBJECTIVE_TOLERANCE = 0.01
"""A fit for `select`'s objective stops once a step lowers it by less than this: sets are
told apart by Akaike's 2 (`selection.MIN_GAIN`), two hundred times more."""
ROBUST_SCALE = 0.1
"""c of the Cauchy loss (`robust_weights`): a run 10% off weighs half; about the uncalibrated
model's median error on its held-out dev set (7.0%, `fit.DEV_SET_ERROR`)."""


def robust_weights(resid: np.ndarray) -> np.ndarray:
    """Iteratively reweighted least squares for Cauchy's loss, log(1 + (r/c)²) with c =
    ROBUST_SCALE: a run within a few c counts almost fully, a run far off (a log of another
    program, an unmodelled setting, 3x the model's time) counts as good as not, so it can
    neither drag the constants nor bring in one of its own."""
    return 1 / (1 + (resid / ROBUST_SCALE) ** 2)


def to_theta(key: str, value: float) -> float:
    """A constant in fitting coordinates: its log, or itself for an additive one (`linear`)."""
    return value if BY_KEY[key].linear else math.log(value)


def from_theta(key: str, theta: float) -> float:
    return theta if BY_KEY[key].linear else math.exp(theta)


def _step(key: str) -> float:
    c = BY_KEY[key]
    return c.spread / 20 if c.linear else STEP


def log_times(runs: Sequence[MeasuredRun], theta: Mapping[str, float]) -> np.ndarray:
    with calibratable.calibrated({k: from_theta(k, v) for k, v in theta.items()}):
        return np.array(
            [math.log(cost.estimate(r.plan.job, r.plan.require_layout()).step_time_s) for r in runs]
        )


def jacobian(
    runs: Sequence[MeasuredRun], theta: dict[str, float], keys: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    base = log_times(runs, theta)
    cols = []
    for k in keys:
        shifted = dict(theta, **{k: theta[k] + _step(k)})
        cols.append((log_times(runs, shifted) - base) / _step(k))
    return base, np.array(cols).T.reshape(len(runs), len(keys))


def clamp(key: str, theta: float) -> float:
    c = BY_KEY[key]
    return min(max(theta, to_theta(key, c.lo)), to_theta(key, c.hi))


def descend(
    runs: Sequence[MeasuredRun],
    measured: np.ndarray,
    theta0: dict[str, float],
    free: list[str],
    start: tuple[np.ndarray, np.ndarray],
    held: np.ndarray | None = None,
) -> tuple[dict[str, float], float]:
    """Gauss-Newton's MAP fit of the `free` constants from `theta0`: (θ, its objective).
    `start`: the log times and the free constants' Jacobian at `theta0`. `held`: weights held
    throughout and the Jacobian kept at `theta0` (`select`'s objective, for many sets: a step
    costs one evaluation of the runs, not one per constant more; the objective is still the
    model's own at the θ reached), else Cauchy's weights and the Jacobian again at each step."""
    theta = dict(theta0)
    prior = np.diag([1 / BY_KEY[k].spread ** 2 for k in free])

    def objective(th: dict[str, float], resid: np.ndarray, weights: np.ndarray) -> float:
        dev = np.array([th[k] - theta0[k] for k in free])
        return float(weights @ resid**2) / OBSERVATION_SD**2 + float(dev @ prior @ dev)

    base, jac = start
    weights = robust_weights(base - measured) if held is None else held
    now = objective(theta, base - measured, weights)
    for i in range(ITERATIONS if free else 0):
        if i and held is None:
            base, jac = jacobian(runs, theta, free)
            weights = robust_weights(base - measured)
            now = objective(theta, base - measured, weights)
        resid = base - measured
        dev = np.array([theta[k] - theta0[k] for k in free])
        a = jac.T @ (weights[:, None] * jac) / OBSERVATION_SD**2 + prior
        g = jac.T @ (weights * resid) / OBSERVATION_SD**2 + prior @ dev
        delta = -np.linalg.solve(a, g)
        # a step that does not lower the objective is halved (up to BACKTRACKS times): the
        # model has kinks (a GEMM efficiency above the part's matmul ceiling changes nothing,
        # `layer_time`), where a full Gauss-Newton step jumps across and back
        for _ in range(BACKTRACKS):
            trial = dict(theta)
            for j, k in enumerate(free):
                trial[k] = clamp(k, theta[k] + delta[j])
            times = log_times(runs, trial)
            value = objective(trial, times - measured, weights)
            if value <= now:
                break
            delta = delta / 2
        else:
            break  # no step lowers it: theta is the fit
        step = np.array([trial[k] - theta[k] for k in free])
        if held is not None and step.any():  # Broyden's update: what the step measured
            jac = jac + np.outer(times - base - jac @ step, step) / float(step @ step)
        theta, base, now, before = trial, times, value, now
        if float(np.max(np.abs(delta / np.array([_step(k) for k in free])))) < 0.05:
            break
        if held is not None and before - now < OBJECTIVE_TOLERANCE:
            break
    return theta, now


def gauss_newton(
    runs: Sequence[MeasuredRun],
    measured: np.ndarray,
    theta0: dict[str, float],
    free: list[str],
    start: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[dict[str, float], np.ndarray, np.ndarray, np.ndarray]:
    """The MAP fit of the `free` constants (robustly weighted, `descend`; `start` its log
    times and Jacobian at `theta0`, where known): (θ, residuals, Jacobian of the free constants
    at θ, weights)."""
    start = start or jacobian(runs, theta0, free)
    theta = descend(runs, measured, theta0, free, start)[0]
    base, jac = jacobian(runs, theta, free)
    resid = base - measured
    return theta, resid, jac, robust_weights(resid)
