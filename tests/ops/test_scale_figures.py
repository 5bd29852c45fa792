"""`planner scale`'s operations figures: its table and its `--json` say the same thing.

Oracles: hand arithmetic in the comments (tokens per step over a round step time), the JSON's
own keys (each table cell is one of them, formatted), and the CLI contract (README: scale exits
0, 1 or 2).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from cli_run import run
from jobs import job

from planner.cli import render_scale
from planner.inputs import units
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance
from planner.search import scaling

JOB = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128)
BASE_PERF = cost.estimate(JOB, Layout(tp=8, sequence_parallel=True))
STEPS = {8: (Layout(tp=8), 2.0), 16: (Layout(tp=8, dp=2), 1.25)}
"""GPUs -> (layout, step time in s)."""


def _best(job: Job) -> tuple[Layout, Performance]:
    n = job.cluster.num_gpus
    layout, step = STEPS[n]
    per_gpu = 128 * 8192 / step / n
    return layout, replace(BASE_PERF, step_time_s=step, tokens_per_s_per_gpu=per_gpu)


def test_the_table_prints_the_json_effective_figures() -> None:
    """The table's tokens/s columns were headed "tokens/s" and "tokens/s/GPU" but held the
    effective figures (with failures), while `--json`'s `operations.tokens_per_s` and
    `performance.tokens_per_s_per_gpu` of the same names are failure-free, and no key held the
    per-GPU effective figure. By hand: 128 x 8,192 = 1,048,576 tokens a step; at 8 GPUs in
    2.0 s that is 524,288 tokens/s failure-free, 65,536 a GPU; at 16 GPUs in 1.25 s
    838,860.8 tokens/s, 52,428.8 a GPU. The effective figures are those x goodput (the
    default failure rate: below 1), and the efficiency at 16 is the ratio of the effective
    per-GPU figures, recomputable from the JSON alone."""
    curve = scaling.scale(JOB, [8, 16], _best)
    data = render_scale.curve_dict(curve)
    rows = render_scale.scale_rows(curve)
    cols = render_scale.SCALE_COLUMNS
    assert cols[2:4] == ("tokens/s\n(eff.)", "tokens/s/GPU\n(eff.)")
    assert "(tokens/s eff.: with failures" in str(render_scale.scale_table(curve).title)
    hand = {8: (524_288.0, 65_536.0), 16: (838_860.8, 52_428.8)}
    for row, point in zip(rows, data["points"], strict=True):
        o, perf = point["operations"], point["performance"]
        free, free_per_gpu = hand[point["num_gpus"]]
        # the failure-free keys keep their meaning
        assert o["tokens_per_s"] == pytest.approx(free, rel=1e-5)
        assert perf["tokens_per_s_per_gpu"] == pytest.approx(free_per_gpu, abs=0.05)
        # the effective ones are x goodput, below the failure-free ones
        assert 0 < o["goodput"] < 1
        assert o["effective_tokens_per_s"] == pytest.approx(free * o["goodput"], rel=1e-5)
        per_gpu = o["effective_tokens_per_s_per_gpu"]
        assert per_gpu == pytest.approx(free_per_gpu * o["goodput"], rel=1e-5)
        # and the table's cells are the effective keys, formatted
        assert row[2] == units.format_si(o["effective_tokens_per_s"])
        assert row[3] == f"{per_gpu:,.0f}"
        assert row[3] != f"{free_per_gpu:,.0f}"  # not the failure-free figure
    eff8, eff16 = (p["operations"]["effective_tokens_per_s_per_gpu"] for p in data["points"])
    assert data["points"][1]["efficiency"] == pytest.approx(eff16 / eff8, rel=1e-5)
    assert rows[1][4] == f"{eff16 / eff8:.0%}"


def test_scale_help_gives_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    """`scale --help` said "Exit 0, 1 when no size has a layout that fits", but bad input exits 2
    (README's command table: 0, 1, 2; the module docstring), as does --failure-rate 3 at 16,384
    GPUs: 3 x 16,384 / 86,400 s is an interruption every 1.76 s, no progress."""
    code, out, _ = run(["scale", "--help"], capsys)
    assert code == 0
    text = " ".join(out.split())
    assert "Exit 0; 1 when no size has a layout that fits; 2 for bad input" in text
    code, _, err = run(["scale", "--num-gpus", "16384", "--failure-rate", "3"], capsys)
    assert code == 2 and "planner: error: --failure-rate" in err
