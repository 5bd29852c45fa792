"""How a bad value is quoted back to the user: in the syntax of the file it came from.

Oracle: the parsers themselves. A value spelled for TOML and read back by tomllib (and one
spelled for JSON and read back by json) is the value the user's file held.
"""

from __future__ import annotations

import datetime
import json
import math
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from planner.inputs.arch import ModelArch
from planner.inputs.errors import from_validation, is_json, spelled, spelled_json

TOML_VALUES: list[object] = [
    True,
    False,
    0,
    -7,
    2.0,
    1e-3,
    float("inf"),
    float("-inf"),
    "fp16",
    'say "hi"\\ there',
    "tab\there, newline\nthere, ünïcode",
    "",
    [1, 2, 3],
    ["a", True, [2.5]],
    [],
    {"a": 1, "b": "x", "c": [True]},
    datetime.date(2026, 11, 30),
    datetime.datetime(2026, 11, 30, 15, 12, 20),
    datetime.time(7, 32),
]


@pytest.mark.parametrize("value", TOML_VALUES, ids=repr)
def test_toml_spelling_reads_back_as_the_value(value: object) -> None:
    text = spelled(value)
    assert tomllib.loads(f"x = {text}\n")["x"] == value, text


def test_toml_spelling_of_nan_and_the_words_python_would_use() -> None:
    assert math.isnan(tomllib.loads(f"x = {spelled(float('nan'))}")["x"])
    # Python's spellings are not TOML: True, 'fp16' and None would not parse back
    assert (spelled(True), spelled(False), spelled("fp16")) == ("true", "false", '"fp16"')


@pytest.mark.parametrize("value", [True, None, 3, 2.5, "yes", [1, "a"], {"k": [False]}], ids=repr)
def test_json_spelling_reads_back_as_the_value(value: object) -> None:
    text = spelled_json(value)
    assert json.loads(text) == value, text
    assert spelled(value, json_syntax=True) == text


def test_files_ending_in_json_are_spelled_as_json() -> None:
    assert is_json(Path("config.json")) and is_json("CONFIG.JSON")
    assert not is_json(Path("plan.toml")) and not is_json(None)


def test_field_paths_leave_out_pydantic_union_members() -> None:
    """A fuzzer's window_attn_skip_freq = [0, 2] was named
    `window_attn_skip_freq.tuple[function-before[_integer(), literal[0,1]], ...].1`; the path is
    the field and its index, and a validator's message drops pydantic's "Value error, ". Oracle:
    the ModelArch fields (an int or a 0/1 list; heads dividing into query groups)."""
    base = {"name": "x", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128}
    base |= {"num_attention_heads": 4, "vocab_size": 100, "window_size": 16}
    with pytest.raises(ValidationError) as info:
        ModelArch(**base, window_attn_skip_freq=[0, 2])
    lines = str(from_validation(info.value, Path("p.toml"), "model")).splitlines()
    assert lines == [
        "p.toml: model.window_attn_skip_freq: Input should be a valid integer (got [0, 2])",
        "p.toml: model.window_attn_skip_freq.1: Input should be 0 or 1 (got 2)",
    ]
    with pytest.raises(ValidationError) as info:
        ModelArch(**base, num_query_groups=3)
    message = str(from_validation(info.value, Path("p.toml"), "model"))
    assert message.startswith("p.toml: model: num_attention_heads (4) must be a multiple of")
    with pytest.raises(ValidationError) as info:
        ModelArch(**base, **{"odd-key[1]": 1})
    message = str(from_validation(info.value, Path("p.toml"), "model"))
    assert message == "p.toml: model.odd-key[1]: unknown key (got 1)"
