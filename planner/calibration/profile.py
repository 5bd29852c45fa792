"""The calibration profile: a small TOML file of refitted constants, written by `planner
calibrate` and read by every command that takes `--calibration`.

    [calibration]          gpu, logs, runs, error band and its basis, planner version
    [constants.<key>]      value (what is applied), default, determined, relative_sd_pct,
                           not_separable_from (a constant kept at its default because the logs
                           cannot tell it from that one), what
    [[residuals]]          per run: measured and predicted step time (default and calibrated),
                           leave-one-out error, measured and predicted allocated memory

Only `constants.<key>.value` changes the model, where the fit determined the constant or a user
edited it (a value unlike the `default` recorded beside it); a constant kept at its default
follows the planner version that reads the profile. On reading, an unknown
table or key, a value of the wrong type, or a value outside the constant's range
(`calibratable.Constant.lo/hi`) is bad input naming the file and the key.

Where a profile comes from when a command runs (`resolve`): `--calibration FILE`; else the
environment variable PLANNER_CALIBRATION (where set and not empty); else `calibration.toml` in
the user's config directory ($XDG_CONFIG_HOME/planner, else ~/.config/planner), if `planner
calibrate` wrote one there. `--calibration none` (or PLANNER_CALIBRATION=none) uses the
shipped constants.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from planner import __version__
from planner.inputs.errors import InputError
from planner.inputs.files import is_file, parse_toml, read_file
from planner.inputs.plan_writer import toml_value
from planner.inputs.units import GIB
from planner.model.calibratable import BY_KEY, DEFAULTS

if TYPE_CHECKING:  # the fit (numpy) loads only where a command fits
    from planner.calibration.fit import Fit

ENV = "PLANNER_CALIBRATION"
NONE = "none"
FILE_NAME = "calibration.toml"
CALIBRATION_KEYS = {
    "gpu": str,
    "planner_version": str,
    "logs": list,
    "runs": int,
    "error_band_pct": float,
    "error_basis": str,
}
CONSTANT_KEYS = {
    "value": float,
    "default": float,
    "determined": bool,
    "relative_sd_pct": float,
    "not_separable_from": str,
    "what": str,
}
RESIDUAL_KEYS = {
    "run": str,
    "layout": str,
    "measured_step_s": float,
    "predicted_default_s": float,
    "predicted_s": float,
    "leave_one_out_pct": float,
    "stage": int,
    "measured_allocated_gib": float,
    "predicted_allocated_default_gib": float,
    "predicted_allocated_gib": float,
}


@dataclass(frozen=True)
class Profile:
    """A profile as read: the constants it sets and what it says of its fit."""

    path: Path
    gpu: str
    values: dict[str, float]
    """The constants the profile sets: those fitted, and those edited by hand."""
    determined: dict[str, bool] = field(default_factory=dict)
    runs: int = 0
    error_band: float | None = None
    error_basis: str = ""
    residuals: tuple[dict[str, Any], ...] = ()


def default_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "planner" / FILE_NAME


def _round(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _table(header: str, items: dict[str, Any]) -> list[str]:
    return [header, *(f"{k} = {toml_value(v)}" for k, v in items.items() if v is not None), ""]


def document(fit: Fit, gpu: str, logs: list[str]) -> dict[str, Any]:
    """The profile as data: `calibration` (CALIBRATION_KEYS), `constants` (key: CONSTANT_KEYS)
    and `residuals` (RESIDUAL_KEYS), every key present (None where the fit has no figure, which
    the TOML leaves out); `calibrate --json` prints the same, with the same names, units and
    roundings."""
    residuals = []
    for rf in fit.runs:
        gib = {
            "measured_allocated_gib": rf.measured_allocated,
            "predicted_allocated_default_gib": rf.predicted_allocated_default,
            "predicted_allocated_gib": rf.predicted_allocated,
        }
        residuals.append(
            {
                "run": rf.run.where,
                "layout": rf.run.plan.require_layout().describe(),
                "measured_step_s": _round(rf.run.step_time_s),
                "predicted_default_s": _round(rf.predicted_default_s),
                "predicted_s": _round(rf.predicted_s),
                "leave_one_out_pct": None
                if rf.leave_one_out is None
                else _round(100 * rf.leave_one_out, 3),
                "stage": rf.stage,
            }
            | {k: None if v is None else _round(v / GIB) for k, v in gib.items()}
        )
    doc = {
        "calibration": {
            "gpu": gpu,
            "planner_version": __version__,
            "logs": logs,
            "runs": len(fit.runs),
            "error_band_pct": _round(100 * fit.band, 3),
            "error_basis": fit.band_basis,
        },
        "constants": {
            key: {
                "value": _round(value),
                "default": _round(DEFAULTS[key]),
                "determined": fit.determined[key],
                "relative_sd_pct": _round(100 * fit.relative_sd[key], 3),
                "not_separable_from": fit.inseparable.get(key),
                "what": BY_KEY[key].what,
            }
            for key, value in fit.values.items()
        },
        "residuals": residuals,
    }
    _writable(doc)
    return doc


def _writable(doc: dict[str, Any]) -> None:
    """Refuses (InputError, exit 2) a profile `read` would refuse, before it is written: a figure
    that is not finite (a fit of absurd measurements overflowed), a time or size not above 0, a
    constant outside its range. A residual's figure names its run (`file:line`), the others
    their table and key."""

    def check(where: str, key: str, value: Any, kind: type) -> None:
        try:
            _typed(where, key, value, kind)
        except InputError as e:
            raise InputError(
                f"{e}: planner calibrate writes no profile its own reader refuses (not written)"
            ) from None

    for i, row in enumerate(doc["residuals"]):
        for key, value in row.items():
            if value is not None:
                check(f"{row['run']}: residuals[{i}].{key}", key, value, RESIDUAL_KEYS[key])
    for key, value in doc["calibration"].items():
        if value is not None:
            check(f"calibration.{key}", key, value, CALIBRATION_KEYS[key])
    for name, table in doc["constants"].items():
        for key, value in table.items():
            if value is not None:
                check(f"constants.{name}.{key}", key, value, CONSTANT_KEYS[key])
        c, value = BY_KEY[name], table["value"]
        if not c.lo <= value <= c.hi:
            raise InputError(
                f"constants.{name}.value: the fit gives {value}, outside [{c.lo:g}, {c.hi:g}] "
                f"({c.what}): planner calibrate writes no profile its own reader refuses (not "
                "written)"
            )


def render(fit: Fit, gpu: str, logs: list[str]) -> str:
    """The profile's TOML text."""
    doc = document(fit, gpu, logs)
    lines = [
        "# planner calibration profile, written by `planner calibrate`.",
        "# `value` is what commands apply (--calibration FILE); edit it to override a constant.",
        "",
        *_table("[calibration]", doc["calibration"]),
    ]
    for key, table in doc["constants"].items():
        lines += _table(f"[constants.{key}]", table)
    for row in doc["residuals"]:
        lines += _table("[[residuals]]", row)
    return "\n".join(lines)


