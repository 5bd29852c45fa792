"""planner.inputs.units: token budgets as people write them, and numbers written back.

Oracles: the decimal suffixes by hand (K 1e3, M 1e6, B/G 1e9, T 1e12), and the round trip."""

from __future__ import annotations

import pytest

from planner.inputs.errors import InputError
from planner.inputs.units import format_tokens, parse_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("15T", 15 * 10**12),
        ("15t", 15 * 10**12),
        ("2.5e12", 2_500_000_000_000),
        ("300B", 300 * 10**9),
        ("300G", 300 * 10**9),
        ("1.2M", 1_200_000),
        ("500k", 500_000),
        ("1_000_000", 1_000_000),
        ("1,000", 1_000),
        (" 7 ", 7),
    ],
)
def test_parse_tokens(text: str, expected: int) -> None:
    assert parse_tokens(text, "--tokens") == expected


@pytest.mark.parametrize("text", ["", "abc", "-5T", "0", "0.1", "1.5X", "T", "1e", "nanT"])
def test_parse_tokens_rejects(text: str) -> None:
    with pytest.raises(InputError, match="--tokens") as info:
        parse_tokens(text, "--tokens")
    assert repr(text) in str(info.value)


def test_format_tokens_round_trips() -> None:
    for text in ("15T", "300B", "1.2M"):
        assert format_tokens(parse_tokens(text, "--tokens")) == text


def test_format_duration_writes_milliseconds_plainly() -> None:
    # explain's "training blocked 5.3e+02 ms" (a 0.53 s checkpoint block): two significant
    # digits in exponent form above 99 ms; whole milliseconds from 10 ms up now
    from planner.inputs.units import format_duration

    assert format_duration(0.53) == "530 ms"
    assert format_duration(0.0042) == "4.2 ms"
    assert format_duration(0.012) == "12 ms"
    assert format_duration(1.5) == "1.5 s"
    assert "e+" not in format_duration(0.9996)


def test_format_duration_separates_thousands_of_hours() -> None:
    # explain's "MTBF 6334.6 h" (8 GPUs at Llama 3's rate: 86,400 / (4.7359e-4 x 8) s), and
    # 150-digit hours at --failure-rate 1e-300
    from planner.inputs.units import format_duration

    assert format_duration(2.2805e7) == "6,334.7 h"
    assert format_duration(2.88e305) == "8e+301 h"
