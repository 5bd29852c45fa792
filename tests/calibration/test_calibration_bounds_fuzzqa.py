"""`planner calibrate` on absurd measurements (fuzz QA: an elapsed time per iteration of 1e308 ms,
a max allocated of 1e308 MB exited 0 and wrote nan / inf into the profile, which every later
command then refused).

Oracles: the contract (bad input exits 2 naming the file, the line and the value; no command
writes a file its own reader refuses: `profile.read`), and physics: no training step lasts a day
(`megatron_log.MAX_ELAPSED_MS`), no GPU holds 16 TiB (`megatron_log.MAX_MEMORY_MIB`, over 50
times the largest catalog GPU's memory)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from cli_run import run
from paths import DATA

from planner.calibration import fit as fits
from planner.calibration import profile as profiles
from planner.calibration.measured import read_runs
from planner.inputs import catalog, megatron_log
from planner.inputs.errors import InputError

LOGS = sorted((DATA / "megatron_logs").glob("*.log"))
GPU = ["--gpu", "h100-sxm-80gb"]
ELAPSED = re.compile(r"(elapsed time per iteration \(ms\): )[0-9.]+")
MAX_ALLOC = re.compile(r"(max allocated: )[0-9.]+")


def _changed(tmp_path: Path, pattern: re.Pattern[str], value: str) -> tuple[Path, int]:
    """The first fixture log with the last line `pattern` matches set to `value`: (file, line)."""
    lines = LOGS[0].read_text().split("\n")
    number = max(i for i, line in enumerate(lines) if pattern.search(line))
    lines[number] = pattern.sub(lambda m: m.group(1) + value, lines[number])
    path = tmp_path / "run.log"
    path.write_text("\n".join(lines))
    return path, number + 1


@pytest.mark.parametrize(
    ("pattern", "value", "field"),
    [
        (ELAPSED, "1e308", "elapsed time per iteration (ms)"),
        (ELAPSED, "86400001", "elapsed time per iteration (ms)"),
        (MAX_ALLOC, "1e308", "max allocated"),
        (MAX_ALLOC, "1e9", "max allocated"),
        (MAX_ALLOC, "1000000", "max allocated"),  # under 16 TiB, over an H100: measured.py
    ],
)
def test_absurd_measurements_exit_2_naming_the_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    pattern: re.Pattern[str],
    value: str,
    field: str,
) -> None:
    log, line = _changed(tmp_path, pattern, value)
    out = tmp_path / "cal.toml"
    code, _, err = run(["calibrate", str(log), *GPU, "--out", str(out)], capsys)
    assert code == 2, err
    flat = " ".join(err.split())
    assert f"{log}:{line}" in flat and field in flat and value in flat
    assert not out.exists()


def test_the_bounds_are_physical() -> None:
    largest = max(g.memory_gib for g in catalog.gpus().values()) * 2**30 / 2**20
    assert 50 * largest < megatron_log.MAX_MEMORY_MIB
    assert megatron_log.MAX_ELAPSED_MS == 24 * 3600 * 1000
    # a real step (the fixture's) reads
    assert megatron_log.parse(LOGS[0].read_text(), LOGS[0]).runs


def test_a_profile_its_reader_refuses_is_not_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the fit gives: a non-finite figure exits 2 naming the run, and no file is
    written (`profile.read` refuses nan and inf: `_typed`)."""
    real = fits.fit

    def overflowed(runs):  # type: ignore[no-untyped-def]
        result = real(runs)
        bad = dataclasses.replace(result.runs[0], predicted_s=float("inf"))
        return dataclasses.replace(result, runs=(bad, *result.runs[1:]))

    monkeypatch.setattr(fits, "fit", overflowed)
    out = tmp_path / "cal.toml"
    code, _, err = run(["calibrate", *map(str, LOGS), *GPU, "--out", str(out)], capsys)
    assert code == 2, err
    flat = " ".join(err.split())
    assert "predicted_s" in flat and "inf" in flat and "not written" in flat
    assert str(LOGS[0]) in flat  # the run's file:line
    assert not out.exists()


def test_what_calibrate_writes_its_reader_reads(tmp_path: Path) -> None:
    result = fits.fit(read_runs(LOGS, "h100-sxm-80gb"))
    path = tmp_path / "cal.toml"
    path.write_text(profiles.render(result, "h100-sxm-80gb", [str(p) for p in LOGS]))
    assert profiles.read(path).gpu == "h100-sxm-80gb"
    nan = dataclasses.replace(result, band=float("nan"))
    with pytest.raises(InputError, match=r"calibration\.error_band_pct: nan .*not written"):
        profiles.render(nan, "h100-sxm-80gb", [])
