"""`search_rows` by goodput or cost is exact: its top rows are the brute force's (every row of the
job, each priced by `operations.objective_value` and sorted), not only the best of the fastest
max(4 x top, 20) rows by time.

Goodput depends on the layout through the ZeRO stage (`checkpoint_size`: Megatron-FSDP's fp32
main weights and state at ZeRO 2/3, weights + fp32 master + state at 0/1), so a slower layout can
rank first. With the default sizes (12 against 14 bytes a parameter) no job tried put such a
layout past the 20th row by time; the test makes the gap large by pricing the checkpoint at ZeRO
2/3 as 1 byte a parameter and at 0/1 as 100,000 (800 TB for 8B parameters, a save that blocks
for hours), so that goodput ranks the sharded layouts first wherever they sit by time.
`objective_floor`, the bound that stops the fetching, takes the same sizes
(`resilience.least_wall_per_work`), so it stays under every row's score.

Oracle: the brute force (`top_k.search` asked for more rows than the job has, then each row's
score); and hand arithmetic for the floor against every row's own score.
"""

from __future__ import annotations

import pytest

from planner.inputs.job_request import JobArgs, load_job
from planner.inputs.plan import Job
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import OpsParams
from planner.search import top_k
from planner.search.space import Space
from planner.search.suggest import search_rows
from planner.search.top_k import rank_key
from planner.search.twins import Row

ALL = 10**6


def _sharded_small(job: Job, zero_stage: int = 0) -> float:
    return 1.0 if zero_stage >= 2 else 100_000.0


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resilience, "checkpoint_bytes_per_param", _sharded_small)


def _job() -> Job:
    # 8B on 16 H100, 4,096-token sequences, 128 a step: ZeRO 1, 2 and 3 all fit
    return load_job(None, JobArgs("llama3.1-8b", "h100-sxm-80gb", 16, None, 4096, 128))[0]


def _score(job: Job, objective: str, row: Row[top_k.Candidate]) -> tuple[object, ...]:
    cand = row.candidate
    perf, zero = cand.performance, cand.layout.zero_stage
    return ops.objective_value(job, perf, objective, OpsParams(), zero), rank_key(cand)


@pytest.mark.parametrize("objective", ["goodput", "cost"])
def test_rows_by_objective_are_the_brute_force(sizes: None, objective: str) -> None:
    job = _job()
    every = top_k.search(job, Space(), ALL, fold_twins=True).rows
    assert len(every) < ALL
    reference = sorted(every, key=lambda r: _score(job, objective, r))[:5]
    # the premise: a row the old rule (best of the 20 fastest) never saw ranks in the top 5
    by_time = [r.candidate.layout for r in every]
    assert max(by_time.index(r.candidate.layout) for r in reference) >= 20
    _, rows = search_rows(job, Space(), 5, objective=objective)
    assert [r.candidate.layout for r in rows] == [r.candidate.layout for r in reference]


def test_floor_is_under_every_row(sizes: None) -> None:
    """No row scores below the floor of its own step (the bound the fetching stops on)."""
    job = _job()
    for row in top_k.search(job, Space(), ALL, fold_twins=True).rows:
        step = row.candidate.performance.step_time_s
        for objective in ("throughput", "goodput", "cost"):
            floor = ops.objective_floor(job, step, objective, OpsParams())
            assert floor <= _score(job, objective, row)[0] * (1 + 1e-12)
