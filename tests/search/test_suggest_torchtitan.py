"""suggest --framework torchtitan searches only what torchtitan runs, and its plan is one that
check and launch --target torchtitan accept. Oracle: planner's own rules on torchtitan
(planner/search/rules/torchtitan.py, from torchtitan e347b1e5) applied to every candidate, and the
written plan read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.plan import load_plan
from planner.search.rules import check_plan

JOB = ["--model", "llama3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "64", "--top", "5"]


def test_candidates_are_torchtitan_layouts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "best.toml"
    code, out, err = run(
        ["suggest", *JOB, "--framework", "torchtitan", "--json", "--write-plan", str(plan)], capsys
    )
    assert code == 0, err
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        par = row["parallel"]
        assert par["zero_stage"] == (3 if par["dp"] * par["cp"] > 1 else 0)
        assert not par["tp_comm_overlap"] and not par["ep_comm_overlap"]
        assert par.get("cpu_offloading_num_layers", 0) == 0
    written = check_plan(load_plan(plan))
    assert written.job.framework == "torchtitan"
    code, out, err = run(["launch", str(plan), "--target", "torchtitan"], capsys)
    assert code == 0, err
    assert "[parallelism]" in out


def test_megatron_search_is_unchanged_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["suggest", *JOB, "--json"], capsys)
    assert code == 0
    assert any(r["parallel"]["zero_stage"] == 1 for r in json.loads(out)["candidates"])


def test_unknown_framework_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["suggest", *JOB, "--framework", "deepspeed"], capsys)
    assert code == 2 and "--framework" in err and "torchtitan" in err
