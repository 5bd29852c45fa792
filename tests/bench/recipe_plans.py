"""NVIDIA's Megatron-Bridge performance recipes as benchmarks/recipes.py reads them (every row,
by id, and the ones with a plan file), shared by the test_recipes*.py files.
"""

from __future__ import annotations

import sys

from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import recipes
from planner.inputs.plan import load_plan

ALL = recipes.load_recipes()
BY_ID = {r.id: r for r in ALL}
MODELLED = [r for r in ALL if not r.skip]


def stages(r: recipes.Recipe) -> tuple[str, ...]:
    plan = load_plan(r.plan_path)
    arch = plan.job.arch
    return plan.require_layout().stages(arch.num_layers, arch.mtp_num_layers)
