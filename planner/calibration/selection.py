"""Which time constants a set of runs determine (`select`), judged at the defaults.

With J the runs' Jacobian of log(step time) in fitting coordinates (`gauss_newton.to_theta`),
s_k each constant's prior spread and σ = OBSERVATION_SD, the posterior covariance of the fitted
constants is (JᵀJ/σ² + diag(1/s²))⁻¹; a set of constants is determined when the runs halve each
one's prior spread (posterior sd <= DETERMINED_RATIO x s_k). Every set of the time constants
(2^7 - 1) is a candidate; those not determined, or holding a constant the runs cannot tell
from one outside it (below), are dropped; of the rest, and the empty set, the one whose fit
leaves the least objective (Σ r²/σ² + prior, the Gauss-Newton fit's, `select`'s `objective`)
plus Akaike's MIN_GAIN per constant is taken. The others keep their defaults. One at a time,
the constant that lowers the objective most first (stepwise regression), took a wrong pair: on
eight logs written with GEMMs 10% slow and the network's bandwidth 30% low, the scale-up
bandwidth went in first (first-order gain 25.6 against the GEMM's 25.5), the GEMM after it, and
the runs stayed up to 5.3% off (objective 7.7) where the GEMM and the scale-out bandwidth,
also determined, fit them to 0.55% (1.8).

Constants the runs cannot tell apart. A candidate is judged with the other constants of its
set free beside it and the rest held at their defaults; held, a constant the runs move together
with the candidate lends it a precision it does not have. So it is also judged with each
constant outside the set that is strongly correlated with it (squared posterior correlation ρ²
> STRONG_R2) free beside it, that constant's prior left out: what separates the two must come
from the runs, not from the partner's prior (the overhead's spread, 0.2 s, is 20x its default;
the GEMM's 0.15 in log is tight, and it alone held the overhead at 0.36 of its spread on logs
whose two columns are exactly collinear). If that takes the candidate's ratio past
DETERMINED_RATIO it is refused (not separable from that constant with these logs) and keeps
its default, as its partner does for the same reason; and the constants refused beside a set
are free beside its members when the set is judged, so that none takes their place. Logs of
one per-GPU shape (tp 1, pp 1, seq 4096, a few sequences per GPU) on 8, 16 and 32 GPUs time
every GPU's work alike: a slower GEMM and a longer per-step overhead move each run's log time
by the same amount, and neither is fitted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations

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
LINEAR_MARGIN = 2 * MIN_GAIN
"""Sets are fitted in the order of their first-order objective (`gain`: the quadratic model's
minimum, plus MIN_GAIN each); one whose first-order score passes the best fitted score by more
than this is not fitted, nor is any after it. On the QA's six sets of eight logs (GEMMs and the
network's bandwidth off by up to 30%) the first-order score was within 1.4 of the fitted one for
every admissible set; fitting all of them made calibrate 6-9x slower (each set's fit is a few
model evaluations of every run, for each run left out)."""
TIME_KEYS = tuple(c.key for c in CONSTANTS if c.kind == "time")


def covariance(jac: np.ndarray, keys: Sequence[str], flat: str | None = None) -> np.ndarray:
    """Posterior covariance of `keys` in fitting coordinates when only they are fitted (the
    others held at their values); `jac`: their columns; `flat`: a key whose prior is left out
    (its column must not be zero)."""
    precision = np.array([0.0 if k == flat else 1 / BY_KEY[k].spread ** 2 for k in keys])
    return np.linalg.inv(jac.T @ jac / OBSERVATION_SD**2 + np.diag(precision))


def ratios(jac: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    """Posterior sd / prior spread of each of `keys` when only they are fitted."""
    spreads = np.array([BY_KEY[k].spread for k in keys])
    return np.sqrt(np.diag(covariance(jac, keys))) / spreads


def gain(jac: np.ndarray, resid: np.ndarray, keys: Sequence[str]) -> float:
    """How much fitting `keys` lowers the objective (Σ r²/σ² + prior), to first order:
    gᵀ A⁻¹ g with g, A the objective's gradient and Gauss-Newton Hessian at the defaults."""
    spreads = np.array([BY_KEY[k].spread for k in keys])
    a = jac.T @ jac / OBSERVATION_SD**2 + np.diag(1 / spreads**2)
    g = jac.T @ resid / OBSERVATION_SD**2
    return float(g @ np.linalg.solve(a, g))


