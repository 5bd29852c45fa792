"""planner.search.dp_floor against its oracle, the exact model (`cost.estimate`): over a grid of
bases of brute-forced problems (every ZeRO 2 and 3 stage the search tries of each, every rung of
each stage), the floor is no more than the step's DP sync plus optimizer (`dp_comm_exposed +
optimizer` of the estimate's breakdown), and the base's bound plus the floor no more than the
step; and the floor is not loose everywhere: somewhere it is within 10% of that sum (the windows
hide all but each pass's first unit, `dp_floor.sync_floor`'s equality case), so a floor 1.1 times
as high would fail the first assertion."""

from __future__ import annotations

import pytest

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.search import dp_floor, rungs
from planner.search import space as space_mod
from planner.search.bound import base_bound
from planner.search.space import Space, Structure
from tests.search.brute_force import PROBLEMS, make_job, sample_layouts

NAMES = ["sc21-1.7b-32xa100", "mixtral-8x7b-16xh100", "llama8b-16xh100-s4096"]


def _deepseek() -> tuple[Job, Space, list[Layout]]:
    """DeepSeek-V3 on 512 H800 without pipelines (the search tries ZeRO 2 and 3 only there,
    `space.zero_stages`): fine-grained offloading's rungs, the MTP layers, dense first layers,
    the experts' data-parallel groups apart from the dense ones."""
    job = make_job("deepseek-v3", "h800-sxm-80gb", 512, 4096, 512)
    space = Space()
    lays = []
    for s in (Structure(1, 1, 1, 512, 64, 1), Structure(2, 1, 1, 256, 32, 2)):
        for mbs, vpp, split in space_mod.options(job, space, s)[::3]:
            lays += [b.layout for b in space_mod.bases(job, s, mbs, vpp, split, space)]
    return job, space, lays[:: max(len(lays) // 6, 1)]


def _cases(name: str) -> tuple[Job, Space, list[Layout]]:
    if name == "deepseek-v3":
        return _deepseek()
    job, space = PROBLEMS[name]
    return job, space, sample_layouts(name, 12)


@pytest.mark.parametrize("name", [*NAMES, "deepseek-v3"])
def test_sync_floor_below_every_rung(name: str) -> None:
    job, space, bases = _cases(name)
    closest = 0.0  # the largest floor / (DP sync + optimizer) seen
    checked = 0
    for base in bases:
        for z in space_mod.zero_stages(job, space, base):
            zbase = base.with_(zero_stage=z)
            if not dp_floor.applies(job, zbase):
                continue
            floor = dp_floor.sync_floor(job, zbase)
            bound = base_bound(job, base)
            for rung in rungs.every(job, base, space.recompute, space.offload)[::2]:
                perf = cost.estimate(job, rung.on(zbase))
                sync = perf.breakdown.dp_comm_exposed + perf.breakdown.optimizer
                assert floor <= sync, (rung.on(zbase).describe(), floor, sync)
                assert (bound + floor) * (1 - 1e-12) <= perf.step_time_s, rung.on(zbase).describe()
                closest = max(closest, floor / sync)
                checked += 1
    assert checked > 0
    # tight somewhere: 1.1 x the floor would be above the exact sync there
    assert closest * 1.1 > 1.0, closest
