"""`planner calibrate`, `--calibration` and `--megatron-log` from the command line: what they
print and write, and bad input (exit 2 naming file and line, never a traceback).

Oracles: the fixture logs' own figures (tests/data/megatron_logs, from Megatron-LM functional
tests), the exit-code contract (0 / 1 / 2), and the profile the test wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import DATA

LOGS = sorted((DATA / "megatron_logs").glob("*.log"))
GPU = ["--gpu", "h100-sxm-80gb"]


@pytest.fixture
def profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "cal.toml"
    code, _, err = run(["calibrate", *map(str, LOGS), *GPU, "--out", str(path)], capsys)
    assert code == 0, err
    return path


def test_calibrate_writes_a_profile_and_says_what_it_fitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cal.toml"
    code, out, err = run(["calibrate", *map(str, LOGS), *GPU, "--out", str(path), "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["profile"] == str(path) and path.is_file()
    assert {r["run"].split(":")[0] for r in data["residuals"]} == {str(p) for p in LOGS}
    assert data["runs"] == len(LOGS)
    for run_ in data["residuals"]:  # the fixture logs' median step times, as the reader takes them
        assert 0.5 < run_["measured_step_s"] < 2.0
    assert set(data["constants"]) >= {"gemm_efficiency", "step_overhead_s", "activation_scale"}


def test_calibrate_writes_to_the_config_directory_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["calibrate", str(LOGS[0]), *GPU], capsys)
    assert code == 0, err
    assert "wrote " in err and "planner/calibration.toml" in err


def test_explain_a_log_beside_its_prediction(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = str(LOGS[0])
    code, out, err = run(["explain", "--megatron-log", log, *GPU, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    measured = data["measured"]
    # tp1 pp4 on 8 GPUs: the memory line names rank 6, the first rank of stage 3
    assert (measured["rank"], measured["stage"]) == (6, 3)
    assert measured["step_time_s"] > 0 and measured["max_allocated_gib"] > 10
    assert "performance" in data and "memory" in data and "calibration" not in data
    code, out, err = run(
        ["explain", "--megatron-log", log, *GPU, "--calibration", str(profile), "--json"], capsys
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["calibration"]["profile"] == str(profile)
    assert "uncalibrated" in data["measured"]
    code, out, err = run(
        ["explain", "--megatron-log", log, *GPU, "--calibration", str(profile)], capsys
    )
    assert code == 0, err
    assert "calibrated:" in out and "expected step-time error" in out and "residual" in out
    assert "measured" in out and "uncalibrated" in out


def test_check_a_log(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", "--megatron-log", str(LOGS[1]), *GPU, "--json"], capsys)
    assert code == 0, err  # the run trained: it fits
    assert json.loads(out)["measured"]["iterations_used"] >= 3


def _log(tmp_path: Path, text: str, name: str = "x.log") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _fixture_with(old: str, new: str) -> str:
    text = LOGS[0].read_text()
    assert old in text
    return text.replace(old, new, 1)


BAD_LOGS = {
    "another program": ("Epoch 1/3 loss 0.2\n", ":", "not a Megatron-LM training log"),
    "truncated": ("\n".join(LOGS[0].read_text().splitlines()[:30]), ":2:", "no 'end of arguments'"),
    "no arguments block": (
        "\n".join(ln for ln in LOGS[0].read_text().splitlines() if ln.startswith(" [")),
        ":1:", "`calibrate` takes the run's plan with --plan",
    ),
    "nan": (
        _fixture_with("(ms): 1148.6", "(ms): nan"), ":", "elapsed time per iteration (ms): nan"
    ),
    "other GPU": (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0)\n" + LOGS[0].read_text(),
        ":1:", "this log ran on A100 GPUs, not h100-sxm-80gb",
    ),
    "above peak": (
        _fixture_with("| learning", "| throughput per GPU (TFLOP/s/GPU): 2500.0 | learning"),
        ":", "above the h100-sxm-80gb's dense bf16 peak",
    ),
}  # fmt: skip


@pytest.mark.parametrize("command", ["calibrate", "explain", "check"])
@pytest.mark.parametrize("case", list(BAD_LOGS))
def test_bad_logs_exit_2_naming_file_and_line(
    command: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, where, message = BAD_LOGS[case]
    log = _log(tmp_path, text)
    argv = (
        [command, log, *GPU] if command == "calibrate" else [command, "--megatron-log", log, *GPU]
    )
    code, _, err = run(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{log}{where}" in err and message in err, err


def test_a_log_without_arguments_takes_the_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [ln for ln in LOGS[0].read_text().splitlines() if not ln.startswith("  ")]
    log = _log(tmp_path, "\n".join(ln for ln in lines if "arguments --" not in ln))
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 8\n[parallel]\ntp = 1\npp = 4\n"
    )
    code, _, err = run(
        ["calibrate", log, *GPU, "--plan", str(plan), "--out", str(tmp_path / "p")], capsys
    )
    assert code == 0, err


def test_a_plan_no_run_reads_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """QA s41 q1 item 4: the fixture log prints its arguments block, which gives its plan, so a
    --plan (here one that does not exist) would be ignored: it once exited 0 silently. Oracle:
    the exit-code contract (an option the command would ignore is bad input, exit 2, named)."""
    missing = tmp_path / "nonexistent" / "plan.toml"
    argv = ["calibrate", str(LOGS[0]), *GPU, "--plan", str(missing)]
    code, _, err = run([*argv, "--out", str(tmp_path / "p")], capsys)
    assert code == 2, err
    assert f"--plan {missing}: not read" in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("gpu = \"h100-sxm-80gb\"", "gpu = \"a100-sxm-80gb\"", "calibration.gpu: 'a100-sxm-80gb'"),
        ("[constants.latency_scale]\nvalue = 1.0", "[constants.latency_scale]\nvalue = -1.0",
         "constants.latency_scale.value: -1.0 is outside"),
        ("[calibration]\n", "[calibration]\nfudge = 2.0\n", "calibration.fudge: unknown key"),
    ],
)  # fmt: skip
def test_bad_profiles_exit_2(
    profile: Path, old: str, new: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    profile.write_text(profile.read_text().replace(old, new, 1))
    argv = ["explain", "--megatron-log", str(LOGS[0]), *GPU, "--calibration", str(profile)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{profile}: {message}" in err, err


def test_world_size_against_num_gpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["calibrate", str(LOGS[0]), *GPU, "--num-gpus", "16"], capsys)
    line = next(
        i for i, t in enumerate(LOGS[0].read_text().splitlines(), 1) if "world_size ..." in t
    )
    assert code == 2 and f"{LOGS[0]}:{line}: world_size: 8, but --num-gpus is 16" in err, err


def test_one_file_of_two_runs_is_two_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path, LOGS[0].read_text() + LOGS[1].read_text())
    code, out, err = run(["calibrate", log, *GPU, "--out", str(tmp_path / "p"), "--json"], capsys)
    assert code == 0, err
    starts = [r["run"] for r in json.loads(out)["residuals"]]
    assert starts == [f"{log}:2", f"{log}:{len(LOGS[0].read_text().splitlines()) + 2}"]


def test_suggest_and_scale_say_they_are_calibrated(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["--model", "llama3.1-8b", *GPU, "--seq-length", "8192", "--global-batch-size", "64"]
    code, out, err = run(
        ["suggest", *job, "--num-gpus", "8", "--calibration", str(profile)], capsys
    )
    assert code == 0, err
    assert f"calibrated: {profile}" in out and "expected step-time error" in out
    code, out, err = run(
        ["scale", *job, "--num-gpus", "8,16", "--calibration", str(profile), "--json"], capsys
    )
    assert code == 0, err
    assert json.loads(out)["calibration"]["profile"] == str(profile)


def test_a_calibration_changes_the_prediction_and_only_while_applied(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The profile moves the prediction toward the logs; the next command without it predicts
    as before (main restores the shipped constants). What moves is the measured stage's
    allocated memory (the activation scale): the two fixture logs (one model on 8 GPUs, 1.15 and
    1.12 s a step) cannot tell a per-step overhead from the attention efficiency (their Jacobian
    columns' cosine is -0.999), so no time constant is fitted."""
    argv = ["explain", "--megatron-log", str(LOGS[0]), *GPU, "--json"]
    _, plain, _ = run(argv, capsys)
    _, calibrated, _ = run([*argv, "--calibration", str(profile)], capsys)
    _, again, _ = run(argv, capsys)
    docs = [json.loads(x) for x in (plain, calibrated, again)]
    measured = docs[0]["measured"]
    alloc = [d["memory"]["stages"][measured["stage"]]["allocated_gib"] for d in docs]
    assert alloc[0] == alloc[2] != alloc[1]
    target = measured["max_allocated_gib"]
    assert abs(alloc[1] - target) < abs(alloc[0] - target)


