"""The top cost of a step (`Performance.bottleneck`): named only when it takes at least
BOTTLENECK_MIN_SHARE (5%) of the step, else "compute-bound"; the same verdict in the suggest table's
"top cost" column, explain's line and JSON `performance.bottleneck`.

Oracle: hand arithmetic on StepBreakdowns whose parts are exact binary fractions (comments give the
sums and shares), and for real plans the shares read back from their own JSON breakdown.
"""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from cli_run import run
from paths import REPO
from rich.console import Console

from planner.cli import render, render_suggest, report
from planner.inputs.job_request import JobArgs, load_job
from planner.inputs.layout import Layout
from planner.model.memory import MemoryReport, StageMemory
from planner.model.performance import (
    BOTTLENECK_MIN_SHARE,
    COMPUTE_BOUND,
    COST_NAMES,
    Performance,
    StepBreakdown,
)
from planner.search.top_k import Candidate

ZERO = {f.name: 0.0 for f in fields(StepBreakdown)}


def perf(**parts: float) -> Performance:
    b = StepBreakdown(**(ZERO | parts))
    return Performance(b, b.step_time, 1.0, 1.0, 1.0, 1.0, 0.5)


def shown(p: Performance) -> tuple[str, str, str]:
    """(suggest table cell, explain line, JSON value) for one Performance."""
    job = load_job(None, JobArgs())[0]
    mem = MemoryReport((StageMemory(0, 32, 1.0, 1.0, 1.0, 1.0, 1.0),), 2**40, 2**40, 3.0)
    console = Console(record=True, width=300, markup=False)
    console.print(render_suggest.candidates_table(job, [Candidate(Layout(dp=8), mem, p)], "x"))
    row = next(line for line in console.export_text().splitlines() if line.startswith("│ 1 "))
    cell = row.rstrip(" │").rsplit("│", 1)[1].strip()
    return (
        cell,
        render.top_cost_text(p),
        report.performance_dict(p, sparse_attention=False)["bottleneck"],
    )


def test_threshold_is_five_percent() -> None:
    assert BOTTLENECK_MIN_SHARE == 0.05


def test_a_cost_at_five_percent_is_named() -> None:
    # 18.75 + 1.0 + 0.25 = 20.0 s; the bubble is 1.0 / 20.0 = 5.0% (the threshold itself)
    p = perf(compute=18.75, bubble=1.0, other=0.25)
    assert p.step_time_s == 20.0
    assert p.bottleneck() == "bubble"
    cell, line, js = shown(p)
    assert cell == js == "bubble"
    assert line == "largest cost besides compute: bubble (5% of the step)"


def test_a_cost_just_below_five_percent_is_not() -> None:
    # 18.75 + 0.999 + 0.251 = 20.0 s; the bubble is 0.999 / 20.0 = 4.995%
    p = perf(compute=18.75, bubble=0.999, other=0.251)
    assert p.step_time_s == pytest.approx(20.0)
    assert p.bottleneck() == COMPUTE_BOUND
    cell, line, js = shown(p)
    assert cell == js == COMPUTE_BOUND
    assert line.startswith("compute-bound: no cost besides compute reaches 5%")


def test_the_optimizer_at_a_fifth_of_a_percent_is_compute_bound() -> None:
    # 19.95 + 0.04 + 0.01 = 20.0 s: the optimizer is 0.04 / 20 = 0.2% of the step
    p = perf(compute=19.95, optimizer=0.04, other=0.01)
    assert p.bottleneck() == COMPUTE_BOUND


def test_the_largest_of_several_costs_is_named() -> None:
    # 14 + 2 (TP) + 3 (DP) + 1 (recompute) = 20 s: DP traffic 15%, TP 10%, recompute 5%
    p = perf(compute=14.0, tp_comm_exposed=2.0, dp_comm_exposed=3.0, recompute=1.0)
    assert p.bottleneck() == "DP traffic"
    # hidden traffic is not a cost of the step, however large
    p = perf(compute=19.0, tp_comm_hidden=15.0, other=1.0)
    assert p.bottleneck() == "other"  # 1 / 20 = 5%


@pytest.mark.parametrize(
    "plan", ["examples/llama3.1-8b-h100.toml", "tests/data/plans/launch-llama3.1-405b.toml"]
)
def test_explain_agrees_with_its_breakdown(plan: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", str(REPO / plan), "--json"], capsys)
    assert code == 0, err
    p = json.loads(out)["performance"]
    shares = {COST_NAMES[f]: p["breakdown_s"][f] / p["step_time_s"] for f in COST_NAMES}
    name, share = max(shares.items(), key=lambda kv: kv[1])
    expected = name if share >= BOTTLENECK_MIN_SHARE else COMPUTE_BOUND
    assert p["bottleneck"] == expected
    code, out, err = run(["explain", str(REPO / plan)], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    if expected == COMPUTE_BOUND:
        assert "compute-bound: no cost besides compute reaches 5% of the step" in text
    else:
        assert f"largest cost besides compute: {name} ({share:.0%} of the step)" in text


def test_check_writes_a_near_miss_so_it_can_be_read() -> None:
    """A peak 20 MiB over 77.3 GiB read 'peak 77.3 GiB of 77.3 GiB ..., 0.0 GiB over': two
    places where one writes both alike, and MiB below 0.05 GiB. Hand arithmetic: 77.3 GiB =
    83,000,586,649.6 bytes; + 20 MiB = 20,971,520 bytes."""
    cap = 77.3 * 2**30
    assert render.against(cap + 20 * 2**20, cap) == ("77.32", "77.30")
    assert render.against(70 * 2**30, cap) == ("70.0", "77.3")
    assert render.over(20 * 2**20) == "20 MiB"
    assert render.over(2**30) == "1.0 GiB"
    assert render.over(100) == "1 MiB"  # never '0 MiB over' for a layout that does not fit
