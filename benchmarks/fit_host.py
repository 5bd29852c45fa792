"""Fit the host model's constants (planner/model/host.py, cost.GRAD_STATS_S) to Megatron-LM's
functional-test step times, and print the error on cases held out of the fit.

    python benchmarks/fit_host.py [--folds 2]

Rows: benchmarks/functional_steps.py's Cases (the calibration cases only: SHA-256 of
"<family>/<case>" starting 5-9 or a-f; nothing of the others is stored), less the GB200 runs of
the "_1node" cases (functional_steps.ONE_TRAY_SUFFIX): the same arguments on one 4-GPU tray run
3-22x slower per step than on two trays (the script prints each pair), which no host or GPU
physics of planner's explains; they are left out and listed. The rows are tiny models (most 12
layers of hidden size 512) run eagerly, where the host issuing kernels is most of the step: the
regime these constants describe. On production-size layers the floors they set are far under
the GPU's time.

Fitted: HOST_LAYER_ISSUE_S, MOE_ISSUE, MOE_TP_ISSUE, MLA_ISSUE, MAMBA_ISSUE, CP_STEP_ISSUE,
FP8_ISSUE, determinism.DETERMINISTIC_ISSUE (3 in 4 of the rows run --deterministic-mode, the rest
not: the two sets tell the mode's host operations apart), HOST_CPU_SLOWDOWN of "epyc-zen2" and
"grace" (the reference "xeon" is 1), and
cost.GRAD_STATS_S (every functional test logs gradient statistics; cost.STEP_OVERHEAD_S,
the fixed overhead every run has, is left as it is). Objective: the sum over rows of
|log(predicted / measured step time)|
(robust to the odd slow run the goldens hold), by Nelder-Mead over the log of each constant
(benchmarks/fit_constants.nelder_mead).

Held out: the cases are split into `--folds` groups by the SHA-256 of their name (a case's runs
on every platform and environment stay together); each group is predicted by the constants
fitted on the others. Printed: median and worst |error| per group of rows (dense, MoE; per GPU)
before the fit, held out, and fitted on all; then the constants fitted on all rows, to paste
into host.py and cost.py (nothing is written).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.calibration_loo import hash_fold
from benchmarks.fit_constants import nelder_mead
from benchmarks.functional_steps import ONE_TRAY_SUFFIX, load_functional_steps, one_tray
from benchmarks.runs import Case
from planner.model import cost, determinism, host
from planner.model.job_memo import JobMemo

MODULE_CONSTANTS = (
    (host, "HOST_LAYER_ISSUE_S"),
    (host, "MOE_ISSUE"),
    (host, "MOE_TP_ISSUE"),
    (host, "MLA_ISSUE"),
    (host, "MAMBA_ISSUE"),
    (host, "CP_STEP_ISSUE"),
    (host, "FP8_ISSUE"),
    (determinism, "DETERMINISTIC_ISSUE"),
    (cost, "GRAD_STATS_S"),
)
CPUS = ("epyc-zen2", "grace")
"""HOST_CPU_SLOWDOWN entries fitted (the reference, "xeon", stays 1)."""
NAMES = tuple(attr for _, attr in MODULE_CONSTANTS) + tuple(f"HOST_CPU_SLOWDOWN[{c}]" for c in CPUS)


def current() -> list[float]:
    return [float(getattr(m, a)) for m, a in MODULE_CONSTANTS] + [
        host.HOST_CPU_SLOWDOWN[c] for c in CPUS
    ]


def set_constants(values: Sequence[float]) -> None:
    n = len(MODULE_CONSTANTS)
    for (module, attr), v in zip(MODULE_CONSTANTS, values[:n], strict=True):
        setattr(module, attr, float(v))
    for cpu, v in zip(CPUS, values[n:], strict=True):
        host.HOST_CPU_SLOWDOWN[cpu] = float(v)
    JobMemo.forget_all()  # memoised layer times used the old values


def step_s(c: Case) -> float:
    return float(c.estimate().step_time_s)


def log_errors(cases: Sequence[Case]) -> list[float]:
    return [math.log(step_s(c) / c.raw["step_time_s"]) for c in cases]


def fit(cases: Sequence[Case], start: Sequence[float]) -> list[float]:
    def objective(logx: np.ndarray) -> float:
        set_constants(np.exp(logx).tolist())
        return float(sum(abs(e) for e in log_errors(cases)))

    best = nelder_mead(objective, np.log(np.maximum(start, 1e-9)), step=0.3, iters=1500)
    best = nelder_mead(objective, best, step=0.05, iters=800)
    values = np.exp(best).tolist()
    set_constants(values)
    return values


def groups(c: Case) -> tuple[str, ...]:
    kind = "MoE" if c.group == "functional-moe" else "dense"
    return ("all", kind, c.raw["gpu"])


def table(cases: Sequence[Case], columns: dict[str, dict[str, float]]) -> None:
    by_id = {c.id: c for c in cases}
    names = sorted({g for c in cases for g in groups(c)})
    print(f"{'rows':16s} {'n':>4s}  " + "  ".join(f"{k:>24s}" for k in columns))
    for g in names:
        cells = []
        n = 0
        for col in columns.values():
            errs = [abs(math.expm1(e)) for i, e in col.items() if g in groups(by_id[i])]
            n = len(errs)
            cells.append(f"median {statistics.median(errs):5.1%} worst {max(errs):6.1%}")
        print(f"{g:16s} {n:4d}  " + "  ".join(f"{s:>24s}" for s in cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=2)
    args = ap.parse_args()
    everything = load_functional_steps()
    tray = [c for c in everything if one_tray(c)]
    rows = [c for c in everything if not one_tray(c)]
    twins = {(c.raw["case"], c.raw["gpu"]): c.raw["step_time_s"] for c in rows}
    print(f"left out, one GB200 tray ({len(tray)} runs; step time against the 2-tray run):")
    for c in tray:
        twin = twins.get((c.raw["case"].removesuffix(ONE_TRAY_SUFFIX), c.raw["gpu"]))
        ratio = f"{c.raw['step_time_s'] / twin:5.1f}x" if twin else "  (no 2-tray run)"
        print(f"  {c.id:90s} {c.raw['step_time_s']:6.3f} s {ratio}")
    shipped = current()
    ids = [c.id for c in rows]
    before = dict(zip(ids, log_errors(rows), strict=True))
    held: dict[str, float] = {}
    for k in range(args.folds):
        train = [c for c in rows if hash_fold(c.raw["case"], args.folds) != k]
        test = [c for c in rows if hash_fold(c.raw["case"], args.folds) == k]
        fit(train, shipped)
        held.update(zip([c.id for c in test], log_errors(test), strict=True))
    values = fit(rows, shipped)
    after = dict(zip(ids, log_errors(rows), strict=True))
    print(f"\nrows: {len(rows)} functional-test runs; folds by case: {args.folds}")
    table(rows, {"shipped constants": before, "held out": held, "fitted on all": after})
    print("\nconstants fitted on all rows (shipped -> fitted):")
    for name, old, new in zip(NAMES, shipped, values, strict=True):
        print(f"  {name:28s} {old:.4g} -> {new:.3g}")
    set_constants(shipped)


if __name__ == "__main__":
    main()
