"""Fit the model's refittable constants (`planner.model.calibratable`) to measured runs.

Step time. Let θ be the natural logs of the time constants and r_i(θ) = log(predicted_i /
measured_i) for run i. The fit minimises

    Σ_i r_i² / σ²  +  Σ_k (θ_k − θ0_k)² / s_k²

where θ0 are the shipped defaults, s_k each constant's prior spread (`Constant.spread`: how
far a cluster plausibly sits from the default) and σ = `OBSERVATION_SD` the model's residual
on a run once its constants are right. That is the maximum a posteriori estimate under a
log-normal prior; Gauss-Newton solves it, with the Jacobian by finite differences in θ.

Which constants the runs determine: at the defaults, the posterior covariance of θ is
(JᵀJ/σ² + diag(1/s²))⁻¹. A constant is determined when the runs halve its prior spread
(posterior sd <= `DETERMINED_RATIO` x s_k); the others keep their defaults and are reported
as such. Only determined constants are fitted. Constants the runs move together (a GEMM
efficiency and a per-step overhead on runs of one size) share what one of them could explain
and neither halves its spread, so neither is claimed.

Leave-one-out error: for the linearised fit, the residual of run i when it is left out is
r_i / (1 − h_ii), h = the fit's hat matrix J A⁻¹ Jᵀ / σ² (the PRESS identity of ridge
regression), so no refit per run is needed. The expected error band is their root mean square.
With a single run nothing can be left out; the band is then the uncalibrated model's error on
planner's dev set (`DEV_SET_ERROR`).

Memory: allocated = E + a·A per measured stage, with A the activations and transient buffers
the model derives and E the rest (states counted exactly, buffers); `a` is
`activation_scale`. It is fitted in closed form on relative errors with the same prior, and
determined by the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planner.calibration.measured import MeasuredRun
from planner.model import calibratable, cost, memory
from planner.model.calibratable import BY_KEY, CONSTANTS, DEFAULTS

OBSERVATION_SD = 0.03
"""σ: the relative step-time residual of the model on one run once its constants are right
(planner's fit rows: median 3.3%, benchmarks/fidelity.py), and of a memory prediction."""
DETERMINED_RATIO = 0.5
"""A constant is determined when the runs shrink its prior spread to at most this fraction."""
STEP = 0.02
"""Finite-difference step in log(constant)."""
ITERATIONS = 6
DEV_SET_ERROR = (0.035, 0.184)
"""(median, worst) |relative error| of the uncalibrated step time on planner's dev set of
published runs (benchmarks/fidelity.py, all rows): the band quoted when one run leaves nothing
out."""
TIME_KEYS = tuple(c.key for c in CONSTANTS if c.kind == "time")
MEMORY_KEY = "activation_scale"


@dataclass(frozen=True)
class RunFit:
    """One run before and after the fit."""

    run: MeasuredRun
    predicted_default_s: float
    predicted_s: float
    leave_one_out: float | None
    """Relative step-time error of the run when the fit leaves it out (None: one run)."""
    stage: int | None = None
    measured_allocated: float | None = None
    predicted_allocated_default: float | None = None
    predicted_allocated: float | None = None


@dataclass(frozen=True)
class Fit:
    values: dict[str, float]
    determined: dict[str, bool]
    relative_sd: dict[str, float]
    """Posterior standard deviation of each constant, relative (at the defaults for those not
    determined: their prior spread, narrowed by the runs)."""
    runs: tuple[RunFit, ...]
    band: float
    """Expected relative step-time error after calibration."""
    band_basis: str


def _log_times(runs: Sequence[MeasuredRun], theta: Mapping[str, float]) -> np.ndarray:
    with calibratable.calibrated({k: math.exp(v) for k, v in theta.items()}):
        return np.array(
            [math.log(cost.estimate(r.plan.job, r.plan.require_layout()).step_time_s) for r in runs]
        )


def _jacobian(
    runs: Sequence[MeasuredRun], theta: dict[str, float], keys: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    base = _log_times(runs, theta)
    cols = []
    for k in keys:
        shifted = dict(theta, **{k: theta[k] + STEP})
        cols.append((_log_times(runs, shifted) - base) / STEP)
    return base, np.array(cols).T.reshape(len(runs), len(keys))


def _posterior_sd(jac: np.ndarray, spreads: np.ndarray) -> np.ndarray:
    precision = jac.T @ jac / OBSERVATION_SD**2 + np.diag(1 / spreads**2)
    return np.sqrt(np.diag(np.linalg.inv(precision)))


def _clamp(key: str, theta: float) -> float:
    c = BY_KEY[key]
    return min(max(theta, math.log(c.lo)), math.log(c.hi))


def _fit_time(
    runs: Sequence[MeasuredRun], theta0: dict[str, float]
) -> tuple[dict[str, float], dict[str, bool], dict[str, float], np.ndarray, np.ndarray]:
    measured = np.array([math.log(r.step_time_s) for r in runs])
    spreads = np.array([BY_KEY[k].spread for k in TIME_KEYS])
    _, jac0 = _jacobian(runs, theta0, TIME_KEYS)
    sd0 = _posterior_sd(jac0, spreads)
    determined = {k: bool(sd0[i] <= DETERMINED_RATIO * spreads[i]) for i, k in enumerate(TIME_KEYS)}
    free = [k for k in TIME_KEYS if determined[k]]
    theta = dict(theta0)
    prior = np.diag([1 / BY_KEY[k].spread ** 2 for k in free])
    jac = np.zeros((len(runs), 0))
    for _ in range(ITERATIONS if free else 0):
        base, jac = _jacobian(runs, theta, free)
        resid = base - measured
        dev = np.array([theta[k] - theta0[k] for k in free])
        a = jac.T @ jac / OBSERVATION_SD**2 + prior
        g = jac.T @ resid / OBSERVATION_SD**2 + prior @ dev
        delta = -np.linalg.solve(a, g)
        for i, k in enumerate(free):
            theta[k] = _clamp(k, theta[k] + delta[i])
        if float(np.max(np.abs(delta))) < 1e-3:
            break
    resid = _log_times(runs, theta) - measured
    sd = {k: float(sd0[i]) for i, k in enumerate(TIME_KEYS)}
    if free:
        _, jac = _jacobian(runs, theta, free)
        a = jac.T @ jac / OBSERVATION_SD**2 + prior
        post = np.sqrt(np.diag(np.linalg.inv(a)))
        sd.update({k: float(post[i]) for i, k in enumerate(free)})
    return theta, determined, sd, resid, jac


def _leave_one_out(resid: np.ndarray, jac: np.ndarray, free: Sequence[str]) -> np.ndarray:
    if jac.shape[1] == 0:
        return resid
    prior = np.diag([1 / BY_KEY[k].spread ** 2 for k in free])
    a = jac.T @ jac / OBSERVATION_SD**2 + prior
    hat = np.einsum("ij,jk,ik->i", jac, np.linalg.inv(a), jac) / OBSERVATION_SD**2
    return resid / np.maximum(1 - hat, 1e-6)


def _stage_allocated(run: MeasuredRun, stage: int, scale: float) -> float:
    with calibratable.calibrated({MEMORY_KEY: scale}):
        rep = memory.estimate(run.plan.job, run.plan.require_layout())
    return rep.stages[stage].allocated


def _fit_memory(runs: Sequence[MeasuredRun]) -> tuple[float, bool, float, list[tuple]]:
    """(activation_scale, determined, relative sd, per run (stage, measured, E, A))."""
    rows = []
    for r in runs:
        peak = r.peak()
        if peak is None:
            continue
        e_plus_a = _stage_allocated(r, peak.stage, 1.0)
        a = (_stage_allocated(r, peak.stage, 2.0) - e_plus_a) / 1.0
        rows.append((r, peak.stage, peak.max_allocated_bytes, e_plus_a - a, a))
    spread = BY_KEY[MEMORY_KEY].spread
    default = DEFAULTS[MEMORY_KEY]
    if not rows:
        return default, False, spread, []
    x = np.array([a / m for _, _, m, _, a in rows])
    y = np.array([1 - e / m for _, _, m, e, _ in rows])
    precision = float(x @ x) / OBSERVATION_SD**2 + 1 / (spread * default) ** 2
    sd = 1 / math.sqrt(precision) / default
    determined = sd <= DETERMINED_RATIO * spread
    value = default
    if determined:
        value = (float(x @ y) / OBSERVATION_SD**2 + 1 / (spread**2 * default)) / precision
        c = BY_KEY[MEMORY_KEY]
        value = min(max(value, c.lo), c.hi)
    return value, determined, sd, rows


def fit(runs: Sequence[MeasuredRun]) -> Fit:
    """The constants fitted to `runs` (see the module docstring)."""
    if not runs:
        raise ValueError("fit needs at least one run")
    theta0 = {k: math.log(DEFAULTS[k]) for k in TIME_KEYS}
    theta, determined, sd, resid, jac = _fit_time(runs, theta0)
    free = [k for k in TIME_KEYS if determined[k]]
    loo = _leave_one_out(resid, jac, free) if len(runs) > 1 else None
    scale, mem_determined, mem_sd, mem_rows = _fit_memory(runs)
    values = {k: math.exp(v) for k, v in theta.items()} | {MEMORY_KEY: scale}
    before = np.exp(_log_times(runs, theta0))
    after = np.exp(resid) * np.array([r.step_time_s for r in runs])
    by_run = {id(r): (stage, m, e, a) for r, stage, m, e, a in mem_rows}
    out = []
    for i, r in enumerate(runs):
        mem = by_run.get(id(r))
        out.append(
            RunFit(
                run=r,
                predicted_default_s=float(before[i]),
                predicted_s=float(after[i]),
                leave_one_out=None if loo is None else math.expm1(float(loo[i])),
                stage=mem[0] if mem else None,
                measured_allocated=mem[1] if mem else None,
                predicted_allocated_default=(mem[2] + mem[3] * DEFAULTS[MEMORY_KEY])
                if mem
                else None,
                predicted_allocated=(mem[2] + mem[3] * scale) if mem else None,
            )
        )
    if loo is None:
        band, basis = (
            DEV_SET_ERROR[0],
            "planner's dev-set median error (one run: none to leave out)",
        )
    else:
        band = math.expm1(float(np.sqrt(np.mean(loo**2))))
        basis = f"leave-one-out RMS over {len(runs)} runs"
    return Fit(
        values=values,
        determined=determined | {MEMORY_KEY: mem_determined},
        relative_sd={k: math.expm1(v) for k, v in sd.items()} | {MEMORY_KEY: mem_sd},
        runs=tuple(out),
        band=band,
        band_basis=basis,
    )
