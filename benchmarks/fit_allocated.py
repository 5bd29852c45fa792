"""Fit the memory model's one allocator constant; check `allocated_gib` against Megatron-LM's own
functional tests.

    python benchmarks/fit_allocated.py          # fit, then the allocated-vs-measured table
    python benchmarks/fit_allocated.py --rows   # also every row of the fit and of the check

Data: benchmarks/data/megatron_functional_tests/ (NVIDIA/Megatron-LM d98e8a64; see its README):
the usable cases' golden values (digest 5-f; the held-out cases' values are not in the repo) with
their command lines. Rows: the first run of each case on each platform of the "dev" environment
(the container of the commit the command lines come from; "lts" runs an older Megatron-LM and
Transformer Engine whose kernels differ on the same line, e.g. deterministic mode keeps the s^2
attention scores there), on a GPU the catalog has (A100, H100, GB200), read by
`planner.inputs.megatron_args.to_plan` with the platform's GPU count (the CI recipe's nodes x GPUs
per node; 8 where no recipe names the case, one node as `_run_training.sh` launches by default).
The measurements come from the last rank (the last pipeline stage).

1. The fit. `mem-allocated-bytes` after a step (the last recorded value) is what stays allocated
   between steps: model states, FP8 caches, workspaces (`rank_states.persistent_bytes`). Its one
   unknown is buffers.TORCH_WORKSPACE_BYTES (PyTorch's cuBLAS workspaces, Megatron's gather
   buffer, RNG states): the median over the rows of measured - predicted-without-it. The median,
   not the mean: a few rows carry state the reader does not see (several distributed-optimizer
   instances, a vision encoder), and they should not move a per-GPU constant.
2. The check. The last stage's `allocated` against `mem-max-allocated-bytes` (the max over the
   recorded steps): median signed error, the share under-estimated by more than 10% (the target:
   median within 10%, at most 1 in 10 under by more than 10%), the worst rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_tests import summary
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.units import GIB
from planner.model import buffers, memory, rank_states

DATA = Path(__file__).resolve().parent / "data" / "megatron_functional_tests"
GPU = {"A100": "a100-sxm-80gb", "H100": "h100-sxm-80gb", "GB200": "gb200-nvl72"}
DEFAULT_GPUS = 8


@dataclass(frozen=True)
class Row:
    case: str
    gpu: str
    num_gpus: int
    plan: Plan
    peak: float
    """mem-max-allocated-bytes: the max over the recorded steps."""
    after_step: float | None
    """mem-allocated-bytes after the last recorded step."""


def _values(metric: dict[str, Any] | None) -> list[float]:
    return [v for v in (metric or {}).get("values", []) if v]


def load_rows() -> tuple[list[Row], dict[str, int]]:
    """The dev-environment first runs on catalog GPUs that the reader reads, and why the others
    were left out (counts by reason)."""
    golden = json.loads((DATA / "golden_values.json").read_text())
    lines = json.loads((DATA / "command_lines.json").read_text())
    cases = {c["name"]: c for c in lines["cases"]}
    rows: list[Row] = []
    skipped: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for f in golden["files"]:
        case = cases.get(f["case"])
        peak = _values(f["metrics"].get("mem-max-allocated-bytes"))
        why = None
        if case is None or not case["usable_for_calibration"]:
            why = "no usable command line"
        elif f["environment"] != "dev" or f["run"] != "first run":
            why = "lts environment or resumed run"
        elif f["gpu"] not in GPU:
            why = "no GPU named"
        elif not peak:
            why = "no mem-max-allocated-bytes"
        elif (f["case"], f["gpu"]) in seen:
            why = "same case and GPU twice"
        if why is None:
            n = (f.get("recipe_gpus") or [{"total_gpus": DEFAULT_GPUS}])[0]["total_gpus"]
            try:
                doc = megatron_args.to_plan(" ".join(case["model_args"]), GPU[f["gpu"]], n)
                plan = parse_plan(doc)
            except InputError as e:
                why = f"not read: {str(e).split(':')[1].strip()}"
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        seen.add((f["case"], f["gpu"]))
        after = _values(f["metrics"].get("mem-allocated-bytes"))
        rows.append(Row(f["case"], f["gpu"], n, plan, max(peak), after[-1] if after else None))
    return rows, skipped


def fit_workspace(rows: list[Row], show: bool) -> float:
    """TORCH_WORKSPACE_BYTES: the median of (measured after a step - predicted persistent bytes
    without it) over the rows that record the former."""
    residuals = []
    for r in rows:
        if r.after_step is None:
            continue
        job, lay = r.plan.job, r.plan.require_layout()
        rest = rank_states.persistent_bytes(job, lay, lay.pp - 1) - buffers.TORCH_WORKSPACE_BYTES
        residuals.append((r.after_step - rest, r))
    residuals.sort(key=lambda x: x[0])
    if show:
        print("fit rows (mem-allocated-bytes after a step - predicted persistent bytes), GiB:")
        for res, r in residuals:
            print(f"  {res / GIB:+7.3f}  {r.case[:72]:72} {r.gpu:5} {r.after_step / GIB:7.3f}")
    fitted = statistics.median(res for res, _ in residuals)
    q1, q3 = (residuals[len(residuals) // 4][0], residuals[3 * len(residuals) // 4][0])
    print(
        f"TORCH_WORKSPACE_BYTES: median of {len(residuals)} rows = {fitted / GIB:.3f} GiB "
        f"(quartiles {q1 / GIB:.3f} .. {q3 / GIB:.3f}); planner/model/buffers.py has "
        f"{buffers.TORCH_WORKSPACE_BYTES / GIB:.3f}"
    )
    return fitted


def check(rows: list[Row], show: bool) -> None:
    """The last stage's allocated against the measured peak."""
    errors = []
    for r in rows:
        job, lay = r.plan.job, r.plan.require_layout()
        last = memory.estimate(job, lay).stages[-1]
        errors.append((last.allocated / r.peak - 1, r, last.allocated))
    errors.sort(key=lambda x: x[0])
    signed = [e for e, _, _ in errors]
    print()
    print(summary("allocated vs mem-max-allocated-bytes, last stage, rows", signed))
    shown = errors if show else [*errors[:12], None, *errors[-6:]]
    for item in shown:
        if item is None:
            print("  ...")
            continue
        e, r, est = item
        print(
            f"  {e:+7.1%}  {r.case[:70]:70} {r.gpu:5} {r.num_gpus:3}  measured "
            f"{r.peak / GIB:7.3f}  predicted {est / GIB:7.3f} GiB  "
            f"{r.plan.require_layout().describe()}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", action="store_true", help="print every row")
    args = ap.parse_args()
    rows, skipped = load_rows()
    print(f"rows: {len(rows)} read; left out: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    fit_workspace(rows, args.rows)
    check(rows, args.rows)


if __name__ == "__main__":
    main()
