"""suggest --framework torchtitan on a job whose schedule is ZBVZeroBubble: every layout it
lists places its stages in a V (`Layout.v_stages`), and `check` of each plan written from it
predicts the same step time and memory, bit for bit.

Oracles: the suggest output of the same run (its JSON and its rows) against `check` of the plan
it writes; torchtitan's placement (e347b1e5 distributed/pipeline_parallel.py:447-469: rank r
builds stages r and 2 pp - 1 - r) and hand arithmetic on Llama 3.1 8B's shape for rank 0's
weights (hidden 4096, vocabulary 128256 untied, 218,112,000 parameters a layer; FSDP2 over
dp x cp = 4 under pipelining: 4 / 4 + 2 bytes a parameter)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from plan_text import titan_job, write

from planner.inputs import plan_writer
from planner.inputs.plan import load_plan, parse_plan
from planner.model import cost, memory
from planner.search.rules import check_plan
from planner.search.space import Bound, Space
from planner.search.suggest import search_rows

JOB = (
    titan_job()
    + """\
[torchtitan]
pipeline_schedule = "ZBVZeroBubble"
"""
)
LAYER, EDGE, H = 218_112_000, 128_256 * 4096, 4096


def test_the_written_v_plan_checks_to_the_same_step_and_peak(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = write(tmp_path, JOB, "job.toml")
    plan = tmp_path / "best.toml"
    cmd = ["suggest", str(job), "--framework", "torchtitan", "--pp", "2", "--vpp", "2"]
    code, out, err = run([*cmd, "--json", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    best = json.loads(out)["candidates"][0]
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    checked = json.loads(out)
    assert checked["performance"]["step_time_s"] == best["performance"]["step_time_s"]
    assert checked["memory"]["peak_gib"] == best["memory"]["peak_gib"]
    written = check_plan(load_plan(plan))
    lay = written.require_layout()
    # rank 0 holds its layers, the embedding, the output layer and the final norm
    n0 = lay.stage_layers(32)[0]
    rank0 = memory.estimate(written.job, lay).stages[0]
    shards = lay.dp * lay.cp
    want = (4 / shards + 2) * (n0 * LAYER + 2 * EDGE + H)
    assert rank0.weights == pytest.approx(want, rel=1e-12)
    assert lay.v_stages and lay.output_rank == 0


def test_every_listed_v_layout_checks_as_suggest_scored_it() -> None:
    """The top rows of the search (pp 2 x vpp 2, every split and setting it tries), each written
    as a plan and read back: the same layout, step time and peak as the row."""
    job = parse_plan(tomllib.loads(JOB)).job
    space = Space(framework="torchtitan", pp=Bound(2, 2), vpp=Bound(2, 2))
    _, rows = search_rows(job, space, 5)
    assert rows
    for row in rows:
        c = row.candidate
        titan = getattr(c, "titan", job.titan)
        assert c.layout.v_stages and c.layout.output_rank == 0
        text = plan_writer.render(
            replace(job, torchtitan=titan), c.layout, {"name": job.arch.name}, []
        )
        back = check_plan(parse_plan(tomllib.loads(text)))
        lay = back.require_layout()
        assert lay.chunk_layers(32) == c.layout.chunk_layers(32)
        assert cost.estimate(back.job, lay).step_time_s == c.step_time
        assert memory.estimate(back.job, lay).peak == c.memory.peak


@pytest.mark.parametrize(
    ("schedule", "n", "pp", "vpps"),
    [
        ("ZBVZeroBubble", 8, 2, {2}),
        ("ZBVZeroBubble", 8, 4, {2}),
        ("1F1B", 8, 2, {1}),
        ("Interleaved1F1B", 8, 4, {2, 3, 4, 5, 6, 7, 8}),
    ],
)
def test_a_pinned_schedule_is_searched_at_the_stages_it_takes(
    schedule: str,
    n: int,
    pp: int,
    vpps: set[int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A job that pins torchtitan's schedule, searched with --pp alone: every candidate at the
    stages per rank the schedule takes (rules.torchtitan_shapes.schedule: ZB-V two, 1F1B one,
    Interleaved1F1B two or more). QA: the search offered vpp 1, 4 or 6 beside them, and suggest
    exited 2 on its own top row ("vpp 1: ... takes exactly two stages per rank")."""
    path = write(
        tmp_path,
        titan_job(num_gpus=n) + f'[torchtitan]\npipeline_schedule = "{schedule}"\n',
        "job.toml",
    )
    argv = ["suggest", str(path), "--framework", "torchtitan", "--pp", str(pp), "--top", "5"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    candidates = json.loads(out)["candidates"]
    assert candidates
    assert {c["parallel"]["vpp"] for c in candidates} <= vpps
