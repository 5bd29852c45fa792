"""Every published run that trained must be judged "fits" (issue: memory model).

Oracle: tests/data/memory_rows.json, the 41 runs of benchmarks/data/published_runs.yaml (each
trained on the GPUs it names), mapped to planner inputs by benchmarks/runs.py and written by
`benchmarks/memory_fidelity.py --write-test-data`. Where a run publishes its per-GPU peak, the
prediction must also be within MEASURED_TOLERANCE of it.
"""

from __future__ import annotations

import json

import pytest
from paths import DATA as DATA_DIR

from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.inputs.torchtitan import TorchtitanSection
from planner.inputs.units import GIB
from planner.inputs.userbuffers import UbSlot
from planner.model import memory

DATA = DATA_DIR / "memory_rows.json"

MEASURED_TOLERANCE = 0.10
"""The issue's target. Measured when written (the rows as torchtitan jobs, expandable segments
on): the torchtitan 8B rows -3% / +1% / -2%, the 70B 2D row -2%."""


def cases() -> list[tuple[str, Job, Layout, float | None]]:
    out = []
    for r in json.loads(DATA.read_text())["rows"]:
        section = ClusterSection(gpu=r["gpu"], num_gpus=r["num_gpus"], **r["cluster"])
        if "torchtitan" in r["job"]:
            r["job"]["torchtitan"] = TorchtitanSection(**r["job"]["torchtitan"])
        if "tp_overlap_cfg" in r["job"]:
            slots = r["job"]["tp_overlap_cfg"]
            r["job"]["tp_overlap_cfg"] = tuple((gemm, UbSlot(**slot)) for gemm, slot in slots)
        job = Job(
            arch=catalog.get_model(r["model"]),
            cluster=resolve_cluster(section, None),
            seq_length=r["seq_length"],
            global_batch_size=r["global_batch_size"],
            precision=r["precision"],
            **r["job"],
        )
        lay = {k: tuple(v) if isinstance(v, list) else v for k, v in r["layout"].items()}
        out.append((r["source_id"], job, Layout(**lay), r["measured_gib"]))
    return out


CASES = cases()


@pytest.mark.parametrize(("rid", "job", "layout", "measured"), CASES, ids=lambda x: str(x)[:40])
def test_published_runs_fit(rid: str, job: Job, layout: Layout, measured: float | None) -> None:
    rep = memory.estimate(job, layout)
    assert rep.fits, f"{rid}: peak {rep.peak / GIB:.1f} GiB > {rep.capacity / GIB:.1f}"


MEASURED = [c for c in CASES if c[3] is not None]


@pytest.mark.parametrize(("rid", "job", "layout", "measured"), MEASURED, ids=lambda x: str(x)[:40])
def test_measured_peaks_within_tolerance(
    rid: str, job: Job, layout: Layout, measured: float
) -> None:
    peak = memory.estimate(job, layout).peak / GIB
    assert peak == pytest.approx(measured, rel=MEASURED_TOLERANCE), rid


def test_every_run_is_covered() -> None:
    # 41 runs in published_runs.yaml, 4 with a measured per-GPU peak (all torchtitan)
    assert len(CASES) == 41
    assert len(MEASURED) == 4
