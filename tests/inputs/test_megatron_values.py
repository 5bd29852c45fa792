"""Per-layer patterns of Megatron-LM flags (--moe-layer-freq).

Oracle: Megatron-LM d98e8a64 arguments.py `moe_freq_type`, whose docstring gives
"([1]*3+[0]*1)*3" -> [1,1,1,0,1,1,1,0,1,1,1,0], "([0]+[1]*23)" -> one dense layer and 23
expert layers, "([1]*3+[0]*2)*2" -> three expert and two dense layers, twice; Python's own
evaluation of the same list expressions."""

from __future__ import annotations

import re

import pytest

from planner.inputs.errors import InputError
from planner.inputs.megatron_values import MAX_PATTERN, layer_pattern


@pytest.mark.parametrize(
    "text",
    [
        "([1]*3+[0]*1)*3",
        "([0]+[1]*23)",
        "([1]*3+[0]*2)*2",
        "([0]*3+[1]*58)",  # the functional tests' spelling
        "[0]*3+[1]*58",
        "[1, 0, 1]",
        "2*[1]+[0]",
        "[0]*(1+2)+[1]",
        " ( [0] * 2 ) ",
    ],
)
def test_patterns_evaluate_as_python_does(text: str) -> None:
    assert layer_pattern(text, "f") == eval(text)  # the oracle: Python on these literals


def test_integers_are_frequencies() -> None:
    assert layer_pattern("2", "f") == 2
    assert layer_pattern(" 1 ", "f") == 1


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("([0]*3+[1]*58", "expected )"),
        ("[0]*", "expected more"),
        ("[2]*4", "entries must be 0 or 1"),
        ("[0]+1", "'+' joins two lists or two integers"),
        ("[0]*[1]", "'*' repeats a list by an integer"),
        ("[[0]]", "list entries are integers"),
        ("[0] [1]", "unexpected '['"),
        ("1+2*[x]", "unexpected 'x'"),
        (f"[0]*{MAX_PATTERN + 1}", "more than"),
        ("two", "expected an integer or a list expression"),
        ("3", None),
    ],
)
def test_bad_patterns(text: str, needle: str | None) -> None:
    if needle is None:
        assert layer_pattern(text, "f") == 3
        return
    with pytest.raises(InputError, match=re.escape(needle)):
        layer_pattern(text, "train.sh: --moe-layer-freq")
