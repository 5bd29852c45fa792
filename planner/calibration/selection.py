"""Which time constants a set of runs determine (`select`), judged at the defaults.

With J the runs' Jacobian of log(step time) in fitting coordinates (`fit.to_theta`), s_k each
constant's prior spread and σ = OBSERVATION_SD, the posterior covariance of the fitted
constants is (JᵀJ/σ² + diag(1/s²))⁻¹; a set of constants is determined when the runs halve each
one's prior spread (posterior sd <= DETERMINED_RATIO x s_k). Constants join one at a time, the
one that lowers the objective most first (stepwise regression), while each lowers it by more
than Akaike's 2 and the set stays determined. The others keep their defaults.

Constants the runs cannot tell apart. A candidate is judged with the chosen constants free
beside it and the others held at their defaults; held, a constant the runs move together with
the candidate lends it a precision it does not have. Logs of one per-GPU shape (tp 1, pp 1,
seq 4096, 4 sequences per GPU) on 8, 16 and 32 GPUs, written with GEMMs 20% slow, time alike
a slower GEMM and a longer per-step overhead: fitted alone, the overhead's posterior sd was
0.13 of its spread and it went in, at 25x its default, calling itself determined at +/-12%,
and another size was then predicted 10.7% short. With the GEMM efficiency free beside it the
ratios are 0.60 (overhead) and 0.81 (GEMM). So a candidate is also judged with each unchosen
constant strongly correlated with it free beside it (squared posterior correlation ρ² >
STRONG_R2); if that takes its ratio past DETERMINED_RATIO it is refused (not separable from
that constant with these logs) and keeps its default, as its partner does for the same reason;
and a constant refused is then free beside every other candidate (`select`), so that none
takes its place.
"""

from __future__ import annotations

import numpy as np

from planner.model.calibratable import BY_KEY, CONSTANTS

OBSERVATION_SD = 0.03
"""σ: the relative step-time residual of the model on one run once its constants are right
(runs of one cluster and code; planner's fit rows from one source reach 1-4% median,
benchmarks/fidelity.py), and of a memory prediction (allocated vs measured on the functional
tests: median |error| about 2%, benchmarks/fit_allocated.py)."""
DETERMINED_RATIO = 0.5
"""A constant is determined when the runs shrink its prior spread to at most this fraction."""
MIN_GAIN = 2.0
"""What fitting one more constant must take off the objective (Σ r²/σ² + prior): Akaike's
information criterion charges 2 per parameter."""
STRONG_R2 = 0.75
"""A partner is strongly correlated with a constant when their squared posterior correlation
passes this: it holds more than three quarters of what the runs say of the constant, and
freeing it at least doubles the constant's posterior sd (sd / sqrt(1 - ρ²)); the logs of one
shape give 0.95. Not lower: six sizes of the recovery tests determine an attention efficiency
20% slow (fitted within 2%) at ρ² 0.68 with the GEMM's, and 0.52 of its spread with it free."""
TIME_KEYS = tuple(c.key for c in CONSTANTS if c.kind == "time")


def covariance(jac: np.ndarray, keys: list[str]) -> np.ndarray:
    """Posterior covariance of `keys` in fitting coordinates when only they are fitted (the
    others held at their values); `jac`: their columns."""
    spreads = np.array([BY_KEY[k].spread for k in keys])
    return np.linalg.inv(jac.T @ jac / OBSERVATION_SD**2 + np.diag(1 / spreads**2))


def ratios(jac: np.ndarray, keys: list[str]) -> np.ndarray:
    """Posterior sd / prior spread of each of `keys` when only they are fitted."""
    spreads = np.array([BY_KEY[k].spread for k in keys])
    return np.sqrt(np.diag(covariance(jac, keys))) / spreads


def gain(jac: np.ndarray, resid: np.ndarray, keys: list[str]) -> float:
    """How much fitting `keys` lowers the objective (Σ r²/σ² + prior), to first order:
    gᵀ A⁻¹ g with g, A the objective's gradient and Gauss-Newton Hessian at the defaults."""
    spreads = np.array([BY_KEY[k].spread for k in keys])
    a = jac.T @ jac / OBSERVATION_SD**2 + np.diag(1 / spreads**2)
    g = jac.T @ resid / OBSERVATION_SD**2
    return float(g @ np.linalg.solve(a, g))


def inseparable(jac: np.ndarray, chosen: list[str], key: str) -> str | None:
    """The unchosen constant strongly correlated with `key` (module docstring) that, free
    beside it and the chosen, takes `key`'s ratio past DETERMINED_RATIO (the one that takes it
    furthest), or None. `jac`: every time constant's column (TIME_KEYS order)."""
    worst: tuple[float, str] | None = None
    for partner in TIME_KEYS:
        if partner == key or partner in chosen:
            continue
        keys = [*chosen, key, partner]
        cov = covariance(_cols(jac, keys), keys)
        i, j = len(chosen), len(chosen) + 1
        r2 = cov[i, j] ** 2 / (cov[i, i] * cov[j, j])
        ratio = float(np.sqrt(cov[i, i])) / BY_KEY[key].spread
        if r2 > STRONG_R2 and ratio > DETERMINED_RATIO and (worst is None or ratio > worst[0]):
            worst = (ratio, partner)
    return None if worst is None else worst[1]


def _cols(jac: np.ndarray, keys: list[str]) -> np.ndarray:
    return jac[:, [TIME_KEYS.index(k) for k in keys]]


def select(jac: np.ndarray, resid: np.ndarray) -> tuple[list[str], dict[str, str]]:
    """The time constants the runs determine, in the order chosen, and those refused as
    `inseparable` from another (key: that other) though fitting them would have gained enough.
    At each round the candidate that, fitted with those already chosen, lowers the objective
    most, if it lowers it by more than MIN_GAIN (Akaike's price of one more parameter), leaves
    every chosen constant within DETERMINED_RATIO of its prior spread and is not inseparable
    from an unchosen one. Constants the runs move together do not both get in: the first takes
    what they share, and the second neither gains enough nor halves its spread; nor does
    either, when the runs cannot tell which of the two it is. Nor does a third stand in for
    them: a constant refused is not known to be at its default, so with constants refused a
    candidate must also stay within DETERMINED_RATIO with them free beside it (logs of five
    sizes with GEMMs 18% slow cannot tell the GEMM from the attention efficiency; the scale-up
    bandwidth, 0.59 of its spread with both free, went in in their place at -32%). `jac`:
    every time constant's column (TIME_KEYS order)."""
    chosen: list[str] = []
    gained = 0.0
    while True:
        refused: dict[str, str] = {}
        gains: dict[str, float] = {}
        for k in TIME_KEYS:
            if k in chosen:
                continue
            keys = [*chosen, k]
            if float(ratios(_cols(jac, keys), keys).max()) > DETERMINED_RATIO:
                continue
            g = gain(_cols(jac, keys), resid, keys)
            if g - gained <= MIN_GAIN:
                continue
            partner = inseparable(jac, chosen, k)
            if partner is not None:
                refused[k] = partner
            else:
                gains[k] = g
        if refused:  # not known to be at their defaults: free beside each other candidate
            free = [*chosen, *refused]
            gains = {
                k: g
                for k, g in gains.items()
                if ratios(_cols(jac, [*free, k]), [*free, k])[-1] <= DETERMINED_RATIO
            }
        if not gains:
            return chosen, refused
        best = max(gains, key=lambda k: gains[k])  # the first of equals, in TIME_KEYS order
        gained = gains[best]
        chosen.append(best)
