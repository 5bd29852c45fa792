"""The MLPerf submissions that ran one configuration at several GPU counts, measured against
planner, split into a per-micro-batch and a per-step part.

    python benchmarks/scale_series.py

A series is the rows of one round, submitter, model, GPU and layout that differ only in the
data-parallel degree (and so in the global batch and the micro-batches per step, m). Strong scaling
at a fixed global batch shortens each pipeline's share of the step: what grows per GPU with the GPU
count is what a step pays once whatever its m, the bubble, the gradient sync and parameter gather
that their windows do not hide, the optimizer. For each series the table prints every row's
measured and predicted step, their per-micro-batch times and, where the series has three or more
counts, the least-squares line step = a + b x m through the measured and through the predicted
steps: b the seconds per micro-batch, a the seconds per step that m does not carry. A measured a
far above the predicted one, or one that grows with the GPU count (the residuals of the line), is a
per-step cost the model lacks; a measured b above the predicted one a per-micro-batch cost.
Data: benchmarks/data/mlperf/runs.yaml through `mlperf.load_mlperf`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mlperf import load_mlperf, step_time_s
from benchmarks.runs import Case


def series_key(c: Case) -> tuple[str, ...]:
    """What a series shares: round (the software of the day), submitter, model, GPU, precision
    and the layout but its dp."""
    r = c.raw
    lay = c.layout.with_(dp=1)
    gpu = c.job.cluster.gpu.name
    return (r["round"], r["submitter"], r["model"], gpu, c.job.precision, lay.describe())


def line(ms: Sequence[float], steps: Sequence[float]) -> tuple[float, float]:
    """(a, b) of the least-squares line steps = a + b x ms (two or more distinct m)."""
    n = len(ms)
    mean_m, mean_s = sum(ms) / n, sum(steps) / n
    var = sum((m - mean_m) ** 2 for m in ms)
    b = sum((m - mean_m) * (s - mean_s) for m, s in zip(ms, steps, strict=True)) / var
    return mean_s - b * mean_m, b


def series(cases: Sequence[Case]) -> list[list[Case]]:
    """The series with at least two GPU counts, each sorted by GPU count."""
    groups: dict[tuple[str, ...], list[Case]] = {}
    for c in cases:
        groups.setdefault(series_key(c), []).append(c)
    out = []
    for rows in groups.values():
        if len({c.job.cluster.num_gpus for c in rows}) >= 2:
            out.append(sorted(rows, key=lambda c: c.job.cluster.num_gpus))
    return sorted(out, key=lambda s: (s[0].raw["model"], s[0].raw["submitter"]))


def main() -> None:
    for rows in series(load_mlperf()):
        head = rows[0]
        print(
            f"\n{head.raw['round']} {head.raw['submitter']} {head.raw['model']} on "
            f"{head.job.cluster.gpu.name}, "
            f"{head.job.precision}: {head.layout.with_(dp=1).describe()} (dp varies)"
        )
        print(
            f"  {'id':40s} {'gpus':>6s} {'m':>5s} {'step s':>8s} {'pred s':>8s} "
            f"{'error':>7s} {'s/mb':>7s} {'pred/mb':>8s}"
        )
        ms, measured, predicted = [], [], []
        for c in rows:
            m = c.layout.num_microbatches(c.job.global_batch_size)
            step, pred = step_time_s(c.raw), c.estimate().step_time_s
            ms.append(float(m))
            measured.append(step)
            predicted.append(pred)
            print(
                f"  {c.id:40s} {c.job.cluster.num_gpus:6d} {m:5d} {step:8.3f} {pred:8.3f} "
                f"{step / pred - 1:+7.1%} {step / m:7.4f} {pred / m:8.4f}"
            )
        if len(set(ms)) >= 3:
            (am, bm), (ap, bp) = line(ms, measured), line(ms, predicted)
            resid = ", ".join(f"{s - am - bm * m:+.3f}" for m, s in zip(ms, measured, strict=True))
            print(
                f"  step = a + b x m: measured a {am:.3f} s, b {bm:.4f} s; predicted a {ap:.3f} s,"
                f" b {bp:.4f} s; measured residuals by GPU count {resid} s"
            )
    print(
        "\nerror = measured / predicted step - 1 (+: the run took longer than predicted); "
        "m = micro-batches per step per pipeline"
    )


if __name__ == "__main__":
    main()
