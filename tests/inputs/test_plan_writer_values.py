"""planner.inputs.plan_writer.toml_value, the one TOML value writer (plans, torchtitan job
configs, calibration profiles). Oracle: Python's own TOML reader (tomllib) must read back what
was written, for strings that need every kind of escape."""

from __future__ import annotations

import tomllib

import pytest

from planner.inputs.plan_writer import toml_value

TRICKY = [
    "plain",
    'a "quoted" word',
    "back\\slash C:\\path",
    "new\nline and\ttab\r",
    "bell\x07 escape\x1b delete\x7f",
    "unicode: Grüße, 東京, 🚀",
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_strings_read_back(text: str) -> None:
    assert tomllib.loads(f"k = {toml_value(text)}\n")["k"] == text


def test_other_values_read_back() -> None:
    value = [True, 3, 2.5, ["x", 'y"'], ("t",)]
    back = tomllib.loads(f"k = {toml_value(value)}\n")["k"]
    assert back == [True, 3, 2.5, ["x", 'y"'], ["t"]]
