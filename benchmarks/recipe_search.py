"""Does `planner suggest` find, for each Megatron-Bridge performance recipe's job (or each MLPerf
submission's), a layout at least as fast as the run's own (by planner's own model)? A check of
the search space: the search is exact over its space, so a run that beats its best is a layout
the space lacks.

    python benchmarks/recipe_search.py            # every recipe plan that fits
    python benchmarks/recipe_search.py L22 Q15    # some of them, by id
    python benchmarks/recipe_search.py --mlperf   # the MLPerf rows (benchmarks/mlperf.py)
    python benchmarks/recipe_search.py --zoo      # NVIDIA's Megatron-MoE-ModelZoo lines

Each plan file under examples/recipes/ (written by benchmarks/recipes.py from
benchmarks/data/bridge_recipes.md: settings only, no throughput figure of Megatron-Bridge's) is
taken as a job (its [parallel] table dropped; the training settings kept: precision and recipe,
CUDA graphs, optimizer dtypes) and searched with every dimension open (`top_k.search`, as
`planner suggest` with no bound); with --mlperf, each MLPerf row's job (benchmarks/mlperf.py);
with --zoo, each Megatron-MoE-ModelZoo line as `check --megatron-args` reads it
(benchmarks/moe_model_zoo.py; the bf16 lines at tp 1 without the --tp-comm-overlap Megatron
refuses there).
Printed per run: its step time, the search's best, their ratio (above 1: the run is faster) and
the search's layout; then the runs faster than the best by more than GAP (the layout fields the
search does not choose, DDP bucket sizes and Transformer Engine's TP-overlap slots, move an
MLPerf run's time by a few tenths of a percent) and the ratios' median. The runs that do not fit
in planner's memory model are left out (their time is not a layout the search could return).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import moe_model_zoo
from benchmarks.mlperf import load_mlperf
from benchmarks.recipe_data import load_recipes
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import cost, memory
from planner.search.space import Space
from planner.search.top_k import search

GAP = 0.01
"""A run faster than the search's best by more than this is a gap in the search space."""


def runs(wanted: set[str], mlperf: bool, zoo: bool) -> Iterator[tuple[str, str, Job, Layout]]:
    """(id, name, job, layout) of each run asked for."""
    if zoo:
        for row in moe_model_zoo.rows():
            if not wanted or row["id"] in wanted:
                plan = moe_model_zoo.read_plan(row)
                yield row["id"], f"{row['num_gpus']} {row['gpu']}", plan.job, plan.require_layout()
        return
    if mlperf:
        for c in load_mlperf():
            if not wanted or c.id in wanted:
                yield c.id, c.raw["hardware"]["catalog"], c.job, c.layout
        return
    for r in load_recipes():  # each recipe with a plan file (benchmarks/recipes.py writes them)
        if r.skip is None and (not wanted or r.id in wanted):
            plan = load_plan(r.plan_path)
            yield r.id, r.plan_path.name, plan.job, plan.require_layout()


def main() -> None:
    args = sys.argv[1:]
    mlperf, zoo = "--mlperf" in args, "--zoo" in args
    wanted = {a for a in args if a not in ("--mlperf", "--zoo")}
    gaps, ratios, left_out = [], [], 0
    started = time.perf_counter()
    head = f"{'id':40s} {'name':58s} {'run s':>9s} {'search s':>9s} {'ratio':>6s}"
    print(f"{head}  search's layout")
    for rid, name, job, layout in runs(wanted, mlperf, zoo):
        if not memory.estimate(job, layout).fits:
            left_out += 1
            continue
        own = cost.estimate(job, layout).step_time_s
        found = search(job, Space(), 1).candidates
        if not found:
            print(f"{rid:40s} {name:58s} {own:9.3f} {'-':>9s}  nothing found")
            gaps.append(rid)
            continue
        best = found[0]
        ratio = best.step_time / own
        ratios.append(ratio)
        if ratio > 1 + GAP:
            gaps.append(rid)
        print(
            f"{rid:40s} {name:58s} {own:9.3f} {best.step_time:9.3f} {ratio:6.3f}  "
            f"{best.layout.describe()}"
        )
    print(
        f"\n{len(ratios)} runs searched ({left_out} left out: they do not fit), "
        f"{time.perf_counter() - started:.0f} s; the run faster than the search's best by more "
        f"than {GAP:.0%}: {len(gaps)} {' '.join(gaps)}"
    )
    if ratios:
        print(
            f"search's best over the run: median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
