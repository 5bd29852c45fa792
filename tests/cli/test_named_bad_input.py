"""Bad input that did not name its option or field (s41's "knowingly left" list): a
--calibration that is a directory ("/tmp: is a directory", no option), calibrate --out under a
regular file ("File exists"), and gpus_per_node = 2**70 (accepted). Oracle: DESIGN.md section
2's contract, as the other bad-input tests here (exit 2 naming the option or the file and field,
and the value; never a traceback or an internal error), and for the node size
hardware.MAX_GPUS = 2**24 = 16,777,216, the bound num_gpus has: a node holds no more GPUs than a
cluster may, and 2**70 = 1,180,591,620,717,411,303,424 is over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES

SMALL = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
HUGE = 2**70


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert "internal error" not in err and "Traceback" not in err, err
    return err


def test_a_calibration_directory_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(["suggest", *SMALL, "--calibration", str(tmp_path)], capsys)
    assert f"--calibration: {tmp_path}: is a directory" in err, err


def test_a_calibration_from_the_environment_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLANNER_CALIBRATION", str(tmp_path / "missing.toml"))
    err = refused(["suggest", *SMALL], capsys)
    assert f"$PLANNER_CALIBRATION: {tmp_path / 'missing.toml'}: no such file" in err, err


@pytest.mark.parametrize("under", ["x.toml", "a/b/x.toml"])
def test_calibrate_out_under_a_file_names_the_file(
    under: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out FILE/x.toml where FILE is a regular file: refused before any log is read (the log
    named here does not exist; the old message came after the fit, from mkdir: "File
    exists")."""
    plain = tmp_path / "plain"
    plain.write_text("")
    out = plain / under
    argv = ["calibrate", str(tmp_path / "none.log"), "--gpu", "h100-sxm-80gb", "--out", str(out)]
    err = refused(argv, capsys)
    assert f"--out: {out}: {plain} is a file, not a directory" in err, err
    assert "File exists" not in err


def test_calibrate_out_that_is_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["calibrate", str(tmp_path / "none.log"), "--gpu", "h100-sxm-80gb", "--out"]
    err = refused([*argv, str(tmp_path)], capsys)
    assert f"--out: {tmp_path}: is a directory, expected a file" in err, err


CLUSTER = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'


@pytest.mark.parametrize("command", ["check", "suggest"])
def test_gpus_per_node_over_the_gpu_limit_names_the_field(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "llama3.1-8b-h100.toml").read_text()
    assert CLUSTER in text
    path = tmp_path / "plan.toml"
    path.write_text(text.replace(CLUSTER, CLUSTER + f"gpus_per_node = {HUGE}\n"))
    err = refused([command, str(path)], capsys)
    assert f"{path}: cluster.gpus_per_node: " in err and "16777216" in err, err
    assert f"(got {HUGE})" in err, err


def test_a_pools_gpus_per_node_over_the_limit_names_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (EXAMPLES / "pools-llama3.1-70b-h100-a100.toml").read_text()
    pool = 'gpu = "h100-sxm-80gb"\nnum_gpus = 1024\n'
    assert pool in text
    path = tmp_path / "pools.toml"
    path.write_text(text.replace(pool, pool + f"gpus_per_node = {HUGE}\n"))
    err = refused(["suggest", str(path)], capsys)
    assert f"{path}: cluster.pools[0].gpus_per_node: " in err and f"(got {HUGE})" in err, err


def test_gpus_per_node_at_the_limit_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bound is the GPU limit itself: 2**24 GPUs a node is read (the plan still fits or not
    on its own terms, exit 0 or 1), 2**24 + 1 refused."""
    text = (EXAMPLES / "llama3.1-8b-h100.toml").read_text()
    path = tmp_path / "plan.toml"
    for n, codes in ((2**24, (0, 1)), (2**24 + 1, (2,))):
        path.write_text(text.replace(CLUSTER, CLUSTER + f"gpus_per_node = {n}\n"))
        code, _, err = run(["check", str(path)], capsys)
        assert code in codes, err