def inseparable(jac: np.ndarray, chosen: Sequence[str], key: str) -> str | None:
    """The constant outside `chosen` strongly correlated with `key` (module docstring) that,
    free beside it and the chosen with its own prior left out, takes `key`'s ratio past
    DETERMINED_RATIO (the one that takes it furthest), or None. `jac`: every time constant's
    column (TIME_KEYS order)."""
    worst: tuple[float, str] | None = None
    for partner in TIME_KEYS:
        if partner == key or partner in chosen:
            continue
        keys = [*chosen, key, partner]
        cols = _cols(jac, keys)
        cov = covariance(cols, keys)
        i, j = len(chosen), len(chosen) + 1
        r2 = cov[i, j] ** 2 / (cov[i, i] * cov[j, j])
        if r2 <= STRONG_R2:  # a zero column (the partner moves nothing) has r2 0
            continue
        ratio = float(np.sqrt(covariance(cols, keys, flat=partner)[i, i])) / BY_KEY[key].spread
        if ratio > DETERMINED_RATIO and (worst is None or ratio > worst[0]):
            worst = (ratio, partner)
    return None if worst is None else worst[1]


def _cols(jac: np.ndarray, keys: Sequence[str]) -> np.ndarray:
    return jac[:, [_index(k) for k in keys]]


def refused(jac: np.ndarray, resid: np.ndarray, chosen: Sequence[str]) -> dict[str, str]:
    """The constants outside `chosen` that, fitted beside it, would stay determined and lower
    the objective by more than MIN_GAIN (to first order), but are `inseparable` from another
    (key: that other)."""
    out: dict[str, str] = {}
    base = gain(_cols(jac, chosen), resid, chosen) if chosen else 0.0
    for k in TIME_KEYS:
        if k in chosen:
            continue
        keys = [*chosen, k]
        cols = _cols(jac, keys)
        if float(ratios(cols, keys).max()) > DETERMINED_RATIO:
            continue
        if gain(cols, resid, keys) - base <= MIN_GAIN:
            continue
        partner = inseparable(jac, chosen, k)
        if partner is not None:
            out[k] = partner
    return out


def admissible(jac: np.ndarray, resid: np.ndarray, keys: Sequence[str]) -> bool:
    """Whether the runs determine every constant of `keys` fitted together, tell each from
    every constant outside them, and still determine each with the constants `refused` beside
    them free too (a constant refused is not known to be at its default: logs of five sizes
    with GEMMs 18% slow cannot tell the GEMM from the attention efficiency, and the scale-up
    bandwidth, 0.59 of its spread with both free, went in in their place at -32%)."""
    if float(ratios(_cols(jac, keys), keys).max()) > DETERMINED_RATIO:
        return False
    for i, k in enumerate(keys):
        if inseparable(jac, [*keys[:i], *keys[i + 1 :]], k) is not None:
            return False
    free = [*keys, *refused(jac, resid, keys)]
    return float(ratios(_cols(jac, free), free)[: len(keys)].max()) <= DETERMINED_RATIO


def select(
    jac: np.ndarray, resid: np.ndarray, objective: Callable[[list[str]], float]
) -> tuple[list[str], dict[str, str]]:
    """The time constants the runs determine and those refused as `inseparable` from another
    (key: that other) though fitting them would have gained enough. Of every `admissible` set
    and the empty one, the set whose `objective` (the least Σ r²/σ² + prior its fit reaches,
    the weights held) plus MIN_GAIN per constant is least; the empty set's is Σ r²/σ² at the
    defaults, and of equals the smaller set wins, then the earlier (TIME_KEYS order). Sets are
    fitted in the order their first-order objective ranks them, up to LINEAR_MARGIN past the
    best score found; a set of k constants whose charge MIN_GAIN x k alone passes the best found
    cannot win and is not fitted (the objective is never negative). The set is returned in
    order of what each constant alone takes off the objective, most first. `jac`: every time
    constant's column (TIME_KEYS order), rows times the root of the runs' robust weights;
    `resid`: the runs' weighted residuals at the defaults."""
    base = float(resid @ resid) / OBSERVATION_SD**2
    candidates: list[tuple[float, int, list[str]]] = []
    for size in range(1, len(TIME_KEYS) + 1):
        for combo in combinations(TIME_KEYS, size):
            keys = list(combo)
            cols = _cols(jac, keys)
            if float(ratios(cols, keys).max()) <= DETERMINED_RATIO:
                linear = base - gain(cols, resid, keys) + MIN_GAIN * size
                candidates.append((linear, len(candidates), keys))
    best: tuple[float, int, list[int]] = (base, 0, [])  # of equals, fewer, then earlier
    for linear, _, keys in sorted(candidates):
        if linear > best[0] + LINEAR_MARGIN:
            break
        if MIN_GAIN * len(keys) > best[0] or not admissible(jac, resid, keys):
            continue
        here = (objective(keys) + MIN_GAIN * len(keys), len(keys), [_index(k) for k in keys])
        best = min(best, here)
    chosen = [TIME_KEYS[i] for i in best[2]]
    alone = {k: gain(_cols(jac, [k]), resid, [k]) for k in chosen}
    chosen.sort(key=lambda k: (-alone[k], _index(k)))
    return chosen, refused(jac, resid, chosen)


def _index(key: str) -> int:
    return TIME_KEYS.index(key)
