"""`planner suggest` and `planner scale` say which job they planned and which of its values nobody
gave: "(default)" on stderr, `defaulted` in the JSON.

Oracle: the bundled default job (planner.inputs.job_request.DEFAULT_JOB) and the fields each
command line or job file below sets, read off by eye.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.inputs.job_request import DEFAULT_JOB

NO_PARALLEL = REPO / "tests" / "data" / "plans" / "no-parallel.toml"  # no precision in it
ALL = ["model", "gpu", "num_gpus", "seq_length", "global_batch_size", "precision"]


def flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps stderr at 80 columns when it is not a terminal


@pytest.mark.parametrize(
    "argv, defaulted",
    [
        ([], ALL),
        (["--model", "llama3.1-8b", "--num-gpus", "16"], ALL[1:2] + ALL[3:]),
        (
            ["--nodes", "2", "--seq-length", "4096"],
            ["model", "gpu", "global_batch_size", "precision"],
        ),
        ([str(NO_PARALLEL)], ["precision"]),
        ([str(NO_PARALLEL), "--precision", "bf16"], []),
    ],
    ids=["nothing", "model-and-gpus", "nodes", "job-file", "job-file-and-flag"],
)
def test_suggest_json_lists_the_defaulted_fields(
    argv: list[str], defaulted: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["suggest", *argv, "--top", "1", "--json"], capsys)
    assert code == 0, err
    job = json.loads(out)["job"]
    assert job["defaulted"] == defaulted
    assert job["framework"] == "megatron"  # none of these names another (plan_types.Framework)
    training = DEFAULT_JOB["training"]
    for key in ("seq_length", "global_batch_size", "precision"):
        if key in defaulted:
            assert job[key] == training[key]
    assert "(default)" not in err  # --json: the job lines stay off stderr too


def test_suggest_marks_defaults_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suggest", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
    code, out, err = run([*argv, "--top", "1"], capsys)
    assert code == 0, err
    text = flat(err)
    assert "planning (flags): model llama3.1-8b, gpu h100-sxm-80gb, num_gpus 16, " in text
    assert (
        "seq_length 8192 (default), global_batch_size 128 (default), precision bf16 (default)"
        in text
    )
    assert "set with --seq-length, --global-batch-size, --precision" in text
    assert "(default)" not in out


def test_suggest_job_file_marks_only_what_it_leaves_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["suggest", str(NO_PARALLEL), "--top", "1"], capsys)
    assert code == 0, err
    text = flat(err)
    assert f"planning ({NO_PARALLEL}): model llama3.1-8b, gpu h100-sxm-80gb, num_gpus 8, " in text
    assert "seq_length 8192, global_batch_size 128, precision bf16 (default)" in text
    assert text.count("(default)") == 2  # the mark and its legend


def test_a_path_with_brackets_prints_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names and paths are not rich markup: "[bold]" in them is text, not a style."""
    job = tmp_path / "[bold]job.toml"
    job.write_text(NO_PARALLEL.read_text())
    plan = tmp_path / "[red]plan.toml"
    code, out, err = run(["suggest", str(job), "--top", "1", "--write-plan", str(plan)], capsys)
    assert code == 0, err
    # rich may wrap a long path anywhere, also at "]" (a longer tmp path under pytest-xdist),
    # so compare without whitespace: markup read as a style would drop "[bold]" altogether
    assert "".join(str(job).split()) in "".join(err.split())
    assert f"wrote {plan}" in out.replace("\n", "")


def test_scale_marks_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["scale", "--model", "llama3.1-8b", "--seq-length", "4096"]
    code, out, err = run([*base, "--num-gpus", "8,16", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["defaulted"] == ["gpu", "global_batch_size", "precision"]
    code, out, err = run([*base, "--num-gpus", "8,16"], capsys)
    assert code == 0, err
    text = flat(err)
    assert (
        "scaling (flags): model llama3.1-8b, gpu h100-sxm-80gb (default), num_gpus 8,16, " in text
    )
    assert "seq_length 4096, global_batch_size 128 (default)" in text
    assert "days: give --tokens" in flat(out)


def test_scale_default_sizes_are_marked(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["scale", "--model", "llama3.1-8b", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["defaulted"] == ["gpu", "num_gpus", "seq_length", "global_batch_size", "precision"]
    assert [p["num_gpus"] for p in data["points"]] == [8, 16, 32, 64, 128, 256, 512, 1024]


def test_nothing_fits_json_names_the_job_too(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["suggest", "--model", "llama3.1-405b", "--num-gpus", "8", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 1, err
    job = json.loads(out)["job"]
    assert (job["model"], job["num_gpus"]) == ("llama3.1-405b", 8)
    assert job["defaulted"] == ["gpu", "seq_length", "global_batch_size", "precision"]


def test_pools_job_names_its_pools_gpus_not_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """A cluster of pools gives the GPUs and their count (1,024 H100 + 1,024 A100 in the example):
    neither is "(default)", the GPU is both kinds in pool order, and `--json` carries the job as a
    one-kind suggest does (it used to mark both defaulted and print the H100 alone)."""
    pools = REPO / "examples" / "pools-llama3.1-70b-h100-a100.toml"
    code, out, err = run(["suggest", str(pools), "--top", "1"], capsys)
    assert code == 0, err
    text = flat(err)
    assert "gpu h100-sxm-80gb + a100-sxm-80gb, num_gpus 2048, " in text
    assert "set with --precision" in text  # the only field the file leaves out
    code, out, err = run(["suggest", str(pools), "--top", "1", "--json"], capsys)
    assert code == 0, err
    job = json.loads(out)["job"]
    assert job["defaulted"] == ["precision"] and job["num_gpus"] == 2048
