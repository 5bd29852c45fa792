"""Predicted memory against every published figure and known outcome.

1. Every run in benchmarks/data/published_runs.yaml that trained: is it judged "fits"? Where
   the source gives a measured per-GPU figure, the predicted peak beside it.
2. Every MLPerf Training submission of benchmarks/data/mlperf/runs.yaml (all trained): is it
   judged "fits"? The count, and the rows that are not.
3. Every flash-attention-2 layout of Hagemann et al. (trained or out of memory): the confusion
   table, and the rows judged wrongly.

Run: python benchmarks/memory_fidelity.py
     python benchmarks/memory_fidelity.py --split-balanced      # the code's other pipeline split
     python benchmarks/memory_fidelity.py --write-test-data   # rewrite tests/data/memory_rows.json
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hagemann
import mlperf
import runs

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import GIB
from planner.model import memory


def measured_gib(row: dict[str, Any]) -> float | None:
    text = str((row.get("result") or {}).get("memory_per_gpu") or "")
    m = re.match(r"\s*([\d.]+)\s*GiB", text)
    return float(m.group(1)) if m else None


def published() -> None:
    print("Published runs that trained (every one must be judged 'fits')")
    print(f"{'run':44} {'layout':44} {'peak GiB':>8} {'cap':>6} {'meas.':>6} {'err':>6}  fits")
    errors = []
    misjudged = 0
    for case in runs.load_published():
        rep = memory.estimate(case.job, case.layout)
        meas = measured_gib(case.raw)
        err = ""
        if meas:
            e = rep.peak / GIB / meas - 1
            errors.append(abs(e))
            err = f"{e:+.0%}"
        misjudged += not rep.fits
        print(
            f"{case.id:44} {case.layout.describe():44} {rep.peak / GIB:8.1f} "
            f"{rep.capacity / GIB:6.1f} {meas or '':>6} {err:>6}  {'yes' if rep.fits else 'NO'}"
        )
    print(f"judged 'does not fit' although they trained: {misjudged}")
    if errors:
        errors.sort()
        print(
            f"measured-memory rows: {len(errors)}, median |error| "
            f"{errors[len(errors) // 2]:.0%}, worst {errors[-1]:.0%}"
        )


def mlperf_runs() -> None:
    print("\nMLPerf Training submissions (every one trained: each must be judged 'fits')")
    cases = mlperf.load_mlperf()
    wrong = []
    for case in cases:
        rep = memory.estimate(case.job, case.layout)
        if not rep.fits:
            wrong.append(f"  {case.id:40} {case.layout.describe():52} peak {rep.peak / GIB:.1f}")
    print(f"judged 'does not fit' although they trained: {len(wrong)} of {len(cases)}")
    if wrong:
        print("\n".join(wrong))


def hagemann_table(split: str = "uniform") -> None:
    rows = list(hagemann.rows(assume=hagemann.Assumptions(split=split)))
    what_if = f", {split} pipeline split (what-if)" if split != "uniform" else ""
    print(f"\nHagemann et al. flash-attention-2 layouts (A100 80 GB){what_if}")
    counts = {("ok", True): 0, ("ok", False): 0, ("oom", True): 0, ("oom", False): 0}
    wrong = []
    for r in rows:
        rep = memory.estimate(r.job, r.layout)
        counts[(r.outcome, rep.fits)] += 1
        if (r.outcome == "oom") == rep.fits:
            wrong.append((r, rep))
    print(f"{'':14} {'judged fits':>12} {'judged not':>11}")
    for outcome in ("ok", "oom"):
        print(f"{outcome:14} {counts[(outcome, True)]:12} {counts[(outcome, False)]:11}")
    print("\nrows judged wrongly:")
    for r, rep in wrong:
        d = r.data
        print(
            f"  {d['outcome']:4} {r.group:52} {r.layout.describe():36} "
            f"rms_kernel={d['rms_norm_kernel']} peak {rep.peak / GIB:5.1f} GiB"
        )


CLUSTER_FIELDS = ("memory_gib", "power_limit_w", "hbm_bandwidth_tb_per_s")
JOB_WRITTEN_APART = {"arch", "cluster", "seq_length", "global_batch_size", "precision"}


def changed(obj: Job | Layout) -> dict[str, object]:
    """The dataclass fields that differ from their defaults (all that a row needs to rebuild
    the object; tuples become JSON lists, which the test turns back; see `_plain`)."""
    return {
        f.name: getattr(obj, f.name)
        for f in fields(obj)
        if f.default is MISSING or getattr(obj, f.name) != f.default
    }


def _plain(name: str, value: Any) -> Any:
    """A Job field as JSON: the [torchtitan] section as the dict of its fields off their
    defaults, the userbuffers settings (`tp_overlap_cfg`) as [GEMM, slot fields] pairs."""
    if name == "torchtitan":
        return value.model_dump(exclude_defaults=True)
    if name == "tp_overlap_cfg":
        return [[gemm, asdict(slot)] for gemm, slot in value]
    return value


def write_test_data(path: Path) -> None:
    """Every published run as planner inputs (the mapping of runs.py), for the memory tests."""
    rows = []
    for case in runs.load_published(with_throughput=False):
        job, cl = case.job, case.job.cluster
        overrides = {f: getattr(cl, f) for f in CLUSTER_FIELDS}
        overrides["memory_gib"] = None if cl.memory_gib == cl.gpu.memory_gib else cl.memory_gib
        rows.append(
            {
                "source_id": case.id,
                "model": job.arch.name,
                "gpu": cl.gpu.name,
                "num_gpus": cl.num_gpus,
                "cluster": {k: v for k, v in overrides.items() if v is not None},
                "seq_length": job.seq_length,
                "global_batch_size": job.global_batch_size,
                "precision": job.precision,
                "job": {
                    name: _plain(name, value)
                    for name, value in changed(job).items()
                    if name not in JOB_WRITTEN_APART
                },
                "layout": changed(case.layout),
                "measured_gib": measured_gib(case.raw),
            }
        )
    about = (
        "Every run of benchmarks/data/published_runs.yaml (all trained), mapped to planner "
        "inputs by benchmarks/runs.py (source_id = its id; cluster = the plan's [cluster] "
        "overrides); measured_gib is the published per-GPU peak where there is one. Written by "
        "benchmarks/memory_fidelity.py --write-test-data; used by tests/test_memory_published.py."
    )
    path.write_text(json.dumps({"about": about, "rows": rows}, indent=1) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    if "--write-test-data" in sys.argv:
        write_test_data(
            Path(__file__).resolve().parent.parent / "tests" / "data" / "memory_rows.json"
        )
    else:
        published()
        mlperf_runs()
        hagemann_table("balanced" if "--split-balanced" in sys.argv else "uniform")
