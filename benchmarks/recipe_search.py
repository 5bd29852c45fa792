"""Does `planner suggest` find, for each Megatron-Bridge performance recipe's job, a layout at
least as fast as the recipe's own (by planner's own model)? A check of the search space: the
search is exact over its space, so a recipe that beats its best is a layout the space lacks.

    python benchmarks/recipe_search.py            # every recipe plan that fits
    python benchmarks/recipe_search.py L22 Q15    # some of them, by id

Each plan file under examples/recipes/ (written by benchmarks/recipes.py from
benchmarks/data/bridge_recipes.md: settings only, no throughput figure of Megatron-Bridge's) is
taken as a job (its [parallel] table dropped; the training settings kept: precision and recipe,
CUDA graphs, optimizer dtypes) and searched with every dimension open (`top_k.search`, as
`planner suggest` with no bound). Printed per recipe: its step time, the search's best, their
ratio (above 1: the recipe is faster, a gap in the space) and the search's layout; then the count
of gaps and the median ratio. The recipes that do not fit in planner's memory model are left out
(their time is not a layout the search could return).
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs.plan import load_plan
from planner.model import cost, memory
from planner.search.space import Space
from planner.search.top_k import search

PLANS = Path(__file__).resolve().parent.parent / "examples" / "recipes"
ID = re.compile(r"^# ([A-Z]\d+): ")


def recipe_id(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    m = ID.match(first)
    return m.group(1) if m else path.stem


def main() -> None:
    wanted = set(sys.argv[1:])
    gaps, ratios, left_out = [], [], 0
    started = time.perf_counter()
    head = f"{'id':5s} {'plan':58s} {'recipe s':>9s} {'search s':>9s} {'ratio':>6s}"
    print(f"{head}  search's layout")
    for path in sorted(PLANS.glob("*.toml")):
        rid = recipe_id(path)
        if wanted and rid not in wanted:
            continue
        plan = load_plan(path)
        if not memory.estimate(plan.job, plan.layout).fits:
            left_out += 1
            continue
        own = cost.estimate(plan.job, plan.layout).step_time_s
        found = search(plan.job, Space(), 1).candidates
        if not found:
            print(f"{rid:5s} {path.name:58s} {own:9.3f} {'-':>9s}  nothing found")
            gaps.append(rid)
            continue
        best = found[0]
        ratio = best.step_time / own
        ratios.append(ratio)
        if ratio > 1 + 1e-9:
            gaps.append(rid)
        print(
            f"{rid:5s} {path.name:58s} {own:9.3f} {best.step_time:9.3f} {ratio:6.3f}  "
            f"{best.layout.describe()}"
        )
    print(
        f"\n{len(ratios)} recipes searched ({left_out} left out: they do not fit), "
        f"{time.perf_counter() - started:.0f} s; the recipe faster than the search's best: "
        f"{len(gaps)} {' '.join(gaps)}"
    )
    if ratios:
        print(
            f"search's best over the recipe: median {statistics.median(ratios):.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
