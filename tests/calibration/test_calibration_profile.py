"""The profile file: what `calibrate` writes reads back; hand edits are checked; which profile a
command uses. Oracle: the values written (round trip) and the ranges of
planner.model.calibratable (hand-picked values just outside them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic_logs import write_log

from planner.calibration import profile
from planner.calibration.fit import fit
from planner.calibration.measured import read_runs
from planner.inputs.errors import InputError


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("profile")
    runs = read_runs([write_log(d, i, {"gemm_efficiency": 0.65}) for i in (0, 3)], "h100-sxm-80gb")
    path = d / "p.toml"
    path.write_text(profile.render(fit(runs), "h100-sxm-80gb", ["a.log", "b.log"]))
    return path


def test_what_is_written_reads_back(written: Path) -> None:
    prof = profile.read(written)
    assert prof.gpu == "h100-sxm-80gb" and prof.runs == 2 and len(prof.residuals) == 2
    # what the fit determined is applied; a constant kept at its default is not (it follows
    # the planner that reads the profile)
    assert set(prof.values) == {k for k, d in prof.determined.items() if d}
    assert "gemm_efficiency" in prof.values
    text = written.read_text()
    assert f"value = {prof.values['gemm_efficiency']!r}" in text


def test_a_hand_edit_of_a_kept_constant_is_applied(written: Path, tmp_path: Path) -> None:
    old = "[constants.latency_scale]\nvalue = 1.0\ndefault = 1.0\ndetermined = false"
    path = _edited(written, tmp_path, old, old.replace("value = 1.0", "value = 2.5"))
    assert profile.read(path).values["latency_scale"] == 2.5


def _edited(written: Path, tmp_path: Path, old: str, new: str) -> Path:
    text = written.read_text()
    assert old in text
    path = tmp_path / "edited.toml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("[constants.latency_scale]\nvalue = 1.0", "[constants.latency_scale]\nvalue = 40.0",
         "constants.latency_scale.value: 40.0 is outside [0.1, 20]"),
        ("[constants.gemm_efficiency]\n", "[constants.gemm_efficiency]\nvalu = 0.5\n",
         "constants.gemm_efficiency.valu: unknown key"),
        ("[constants.gemm_efficiency]", "[constants.gemm_speed]",
         "constants.gemm_speed: unknown constant"),
        ("[calibration]\n", "[calibration]\ncolour = 1\n", "calibration.colour: unknown key"),
        ("[constants.activation_scale]\nvalue = ", "[constants.activation_scale]\nvalue = 'x'#",
         "constants.activation_scale.value: expected float"),
        # a fuzzer's hand edits that were echoed as nan, inf, -3 runs, or divided by zero
        ("\nerror_band_pct = ", "\nerror_band_pct = nan #",
         "calibration.error_band_pct: nan (not a finite number)"),
        ("\nruns = ", "\nruns = -3 #", "calibration.runs: -3 (must be >= 0)"),
        ("measured_step_s = ", "measured_step_s = 0.0 #",
         "residuals[0].measured_step_s: 0.0 (must be"),
        ("predicted_s = ", "predicted_s = inf #", "residuals[0].predicted_s: inf (not a finite"),
    ],
)  # fmt: skip
def test_hand_edits_are_checked(
    written: Path, tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _edited(written, tmp_path, old, new)
    with pytest.raises(InputError) as info:
        profile.read(path)
    assert str(info.value).startswith(f"{path}: {message}"), str(info.value)


def test_which_profile_a_command_uses(
    written: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert profile.resolve(None) is None  # conftest: empty config directory, no variable
    default = profile.default_path()
    default.parent.mkdir(parents=True, exist_ok=True)
    default.write_text(written.read_text())
    assert profile.resolve(None).path == default  # type: ignore[union-attr]
    monkeypatch.setenv(profile.ENV, str(written))
    assert profile.resolve(None).path == written  # type: ignore[union-attr]
    # an empty variable is unset (QA: "PLANNER_CALIBRATION=" read the directory ".", exit 2
    # naming neither the variable nor its value): the default file again
    for empty in ("", "  "):
        monkeypatch.setenv(profile.ENV, empty)
        assert profile.resolve(None).path == default  # type: ignore[union-attr]
    monkeypatch.setenv(profile.ENV, str(written))
    assert profile.resolve("none") is None
    other = tmp_path / "missing.toml"
    with pytest.raises(InputError):
        profile.resolve(str(other))