def test_an_attempt_that_died_before_logging_is_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job that crashed after printing its arguments and restarted in the same file: the first
    attempt is noted and left out; the second is the run."""
    text = LOGS[0].read_text()
    died = "\n".join(ln for ln in text.splitlines() if not ln.startswith((" [", "[Rank")))
    log = _log(tmp_path, died + "\nTraceback (most recent call last):\n" + text)
    code, out, err = run(["calibrate", log, *GPU, "--out", str(tmp_path / "p"), "--json"], capsys)
    assert code == 0, err
    assert "left out" in err and f"{log}:2:" in err
    assert len(json.loads(out)["residuals"]) == 1


def test_a_run_given_twice_counts_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log given twice weighed its run double and, left out, kept its twin in: the fit and
    its left-out band moved (a fuzzer's). It counts once, said on stderr: the same constants
    as without the copy (the oracle)."""
    once, twice = tmp_path / "once.json", tmp_path / "twice.json"
    for argv, out_path in (([*map(str, LOGS)], once), ([*map(str, LOGS), str(LOGS[0])], twice)):
        code, out, err = run(["calibrate", *argv, *GPU, "--out", str(tmp_path / "p"), "--json"],
                             capsys)  # fmt: skip
        assert code == 0, err
        out_path.write_text(out)
    a, b = json.loads(once.read_text()), json.loads(twice.read_text())
    assert a["constants"] == b["constants"] and len(b["residuals"]) == len(LOGS)
    assert "again: once" in err


