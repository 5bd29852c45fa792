"""Fit the model's refittable constants (`planner.model.calibratable`) to measured runs.

Step time. Let θ be the time constants in fitting coordinates (each one's natural log; the
additive per-step overhead as itself, `Constant.linear`) and r_i(θ) = log(predicted_i /
measured_i) for run i. The fit minimises

    Σ_i r_i² / σ²  +  Σ_k (θ_k − θ0_k)² / s_k²

where θ0 are the shipped defaults, s_k each constant's prior spread (`Constant.spread`: how
far a cluster plausibly sits from the default) and σ = `OBSERVATION_SD` the model's residual
on a run once its constants are right. That is the maximum a posteriori estimate under a
log-normal prior (normal for the overhead); Gauss-Newton solves it, with the Jacobian by
finite differences in θ (`planner.calibration.gauss_newton`).

Which constants the runs determine: `selection.select`, at the defaults (of every set of
constants whose prior spreads the runs halve, the one whose fit, `descend` with the weights
held, leaves the least objective plus Akaike's 2 per constant; one the runs cannot tell from
another keeps its default, as the other does). The others keep their defaults and are reported
as such; only the chosen are fitted, in the order `select` gives them.

Leave-one-out error: up to `REFIT_RUNS` runs, by its definition: each run left out, the
selection and the fit run again on the others, and the run predicted with their constants
(`_refit_left_out`; a run that alone decides which constants the logs determine moves the
others' selection: five logs whose PRESS band said 0.7% refit at 8.5%). Beyond that, for the
linearised fit, the residual of run i when it is left out is r_i / (1 − h_ii), h = the fit's
hat matrix J A⁻¹ Jᵀ / σ² (the PRESS identity of ridge regression), no refit per run. Either way
never less than the run's own residual with it in (the linearisation extrapolates past what the
model can reach: a cluster faster than a GEMM efficiency at its part's matmul ceiling stayed 18%
off after the fit, while the linearised left-out errors said 1-4%). The expected error band is
their root mean square.
With a single run nothing can be left out; the band is then the uncalibrated model's error on
planner's dev set (`DEV_SET_ERROR`).

Memory: allocated = E + a·A per measured stage, with A the activations and transient buffers
the model derives and E the rest (states counted exactly, buffers), taken as the tangent at
the default scale (a stage whose peak is the optimizer step's gradient copies has A of its
transient buffers alone); `a` is `activation_scale`. It is fitted in closed form on relative
errors with the same prior, and determined by the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from planner.calibration.gauss_newton import (
    ITERATIONS,
    descend,
    from_theta,
    gauss_newton,
    jacobian,
    log_times,
    robust_weights,
    to_theta,
)
from planner.calibration.measured import MeasuredRun
from planner.calibration.selection import DETERMINED_RATIO, OBSERVATION_SD, TIME_KEYS, select
from planner.model import calibratable, memory
from planner.model.calibratable import BY_KEY, DEFAULTS

SELECTION_ROUNDS = 3
"""Rounds of selecting and fitting (see `_fit_time`)."""
REFIT_RUNS = 16
"""Runs up to which the left-out errors are refits (`_refit_left_out`: n fits of n - 1 runs,
about 0.3 s for 10 runs of the functional tests on a 2-core machine, n² as n grows); beyond,
the PRESS shortcut."""
DEV_SET_ERROR = (0.070, 0.343)
"""(median, worst) |relative error| of the uncalibrated throughput on planner's held-out dev set
(benchmarks/fidelity.py: the published runs not fitted and the MLPerf submissions, 72 rows;
the functional tests' tiny models apart): the band quoted when one run leaves nothing out."""
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
    order: tuple[str, ...] = ()
    """The time constants fitted, in the order `select` gives them (what each alone takes off
    the objective, most first)."""
    inseparable: dict[str, str] = field(default_factory=dict)
    """Constants kept at their defaults because the runs cannot tell them from another (key:
    that other), though fitting them would have lowered the objective enough."""


class _TimeFit(NamedTuple):
    theta: dict[str, float]
    free: list[str]
    """The fitted constants in `select`'s order: the order of `jac`'s columns."""
    inseparable: dict[str, str]
    determined: dict[str, bool]
    sd: dict[str, float]
    resid: np.ndarray
    """log(predicted / measured) per run with the fitted constants."""
    resid0: np.ndarray
    """The same with the shipped constants."""
    jac: np.ndarray
    """The free constants' Jacobian, rows times the root of the robust weights."""


def _fit_time(runs: Sequence[MeasuredRun], theta0: dict[str, float]) -> _TimeFit:
    """Select, fit, and select again with the weights the fit gives (a run far off at the
    defaults but not after the fit is not an outlier), until the selection holds."""
    measured = np.array([math.log(r.step_time_s) for r in runs])
    base0, jac0 = jacobian(runs, theta0, TIME_KEYS)
    weights = robust_weights(base0 - measured)
    free: list[str] | None = None
    theta, resid, jac = dict(theta0), base0 - measured, np.zeros((len(runs), 0))
    inseparable: dict[str, str] = {}

    def start(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return base0, jac0[:, [TIME_KEYS.index(k) for k in keys]]

    for _ in range(SELECTION_ROUNDS):
        root, held = np.sqrt(weights), weights

        def objective(keys: list[str], held: np.ndarray = held) -> float:
            return descend(runs, measured, theta0, keys, start(keys), held)[1]

        chosen, inseparable = select(jac0 * root[:, None], root * (base0 - measured), objective)
        if chosen == free:
            break
        free = chosen
        theta, resid, jac, weights = gauss_newton(runs, measured, theta0, free, start(free))
    free = free or []
    sd = {k: BY_KEY[k].spread for k in TIME_KEYS}
    if free:
        prior = np.diag([1 / BY_KEY[k].spread ** 2 for k in free])
        a = jac.T @ (weights[:, None] * jac) / OBSERVATION_SD**2 + prior
        post = np.sqrt(np.diag(np.linalg.inv(a)))
        sd.update({k: float(post[i]) for i, k in enumerate(free)})
    determined = {k: k in free for k in TIME_KEYS}
    return _TimeFit(
        theta,
        free,
        inseparable,
        determined,
        sd,
        resid,
        base0 - measured,
        jac * np.sqrt(weights)[:, None],
    )


def _leave_one_out(
    resid: np.ndarray, jac: np.ndarray, free: Sequence[str], dev: np.ndarray
) -> np.ndarray:
    """Each run's residual when the fit leaves it out: r_i / (1 − h_ii) (PRESS), with r the
    residual at the linearised optimum (one more Newton step from where Gauss-Newton stopped:
    a run that alone pins a constant has h_ii near 1, and would magnify what the stopping
    tolerance left). `jac`: the weighted Jacobian (rows times the root of the robust weights);
    `dev`: the free constants' distance from their defaults."""
    if jac.shape[1] == 0:
        return resid
    prior = np.diag([1 / BY_KEY[k].spread ** 2 for k in free])
    inv = np.linalg.inv(jac.T @ jac / OBSERVATION_SD**2 + prior)
    root_w = np.sqrt(robust_weights(resid))
    g = jac.T @ (root_w * resid) / OBSERVATION_SD**2 + prior @ dev
    step = jac @ (inv @ g) / np.maximum(root_w, 1e-12)
    hat = np.einsum("ij,jk,ik->i", jac, inv, jac) / OBSERVATION_SD**2
    return (resid - step) / np.maximum(1 - hat, 1e-6)


def _refit_left_out(runs: Sequence[MeasuredRun], theta0: dict[str, float]) -> np.ndarray:
    """Each run's log(predicted / measured) with the constants selected and fitted to the
    other runs (`_fit_time`)."""
    out = []
    for i, run in enumerate(runs):
        theta = _fit_time([*runs[:i], *runs[i + 1 :]], theta0).theta
        out.append(float(log_times([run], theta)[0]) - math.log(run.step_time_s))
    return np.array(out)


SLOPE_STEP = 1e-3
"""The activation-scale step over which `_fit_memory` takes a stage's allocated bytes' slope."""


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
        # the slope at the default scale: the peak is linear in it but for a kink where the
        # optimizer step's gradient copies (unscaled) overtake the activations
        # (`memory.StageMemory.total`), which a chord to scale 2 could straddle
        a = (_stage_allocated(r, peak.stage, 1.0 + SLOPE_STEP) - e_plus_a) / SLOPE_STEP
        rows.append((r, peak.stage, peak.max_allocated_bytes, e_plus_a - a, a))
    spread = BY_KEY[MEMORY_KEY].spread
    default = DEFAULTS[MEMORY_KEY]
    if not rows:
        return default, False, spread, []
    x = np.array([a / m for _, _, m, _, a in rows])
    y = np.array([1 - e / m for _, _, m, e, _ in rows])
    prior = 1 / (spread * default) ** 2
    precision = float(x @ x) / OBSERVATION_SD**2 + prior
    sd = 1 / math.sqrt(precision) / default
    determined = sd <= DETERMINED_RATIO * spread
    value = default
    for _ in range(ITERATIONS if determined else 0):
        w = robust_weights(x * value - y)
        value = (float(x @ (w * y)) / OBSERVATION_SD**2 + prior * default) / (
            float(x @ (w * x)) / OBSERVATION_SD**2 + prior
        )
        c = BY_KEY[MEMORY_KEY]
        value = min(max(value, c.lo), c.hi)
    return value, determined, sd, rows


def _relative(key: str, sd: float, value: float) -> float:
    """A posterior sd relative to the constant: for an additive one (`linear`, a step's fixed
    seconds) relative to the larger of its value and its default, so that a value fitted to
    its floor of 0 is not read as infinitely uncertain."""
    if not BY_KEY[key].linear:
        return math.expm1(sd)
    return sd / max(value, DEFAULTS[key], 1e-12)


def fit(runs: Sequence[MeasuredRun], leave_one_out: bool = True) -> Fit:
    """The constants fitted to `runs` (see the module docstring); without `leave_one_out`, no
    left-out errors (a caller that holds runs out itself: the band is then the dev set's)."""
    if not runs:
        raise ValueError("fit needs at least one run")
    theta0 = {k: to_theta(k, DEFAULTS[k]) for k in TIME_KEYS}
    theta, free, inseparable, determined, sd, resid, resid0, jac = _fit_time(runs, theta0)
    # `free` in `select`'s order, the order of the Jacobian's columns (its prior and deviation
    # in any other order put each constant's against another's column)
    dev = np.array([theta[k] - theta0[k] for k in free])
    loo = None
    if leave_one_out and 1 < len(runs) <= REFIT_RUNS:
        loo = _refit_left_out(runs, theta0)
    elif leave_one_out and len(runs) > REFIT_RUNS:
        loo = _leave_one_out(resid, jac, free, dev)
    if loo is not None:  # a run left out is predicted no better than with it in
        loo = np.sign(loo) * np.maximum(np.abs(loo), np.abs(resid))
    scale, mem_determined, mem_sd, mem_rows = _fit_memory(runs)
    values = {k: from_theta(k, v) for k, v in theta.items()} | {MEMORY_KEY: scale}
    steps = np.array([r.step_time_s for r in runs])
    before, after = np.exp(resid0) * steps, np.exp(resid) * steps
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
        why = "one run: none to leave out" if leave_one_out else "left-out errors not asked"
        band, basis = DEV_SET_ERROR[0], f"planner's dev-set median error ({why})"
    else:
        band = math.expm1(float(np.sqrt(np.mean(loo**2))))
        basis = f"leave-one-out RMS over {len(runs)} runs"
    return Fit(
        values=values,
        determined=determined | {MEMORY_KEY: mem_determined},
        relative_sd={k: _relative(k, sd[k], values[k]) for k in TIME_KEYS} | {MEMORY_KEY: mem_sd},
        runs=tuple(out),
        band=band,
        band_basis=basis,
        order=tuple(free),
        inseparable={k: v for k, v in inseparable.items() if not determined[k]},
    )
