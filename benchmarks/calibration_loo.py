"""`planner calibrate` on real measurements: held-out error before and after calibration.

    python benchmarks/calibration_loo.py [--folds 10] [--write-logs DIR]

Logs: one per Megatron-LM functional-test run that benchmarks/functional_steps.py turns into a
measured step time (the calibration cases only: SHA-256 of "<family>/<case>" starting 5-9 or
a-f), written in Megatron-LM's own log format (benchmarks/megatron_logs.py, Megatron-LM
d98e8a64): the case's arguments as `_print_args` prints them, one `training_log` line per
golden `iteration-time` value (milliseconds, at its step), and one `report_memory` line from
the golden `mem-allocated-bytes` / `mem-max-allocated-bytes` (measured on the last rank; the
line names the first rank of the last pipeline stage, which prints for it). The logs go through
the same reader as `planner calibrate` (`planner.calibration.measured.read_runs`), so the
measured step time is the reader's median, not the benchmark's.

Held out: per GPU kind, the cases are split into `--folds` groups by case name (a case's dev and
lts runs, and its runs at other sizes, stay together, so no configuration is both fitted and
judged); each group's runs are predicted by the model calibrated on the other groups, and by
the shipped model. Printed per GPU: median and worst |error| of step time and of the measured
stage's allocated memory, before and after; and the constants a fit on all of that GPU's runs
determines.

These are tiny models (tens to hundreds of milliseconds per step) run in deterministic mode
with NCCL_ALGO=Ring (benchmarks/functional_steps.py says what that costs): the fixed per-step
cost that calibration learns is most of their step, so the before/after gap here is larger
than on production-size runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_steps import load_functional_steps, steps_of
from benchmarks.functional_tests import DATA, command_line, load_cases, vocab_given
from benchmarks.megatron_logs import Step, log_text
from benchmarks.mlperf import load_mlperf
from benchmarks.runs import Case, load_published
from planner.calibration.fit import fit
from planner.calibration.measured import MeasuredRun, read_runs
from planner.emit.megatron import arguments
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model import calibratable, cost, memory

MIB = 2**20


def _golden() -> dict[tuple[str, str], dict]:
    files = json.loads((DATA / "golden_values.json").read_text())["files"]
    return {(r["case"], r["file"]): r for r in files}


def log_of(case: Case, golden: dict, commands: dict) -> str:
    """The Megatron-LM log of one functional-test run (see the module docstring)."""
    rec = golden[(case.raw["case"], case.raw["file"])]
    metric = rec["metrics"]["iteration-time"]
    steps = [
        Step(s, 1000 * float(v))
        for s, v in zip(steps_of(metric), metric["values"], strict=True)
        if v is not None
    ]
    memory_line = None
    peak = [v for v in rec["metrics"].get("mem-max-allocated-bytes", {}).get("values", []) if v]
    now = [v for v in rec["metrics"].get("mem-allocated-bytes", {}).get("values", []) if v]
    if peak:
        n, pp = case.job.cluster.num_gpus, case.layout.pp
        alloc = max(now) if now else max(peak)
        memory_line = ((pp - 1) * (n // pp), steps[1].iteration, alloc / MIB, max(peak) / MIB)
    words = command_line(commands[case.raw["case"]])
    return log_text(words, case.job.cluster.num_gpus, steps, memory_line, steps[-1].iteration)


def write_logs(cases: list[Case], directory: Path) -> list[tuple[Case, Path, int | None]]:
    golden, commands = _golden(), {c["name"]: c for c in load_cases()}
    out = []
    for i, case in enumerate(cases):
        path = directory / f"{i:03d}-{case.raw['case'].replace('/', '--')}.log"
        path.write_text(log_of(case, golden, commands))
        words = command_line(commands[case.raw["case"]])
        out.append((case, path, vocab_given(words)))
    return out


def _errors(run: MeasuredRun) -> tuple[float, float | None]:
    job, layout = run.plan.job, run.plan.require_layout()
    t = cost.estimate(job, layout).step_time_s / run.step_time_s - 1
    peak = run.peak()
    if peak is None:
        return t, None
    alloc = memory.estimate(job, layout).stages[peak.stage].allocated
    return t, alloc / peak.max_allocated_bytes - 1


def _summary(errs: list[float]) -> str:
    if not errs:
        return "-"
    a = [abs(e) for e in errs]
    return f"median {statistics.median(a):5.1%}  worst {max(a):6.1%}"


def published_logs() -> list[tuple[str, Case, str]]:
    """(source, case, log) for the MLPerf submissions and the Megatron-family published runs
    (torchtitan's rows are other code): each as a log of its arguments and its measured step
    time, repeated (a start-up line 3x slower first), with no memory line."""
    out = []
    rows = [("mlperf", c) for c in load_mlperf()]
    rows += [("published", c) for c in load_published() if not c.id.startswith("torchtitan")]
    for source, case in rows:
        job = case.job
        n = job.cluster.num_gpus
        ms = 1000 * job.global_batch_size * job.seq_length / case.tokens_per_s_per_gpu / n
        steps = [Step(1, 3 * ms)] + [Step(k, ms) for k in range(2, 12)]
        words = arguments(Plan(job, case.layout)).flat()
        out.append((source, case, log_text(words, n, steps, None, 11)))
    return out


def held_out(pairs: list[tuple[str, MeasuredRun]], folds: int) -> dict[str, list[float]]:
    """Errors of each run predicted by the shipped model and by the model calibrated on the
    other folds (by key: a case's runs stay together), step time ("t") and memory ("m")."""
    errs: dict[str, list[float]] = defaultdict(list)
    keys = sorted({k for k, _ in pairs})
    fold = {k: (i if len(keys) <= folds else hash_fold(k, folds)) for i, k in enumerate(keys)}
    for f in sorted(set(fold.values())):
        held = [r for k, r in pairs if fold[k] == f]
        rest = [r for k, r in pairs if fold[k] != f]
        if not rest:
            continue
        for run in held:
            t, m = _errors(run)
            errs["t0"].append(t)
            if m is not None:
                errs["m0"].append(m)
        with calibratable.calibrated(fit(rest, leave_one_out=False).values):
            for run in held:
                t, m = _errors(run)
                errs["t1"].append(t)
                if m is not None:
                    errs["m1"].append(m)
    return errs


def hash_fold(key: str, folds: int) -> int:
    """The fold of `key` (a case name) among `folds`: its SHA-256 modulo `folds`."""
    return int(hashlib.sha256(key.encode()).hexdigest(), 16) % folds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--write-logs", type=Path, help="keep the logs in this folder")
    args = ap.parse_args()
    cases = load_functional_steps()
    directory = args.write_logs or Path(tempfile.mkdtemp(prefix="megatron-logs-"))
    directory.mkdir(parents=True, exist_ok=True)
    groups: dict[tuple[str, str], list[tuple[str, MeasuredRun]]] = defaultdict(list)
    unread: list[str] = []
    for case, path, vocab in write_logs(cases, directory):
        try:
            (run,) = read_runs([path], case.raw["gpu"], None, None, vocab)
        except InputError as e:  # what `planner calibrate` refuses of it (exit 2): said below
            unread.append(f"{case.raw['case']}: {str(e).splitlines()[0]}")
            continue
        groups[("functional", case.raw["gpu"])].append((case.raw["case"], run))
    for i, (source, case, text) in enumerate(published_logs()):
        path = directory / f"{source}-{i:03d}.log"
        path.write_text(text)
        (run,) = read_runs([path], case.job.cluster.gpu.name)
        groups[(source, case.job.cluster.gpu.name)].append((case.id, run))
    print(f"logs in {directory}; held out: {args.folds} folds by case (one per case when fewer)")
    for line in unread:
        print(f"  not read (calibrate refuses it): {line}")
    print()
    header = f"{'source':11s} {'gpu':15s} {'runs':>4s}  {'step time before':24s} {'after':24s}"
    print(header + f" {'allocated before':24s} {'after':24s}")
    for (source, gpu), pairs in sorted(groups.items()):
        if len(pairs) < 3:
            continue
        e = held_out(pairs, args.folds)
        print(
            f"{source:11s} {gpu:15s} {len(pairs):4d}  {_summary(e['t0']):24s} "
            f"{_summary(e['t1']):24s} {_summary(e['m0']):24s} {_summary(e['m1']):24s}"
        )
    print("\nconstants fitted on all of a group's runs (determined ones only):")
    for (source, gpu), pairs in sorted(groups.items()):
        if len(pairs) < 3:
            continue
        start = time.perf_counter()
        f = fit([r for _, r in pairs])
        took = time.perf_counter() - start
        moved = ", ".join(
            f"{k} {v:.3g} (default {calibratable.DEFAULTS[k]:.3g})"
            for k, v in f.values.items()
            if f.determined[k]
        )
        print(f"  {source} {gpu}: {moved or 'none'}  [fit {took:.1f} s]")


if __name__ == "__main__":
    main()