def test_a_gzipd_log_and_stray_bytes_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gzip'd log was refused ("'utf-8' codec can't decode byte 0x8b"), and one byte that
    is not UTF-8 in another program's line refused the whole log: both read as the plain log."""
    import gzip

    plain = LOGS[0].read_bytes()
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(plain))
    stray = tmp_path / "stray.log"
    stray.write_bytes(b"launcher: caf\xe9\n" + plain)
    outs = []
    for log in (LOGS[0], gz, stray):
        code, out, err = run(["explain", "--megatron-log", str(log), *GPU, "--json"], capsys)
        assert code == 0, err
        measured = json.loads(out)["measured"]
        measured.pop("log")  # the file and line
        outs.append(measured)
    assert outs[1] == outs[0] and outs[2]["step_time_s"] == outs[0]["step_time_s"]


def log_head(text: str, iterations: int) -> str:
    """The log up to its `iterations`-th iteration line (an attempt that died there)."""
    out, seen = [], 0
    for line in text.splitlines():
        if " iteration " in line:
            if seen == iterations:
                break
            seen += 1
        out.append(line)
    return "\n".join(out) + "\n"


def test_restarts_are_measured_on_their_longest_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA, 2026-12-06: an attempt that logged one iteration line failed the whole log (exit 2:
    "need two or more") where one that logged none was left out; a restart of the same job
    (its arguments printed again) counted twice in a fit; and explain measured the last run,
    a crashed attempt of two lines, ignoring the complete run before it. Now: the short
    attempt is left out, the restart counts once, on its longest run, each said on stderr.
    Oracle: the measurement of the complete log alone."""
    text = LOGS[0].read_text()
    argv = ["explain", "--megatron-log", "", *GPU, "--json"]
    argv[2] = _log(tmp_path, text, "whole.log")
    _, whole, _ = run(argv, capsys)
    step = json.loads(whole)["measured"]["step_time_s"]
    for name, log in (
        ("one-line-first.log", log_head(text, 1) + text),
        ("crashed-after.log", text + log_head(text, 2)),
    ):
        argv[2] = _log(tmp_path, log, name)
        code, out, err = run(argv, capsys)
        assert code == 0, err
        assert json.loads(out)["measured"]["step_time_s"] == step, name
        assert "left out" in err or "again (a restart)" in err, err
    log = _log(tmp_path, text + log_head(text, 2), "fit.log")
    code, out, err = run(["calibrate", log, *GPU, "--out", str(tmp_path / "p"), "--json"], capsys)
    assert code == 0, err
    assert len(json.loads(out)["residuals"]) == 1


def test_a_short_run_says_its_step_carries_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With three iteration lines only the first is left out, and the second interval still
    carries start-up (measured.py's docstring): the step is read, and stderr says so."""
    log = _log(tmp_path, log_head(LOGS[0].read_text(), 3))
    code, _, err = run(["explain", "--megatron-log", log, *GPU, "--json"], capsys)
    assert code == 0, err
    assert "still carries start-up" in err


def test_memory_under_the_tp_pp_dp_rank_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With use_tp_pp_dp_mapping Megatron orders ranks tp-cp-ep-pp-dp (initialize.py
    d98e8a64): in the tp 1, pp 4 log on 8 GPUs rank 6 is stage 6 mod 4 = 2, not the default
    order's 6 // (8 / 4) = 3 (the helper's QA: it was compared with stage 3's prediction)."""
    text = LOGS[0].read_text()
    argv = ["explain", "--megatron-log", "", *GPU, "--json"]
    for flag, stage in (("False", 3), ("True", 2)):
        line = f"  use_tp_pp_dp_mapping ............................ {flag}\n"
        mapped = text.replace("  world_size ", line + "  world_size ", 1)
        argv[2] = _log(tmp_path, mapped, f"{flag}.log")
        code, out, err = run(argv, capsys)
        assert code == 0, err
        measured = json.loads(out)["measured"]
        assert (measured["rank"], measured["stage"]) == (6, stage)
