"""What `calibrate` prints and what a profile does once written, from the command line: the
--json document against the profile file, hand edits in explain's lines, a profile refused
for pools of two GPU kinds, and the log's line numbers against grep -n.

Oracles: the profile file the same command wrote (read with tomllib), the value written by
hand, the plan's own pools, and grep -n's definition of a line (it ends at a newline only)."""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import pytest
from cli_run import run
from paths import DATA, EXAMPLES

from planner.calibration import profile as profiles
from planner.cli import calibration
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.model import calibratable

LOGS = sorted((DATA / "megatron_logs").glob("*.log"))
GPU = ["--gpu", "h100-sxm-80gb"]
POOLS = EXAMPLES / "pools-llama3.1-70b-h100-a100-plan.toml"
"""Pools in pipeline order: 1,024 A100 (the first, `job.cluster`'s GPU), then 1,024 H100."""


@pytest.fixture
def written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict]:
    """The fixture logs calibrated: (the profile written, the --json document printed)."""
    path = tmp_path / "cal.toml"
    code, out, err = run(["calibrate", *map(str, LOGS), *GPU, "--out", str(path), "--json"], capsys)
    assert code == 0, err
    return path, json.loads(out)


def _set(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def test_calibrate_json_is_the_profile_it_wrote(
    written: tuple[Path, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: --json said `relative_sd`, `error_band` and `leave_one_out` as fractions where the
    profile and explain --json's `calibration` say `relative_sd_pct`, `error_band_pct` and
    `leave_one_out_pct` in percent, and its runs had no `stage` nor
    `predicted_allocated_default_gib`. Now: every key of the profile's schema, present in the
    document (null where the TOML leaves it out: TOML has no null), named and valued as the
    file the same command wrote."""
    path, data = written
    toml = tomllib.loads(path.read_text())
    assert set(data) == {"profile", *profiles.CALIBRATION_KEYS, "constants", "residuals"}
    assert data["profile"] == str(path)
    assert _set({k: data[k] for k in profiles.CALIBRATION_KEYS}) == toml["calibration"]
    assert set(data["constants"]) == set(toml["constants"])
    for key, table in data["constants"].items():
        assert set(table) == set(profiles.CONSTANT_KEYS), key
        assert _set(table) == toml["constants"][key], key
    assert len(data["residuals"]) == len(toml["residuals"]) == len(LOGS)
    for row, in_file in zip(data["residuals"], toml["residuals"], strict=True):
        assert set(row) == set(profiles.RESIDUAL_KEYS)
        assert _set(row) == in_file
        # the two logs carry memory reports and are two: every figure is there
        assert None not in (row["stage"], row["predicted_allocated_default_gib"])
        assert row["leave_one_out_pct"] is not None
    # explain --json's `calibration` is the same profile applied, in the same names and units
    argv = ["explain", "--megatron-log", str(LOGS[0]), *GPU, "--calibration", str(path), "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    applied = json.loads(out)["calibration"]
    assert applied["error_band_pct"] == round(data["error_band_pct"], 2)
    assert applied["runs"] == data["runs"] and applied["residuals"] == toml["residuals"]


def test_a_hand_edit_is_listed_with_the_fitted(
    written: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: a value edited by hand (the README: "edit it by hand if you like") was applied, but
    explain said "constants: all at their defaults": only constants the logs determined were
    listed. Every constant applied unlike its default is listed; a hand edit says so. Oracle:
    the value written by hand (latency_scale kept at its default 1 by the fit, set to 2.5)."""
    path, data = written
    assert data["constants"]["latency_scale"]["determined"] is False
    old = "[constants.latency_scale]\nvalue = 1.0\n"
    text = path.read_text()
    assert old in text
    edited = tmp_path / "edited.toml"
    edited.write_text(text.replace(old, "[constants.latency_scale]\nvalue = 2.5\n"))
    argv = ["explain", "--megatron-log", str(LOGS[0]), *GPU, "--calibration", str(edited)]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    flat = " ".join(out.split())  # rich wraps long lines
    assert "latency_scale 2.5 (default 1; set by hand, not determined by the logs)" in flat
    assert "all at their defaults" not in flat
    for key, table in data["constants"].items():  # the fit's own moves are listed as before
        if table["determined"] and table["value"] != table["default"]:
            assert f"{key} {table['value']:.4g} (default {table['default']:.4g})" in flat


def test_a_profile_is_refused_for_pools_of_two_gpu_kinds(
    written: tuple[Path, dict], tmp_path: Path
) -> None:
    """QA: the profile's GPU was checked against the first pool only: a genuine H100 profile
    was refused for the A100 + H100 example, and one relabelled A100 was accepted and its
    constants applied to the H100 pool too. The constants are module constants every pool's
    time reads alike (`calibratable.apply`: no per-pool values), so a profile is refused for
    pools of two kinds, naming the field, its value and the pools' GPUs; pools all of the
    profile's GPU take it."""
    path, _ = written
    job = load_plan(POOLS).job
    assert [p.cluster.gpu.name for p in job.pools] == ["a100-sxm-80gb", "h100-sxm-80gb"]
    a100 = tmp_path / "a100.toml"
    a100.write_text(path.read_text().replace('gpu = "h100-sxm-80gb"', 'gpu = "a100-sxm-80gb"'))
    for prof, gpu in ((path, "h100-sxm-80gb"), (a100, "a100-sxm-80gb")):
        with pytest.raises(InputError) as info:
            calibration.use(str(prof), job)
        assert str(info.value).startswith(
            f"{prof}: calibration.gpu: '{gpu}', but the plan's pools run on 'a100-sxm-80gb', "
            "'h100-sxm-80gb'"
        ), str(info.value)
        assert "calibrate each kind" in str(info.value)
    assert calibratable.current() == calibratable.DEFAULTS  # nothing applied
    both_h100 = tmp_path / "h100-pools.toml"
    both_h100.write_text(POOLS.read_text().replace('"a100-sxm-80gb"', '"h100-sxm-80gb"'))
    with calibratable.calibrated(calibratable.DEFAULTS):  # restored after the block
        prof = calibration.use(str(path), load_plan(both_h100).job)
        assert prof is not None and calibratable.current() != calibratable.DEFAULTS


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_progress_bar_keeps_grep_line_numbers(
    packed: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: the log was read with universal newlines, which end a line at a bare carriage
    return too: a progress bar's three updates above a bad line moved its number two past
    grep -n's (megatron_log.py's docstring promises grep's). Oracle: grep -n's line, the
    count of newlines before the bad line plus one."""
    text = LOGS[0].read_text()
    assert "(ms): 1148.6" in text
    bad = (
        "building index 10%\rbuilding index 50%\rbuilding index 100%\n"
        + text.replace("(ms): 1148.6", "(ms): nan", 1)
    ).encode()
    line = bad[: bad.index(b"(ms): nan")].count(b"\n") + 1
    log = tmp_path / ("bar.log.gz" if packed else "bar.log")
    log.write_bytes(gzip.compress(bad) if packed else bad)
    code, _, err = run(["calibrate", str(log), *GPU, "--out", str(tmp_path / "p")], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{log}:{line}: elapsed time per iteration (ms): nan" in err, err


def test_windows_line_ends_read_as_the_plain_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Read with its line ends kept, a Windows log's lines end in '\\r': every value is read
    as from the plain log (oracle: the plain log's measurement and prediction)."""
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(LOGS[0].read_bytes().replace(b"\n", b"\r\n"))
    packed = tmp_path / "crlf.log.gz"
    packed.write_bytes(gzip.compress(crlf.read_bytes()))
    seen = []
    for log in (LOGS[0], crlf, packed):
        code, out, err = run(["explain", "--megatron-log", str(log), *GPU, "--json"], capsys)
        assert code == 0, err
        data = json.loads(out)
        data["measured"].pop("log")
        seen.append((data["measured"], data["performance"]["step_time_s"]))
    assert seen[1] == seen[0] and seen[2] == seen[0]
