"""The pooled suggest's $ per million tokens is the figure explain and scale print (checkpoints
and failures included, `Operations.usd_per_million_tokens`), and its cost objective ranks by it,
exactly. QA: `suggest examples/pools-llama3.1-70b-h100-a100.toml --json` gave 1.1305 $/Mtok
(failure-free) for the plan `explain --json` priced at 1.1489 (goodput 0.984005).

Oracles:
- hand arithmetic: (8 x $3.24 + 8 x $1.99) / 3600 x step / 262,144 tokens x 1e6 / goodput (the
  catalog's H100 and A100 prices, global batch 64 x seq 4096 tokens a step), with explain's
  goodput of the written plan;
- `planner explain --json` of the plan suggest writes (pooled), and of the plan the single-kind
  suggest writes for one pool on its own (the pooled JSON's `single_pool` rows);
- a brute force: every layout of the pooled search split with no cut (tests/search/
  pool_brute.py), priced by `operations.operations`, ranked and its twins folded;
- the exact model (`resilience.resilience`) over a grid, for the bound the cut relies on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from pool_brute import every_plan

from planner.inputs.plan import Job, load_plan, parse_plan
from planner.ops import operations, resilience
from planner.ops.assumptions import AssumptionError, OpsParams
from planner.ops.figures import significant
from planner.search.pool_plan import PoolPlan
from planner.search.top_k import simplicity
from planner.search.twins import fold

HEAD = 3.0
JOB = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {
        "pools": [
            {"name": "h100", "gpu": "h100-sxm-80gb", "num_gpus": 8},
            {"name": "a100", "gpu": "a100-sxm-80gb", "num_gpus": 8},
        ],
        "between_pools": {"bandwidth_gb_per_s_per_gpu": 25.0, "latency_us": 10},
    },
    "training": {"seq_length": 4096, "global_batch_size": 64},
}
TOML = """[model]
name = "llama3.1-8b"

[cluster]
[[cluster.pools]]
name = "h100"
gpu = "h100-sxm-80gb"
num_gpus = 8

[[cluster.pools]]
name = "a100"
gpu = "a100-sxm-80gb"
num_gpus = 8

[cluster.between_pools]
bandwidth_gb_per_s_per_gpu = 25.0
latency_us = 10

[training]
seq_length = 4096
global_batch_size = 64
"""
TOP = 8


def _job() -> Job:
    return parse_plan(JOB).job


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def _suggest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict, Path]:
    job, plan = tmp_path / "job.toml", tmp_path / "plan.toml"
    job.write_text(TOML)
    argv = ["suggest", str(job), "--objective", "cost", "--top", str(TOP)]
    argv += ["--headroom", str(HEAD), "--write-plan", str(plan)]
    return _json(argv, capsys), plan


def test_pooled_usd_is_explains_with_failures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, plan = _suggest(tmp_path, capsys)
    first = data["candidates"][0]
    explained = _json(["explain", str(plan), "--tokens", "1T"], capsys)
    o = explained["operations"]
    step = explained["performance"]["step_time_s"]
    assert step == first["performance"]["step_time_s"]
    # (8 x 3.24 + 8 x 1.99) $/h / 3600 x step / (64 x 4096) tokens x 1e6 / goodput
    by_hand = (8 * 3.24 + 8 * 1.99) / 3600 * step / (64 * 4096) * 1e6 / o["goodput"]
    assert first["usd_per_million_tokens"] == pytest.approx(by_hand, rel=1e-5)
    # explain's JSON prints its figures to six significant digits
    assert significant(first["usd_per_million_tokens"]) == o["usd_per_million_tokens"]
    assert o["goodput"] < 1  # the failure-free figure is another number


def test_single_pool_usd_is_explains_of_its_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pooled JSON's single-pool rows (each pool's best plan on its own, at its price) and
    explain's figure for the single-kind suggest's first pick on that pool's GPUs."""
    data, _ = _suggest(tmp_path, capsys)
    h100 = next(s for s in data["single_pool"] if s["pool"] == "h100")
    plan = tmp_path / "h100.toml"
    argv = ["suggest", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    argv += ["--seq-length", "4096", "--global-batch-size", "64", "--headroom", str(HEAD)]
    code, _, err = run([*argv, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    assert load_plan(plan).require_layout().describe() == h100["layout"]
    o = _json(["explain", str(plan), "--tokens", "1T"], capsys)["operations"]
    assert significant(h100["usd_per_mtok"]) == o["usd_per_million_tokens"]


def _usd(q: PoolPlan) -> float:
    """$ per million tokens of a pooled plan as explain prices it (default assumptions)."""
    o = operations.operations(q.job, q.performance, None, zero_stage=q.layout.zero_stage)
    assert o.usd_per_million_tokens is not None
    return o.usd_per_million_tokens


def test_cost_ranking_is_the_brute_forces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The top rows by $ per token with failures: suggest --objective cost (its cuts) against
    every layout's plan priced by `operations`, ranked (then step, `simplicity`), twins
    folded."""
    data, _ = _suggest(tmp_path, capsys)
    plans = every_plan(_job(), HEAD)
    ranked = sorted(
        plans,
        key=lambda q: (_usd(q), q.performance.step_time_s, simplicity(q.layout)),
    )
    rows = fold(ranked)[:TOP]
    want = [_usd(r.candidate) for r in rows]
    got = [c["usd_per_million_tokens"] for c in data["candidates"]]
    assert got == pytest.approx(want, rel=1e-12)
    steps = [c["performance"]["step_time_s"] for c in data["candidates"]]
    assert steps == [round(r.candidate.performance.step_time_s, 4) for r in rows]


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("rate", [4.7e-4, 1e-2, 0.3])
def test_least_wall_per_work_is_under_every_goodput(asynchronous: bool, rate: float) -> None:
    """What the cost cut divides by (`resilience.least_wall_per_work`) is no more than 1 /
    goodput at any step time, ZeRO stage or run length: the exact model over a grid."""
    job = _job()
    params = OpsParams(failure_rate_per_gpu_day=rate, async_checkpoint=asynchronous)
    least = resilience.least_wall_per_work(job, params)
    assert least > 1
    seen = []
    for step in (0.05 * 1.6**k for k in range(28)):
        for zero in (0, 1, 2, 3):
            for run_steps in (None, 1, 7, 10**6):
                try:
                    r = resilience.resilience(job, step, params, run_steps, zero)
                except AssumptionError:  # no progress at this step
                    continue
                seen.append(1 / r.goodput)
    assert len(seen) > 100 and min(seen) >= least
    assert min(seen) < least * 1.01  # and near it: the cut stays tight


def test_cost_step_is_the_usd_over_one_constant() -> None:
    """`pool_costs.cost_step_s` (what the cut and the ranking read) is $ per token over one
    constant of the job, never below the step, for every plan of the brute force."""
    from planner.search.pool_costs import cost_step_s

    job = _job()
    least = resilience.least_wall_per_work(job)
    plans = every_plan(job, HEAD)
    ratios = set()
    for q in plans:
        rank = cost_step_s(q.job, q.layout, q.performance, least)
        assert rank >= q.performance.step_time_s
        ratios.add(round(_usd(q) / rank, 12))
    assert len(ratios) == 1
