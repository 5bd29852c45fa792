"""The benchmarks' bottleneck column names the largest cost besides compute as the CLI does:
with the host's eager kernel issue among the costs (`switch_notes.host_seconds`, which suggest's
top cost, explain and the JSON's `performance.bottleneck` weigh: `report.performance_dict`).

Oracle: the CLI's JSON for the same job and layout (`report.performance_dict`, what `planner
explain --json` prints), on a published row where the host's issue is the largest cost (Megatron-
Core's weak-scaling 1.7B on H100: its 0.034 s of eager issue is over 5% of the 0.44 s step and
over every other cost), which the rule without the host names compute-bound; and, for MLPerf's
table, `Performance.top_cost`'s definition: a host issue as long as the step is over every other
cost, each a part of the step."""

from __future__ import annotations

import sys

import pytest
from paths import REPO

sys.path.insert(0, str(REPO))

from benchmarks import fidelity, mlperf
from benchmarks.runs import load_published
from planner.cli import report, switch_notes
from planner.model.performance import COMPUTE_BOUND, HOST_ISSUE

ROW = "mcore-h100-weak-1.7b"


def test_fidelity_row_names_the_host_issue_as_the_cli_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = next(c for c in load_published() if c.id == ROW)
    p = case.estimate()
    issue = switch_notes.host_seconds(case.job, case.layout)
    cli = report.performance_dict(p, False, issue)["bottleneck"]
    assert cli == HOST_ISSUE
    assert p.bottleneck() == COMPUTE_BOUND  # without the host the rule reads otherwise
    fidelity._print_row(case, p, 0.0)
    row = capsys.readouterr().out
    assert row.rstrip().endswith(HOST_ISSUE), row


def test_mlperf_table_weighs_the_host_issue(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = mlperf.load_mlperf()[:2]
    monkeypatch.setattr(mlperf, "load_mlperf", lambda: cases)
    steps = {id(c.layout): c.estimate().step_time_s for c in cases}
    monkeypatch.setattr(switch_notes, "host_seconds", lambda job, lay: steps[id(lay)])
    mlperf.main()
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(tuple(c.id for c in cases))]
    assert len(rows) == len(cases)
    for row in rows:
        assert row.rstrip().endswith(HOST_ISSUE), row
