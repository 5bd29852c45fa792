"""torchtitan jobs whose pipeline schedule runs fewer micro-batches than pipeline ranks, from the
command line: `check` of a torchtitan TOML prices them (at 718c826 it exited 2: "needs at least
pipeline_parallel_degree (4) micro-batches (got 2): with fewer, the pipeline never fills, which
planner does not model"), `explain` draws them, and `suggest` returns them (at 718c826: exit 1,
"no micro-batch / vpp satisfies the schedule").

Oracles: torch runs them (pytorch/pytorch 00722e64 torch/distributed/pipelining/schedules.py:
ScheduleInterleaved1F1B takes max(1, m // pp) = 1 round of m, raising only where m is no
multiple of the rounds); the bubble is the step of torch's own order over the plan's stages
(`looped_order.looped_step`, checked against torch's construction and by hand in
tests/model/test_looped_order.py) less m times the slowest stage; the written plan's own
`check`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import torchtitan_config
from planner.model import cost
from planner.model.looped_order import looped_step

TOML = """\
# planner-gpu: h100-sxm-80gb
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 2
seq_len = 8192
[parallelism]
pipeline_parallel_degree = 4
data_parallel_shard_degree = 2
pipeline_parallel_microbatch_size = 1
pipeline_parallel_schedule = "Interleaved1F1B"
[activation_checkpoint]
mode = "full"
"""


def test_check_prices_a_toml_of_fewer_micro_batches_than_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """local_batch_size 2 / microbatch 1: m = 2 micro-batches over pp 4 (vpp 2, torchtitan's
    default stages per rank for Interleaved1F1B)."""
    path = tmp_path / "job.toml"
    path.write_text(TOML)
    code, out, err = run(
        ["check", "--torchtitan-config", str(path), "--num-gpus", "8", "--json"], capsys
    )
    assert code == 0, err
    got = json.loads(out)
    par = got["parallel"]
    assert (par["pp"], par["vpp"], par["dp"], par["micro_batch_size"]) == (4, 2, 2, 1)
    plan = torchtitan_config.load(path, None, 8)
    job, lay = plan.job, plan.require_layout()
    perf = cost.estimate(job, lay)
    assert got["performance"]["step_time_s"] == pytest.approx(perf.step_time_s, abs=1e-4)  # JSON
    fwd, bwd = [f for f, _ in perf.stages], [b for _, b in perf.stages]
    step = looped_step("Interleaved1F1B", 2, 2, fwd, bwd, [0.0] * 4)  # reads no W
    want = step - 2 * max(f + b for f, b in perf.stages)
    assert got["performance"]["breakdown_s"]["bubble"] == pytest.approx(want, abs=1e-4)
    assert perf.breakdown.bubble == pytest.approx(want, rel=1e-9)
    code, out, err = run(
        ["explain", "--torchtitan-config", str(path), "--num-gpus", "8", "--timeline",
         str(tmp_path / "t.svg")],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    assert "longest path through torch's order" in " ".join(out.split())
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


def test_suggest_returns_layouts_of_fewer_micro_batches_than_ranks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Global batch 4 on 8 GPUs at tp 1, cp 1, pp 4: dp 2, so every layout runs m = 4 / (2 x
    mbs) <= 2 micro-batches over 4 ranks (1F1B raises there; the looped schedules run it). The
    picks are such layouts, and the written plan checks to the same step time."""
    plan = tmp_path / "best.toml"
    argv = ["suggest", "--model", "llama3.1-8b", "--num-gpus", "8", "--global-batch-size", "4"]
    argv += ["--framework", "torchtitan", "--tp", "1", "--cp", "1", "--pp", "4", "--top", "3"]
    code, out, err = run([*argv, "--json", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        par = row["parallel"]
        m = 4 // (par["dp"] * par["micro_batch_size"])
        assert par["pp"] == 4 and par["vpp"] >= 2 and m < par["pp"]
    code, out, err = run(["check", str(plan), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["performance"]["step_time_s"] == rows[0]["performance"]["step_time_s"]