POSITIVE = frozenset(
    {
        "measured_step_s",
        "predicted_default_s",
        "predicted_s",
        "measured_allocated_gib",
        "predicted_allocated_default_gib",
        "predicted_allocated_gib",
    }
)
"""Keys whose figure is a time or a memory size: above 0 (the commands divide by them)."""


def _typed(where: str, key: str, value: Any, kind: type) -> Any:
    """The value as `kind`; every number finite, a count (int) and an error or spread not
    negative, a time or a size (`POSITIVE`) above 0."""
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise InputError(f"{where}: expected {kind.__name__} (got {value!r})")
    if kind is float and not math.isfinite(value):
        raise InputError(f"{where}: {value} (not a finite number)")
    if key in POSITIVE and value <= 0:
        raise InputError(f"{where}: {value} (must be > 0)")
    if (kind is int or (key.endswith("_pct") and key != "leave_one_out_pct")) and value < 0:
        raise InputError(f"{where}: {value} (must be >= 0)")
    return value


def _keys(where: str, table: Any, known: dict[str, type]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise InputError(f"{where}: expected a table (got {table!r})")
    out = {}
    for key, value in table.items():
        if key not in known:
            raise InputError(f"{where}.{key}: unknown key (known: {', '.join(known)})")
        out[key] = _typed(f"{where}.{key}", key, value, known[key])
    return out


def read(path: Path) -> Profile:
    """A profile file, validated (InputError names the file and key)."""
    doc = parse_toml(read_file(path), str(path))
    for key in doc:
        if key not in ("calibration", "constants", "residuals"):
            raise InputError(
                f"{path}: {key}: unknown table (known: calibration, constants, residuals)"
            )
    head = _keys(f"{path}: calibration", doc.get("calibration", {}), CALIBRATION_KEYS)
    if "gpu" not in head:
        raise InputError(f"{path}: calibration.gpu: required (the GPU the logs ran on)")
    constants = doc.get("constants", {})
    if not isinstance(constants, dict):
        raise InputError(f"{path}: constants: expected tables (got {constants!r})")
    values, determined = {}, {}
    for key, table in constants.items():
        where = f"{path}: constants.{key}"
        if key not in BY_KEY:
            raise InputError(f"{where}: unknown constant (known: {', '.join(BY_KEY)})")
        entry = _keys(where, table, CONSTANT_KEYS)
        if "value" not in entry:
            raise InputError(f"{where}.value: required")
        c, value = BY_KEY[key], entry["value"]
        if not c.lo <= value <= c.hi:
            raise InputError(f"{where}.value: {value} is outside [{c.lo:g}, {c.hi:g}] ({c.what})")
        determined[key] = bool(entry.get("determined", True))
        if determined[key] or value != entry.get("default"):
            values[key] = value  # fitted, or edited by hand: applied
    residuals = doc.get("residuals", [])
    if not isinstance(residuals, list):
        raise InputError(f"{path}: residuals: expected an array of tables")
    rows = tuple(
        _keys(f"{path}: residuals[{i}]", r, RESIDUAL_KEYS) for i, r in enumerate(residuals)
    )
    band = head.get("error_band_pct")
    return Profile(
        path=path,
        gpu=head["gpu"],
        values=values,
        determined=determined,
        runs=head.get("runs", len(rows)),
        error_band=None if band is None else band / 100,
        error_basis=head.get("error_basis", ""),
        residuals=rows,
    )


def resolve(option: str | None) -> Profile | None:
    """The profile a command uses (see the module docstring), or None."""
    # an empty PLANNER_CALIBRATION is unset (CI systems often export empty variables)
    text = option if option is not None else (os.environ.get(ENV) or "").strip() or None
    if text is not None:
        if text.strip().lower() == NONE:
            return None
        return _given(Path(text), "--calibration" if option is not None else f"${ENV}")
    path = default_path()
    return read(path) if path.is_file() else None


def _given(path: Path, source: str) -> Profile:
    """The profile at a path the user gave by `source` (the option or the variable): where the
    path is no file to read (missing, a directory), the error names `source` too, since the
    user may not know which setting put it there; a file's own errors name its key."""
    try:
        return read(path)
    except InputError as e:
        if is_file(path):
            raise
        raise InputError(f"{source}: {e}") from None
