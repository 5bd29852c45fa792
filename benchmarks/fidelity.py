"""Predicted vs published throughput for every published run with a throughput figure.

    python benchmarks/fidelity.py

Rows: benchmarks/data/published_runs.yaml, those with result.tokens_per_s_per_gpu or
derived.tokens_per_s_per_gpu, mapped to planner inputs by benchmarks/runs.py. Prints predicted and
published tokens/s/GPU, the relative error, predicted and published MFU where the source's
convention is ours (model FLOPs, no causal halving, no recompute: SC21's derived eq.(7) figure,
Korthikanti, Megatron-Core r0.8), the largest non-compute cost, and marks with * the rows
benchmarks/fit_constants.py fits on. Targets: median |error| <= 10%, none worse than 25%.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fit_constants import FIT_PREFIXES
from benchmarks.runs import Case, load_published
from planner.model import cost


def rows(cases: list[Case]) -> list[tuple[Case, cost.Performance, float]]:
    out = []
    for c in cases:
        p = cost.estimate(c.job, c.layout)
        out.append((c, p, p.tokens_per_s_per_gpu / c.tokens_per_s_per_gpu - 1))
    return out


def summary(errors: list[float]) -> str:
    a = [abs(e) for e in errors]
    return f"median |error| {statistics.median(a):.1%}, worst {max(a):.1%} (n={len(a)})"


def main() -> None:
    res = rows(load_published())
    print(
        f"{'id':42s} {'model':20s} {'layout':44s} {'published':>9s} {'predicted':>9s} "
        f"{'error':>7s} {'MFU pub':>7s} {'MFU pred':>8s}  bottleneck"
    )
    for c, p, err in res:
        fit = "*" if c.id.startswith(FIT_PREFIXES) else " "
        mfu_pub = f"{c.mfu_pct:.1f}" if c.mfu_pct else "-"
        mfu_pred = f"{100 * p.mfu:.1f}" if c.mfu_pct else "-"
        lay = c.layout.describe().replace(" zero", " z").replace("recompute=", "rc=")
        if c.job.precision == "fp8":
            lay += " fp8"
        print(
            f"{c.id + fit:42s} {c.job.arch.name:20s} {lay:44s} {c.tokens_per_s_per_gpu:9.1f} "
            f"{p.tokens_per_s_per_gpu:9.1f} {err:+7.1%} {mfu_pub:>7s} {mfu_pred:>8s}  "
            f"{p.bottleneck()}"
        )
    errs = [e for *_, e in res]
    fit_e = [e for c, _, e in res if c.id.startswith(FIT_PREFIXES)]
    held = [e for c, _, e in res if not c.id.startswith(FIT_PREFIXES)]
    print(f"\nall rows:      {summary(errs)}")
    print(f"fit rows (*):  {summary(fit_e)}")
    print(f"held-out rows: {summary(held)}")
    groups: dict[str, list[float]] = {}
    for c, _, e in res:
        groups.setdefault(c.group, []).append(e)
    for g, es in groups.items():
        print(f"  {g:12s} {summary(es)}")


if __name__ == "__main__":
    main()
