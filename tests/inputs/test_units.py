"""planner.inputs.units: token budgets as people write them, and numbers written back.

Oracles: the decimal suffixes by hand (K 1e3, M 1e6, B/G 1e9, T 1e12), and the round trip."""

from __future__ import annotations

import pytest

from planner.inputs.errors import InputError
from planner.inputs.units import format_bytes, format_money, format_si, format_tokens, parse_tokens


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
        ("1,000B", 10**12),
        ("12,345.5K", 12_345_500),
        (" 7 ", 7),
    ],
)
def test_parse_tokens(text: str, expected: int) -> None:
    assert parse_tokens(text, "--tokens") == expected


@pytest.mark.parametrize(
    "text",
    # a decimal comma ("1,5T") was read as 15T: commas group thousands or are refused
    ["", "abc", "-5T", "0", "0.1", "1.5X", "T", "1e", "nanT", "1,5T", "2,5e12", "15,T", "1,0,0,0B"],
)
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


@pytest.mark.parametrize(
    ("x", "money", "si", "tokens"),
    [
        # 3,648,916 GPU-hours at $0.274 = $999,803: three digits round it to 1,000k, which is 1M
        (999_803, "$1M", "1M", "1M"),
        (999.7, "$1k", "1k", "1K"),  # below the smallest unit, rounded up into it
        (999.4, "$999", "999", "999"),
        (67_800, "$67.8k", "67.8k", "67.8K"),
        (1.5e6, "$1.5M", "1.5M", "1.5M"),
    ],
)
def test_the_unit_is_picked_after_rounding(x: float, money: str, si: str, tokens: str) -> None:
    """Written as '$1e+03k', '1e+03B tokens' and '1e+03 GB' when the number rounded up to 1,000
    of its unit."""
    assert (format_money(x), format_si(x), format_tokens(x)) == (money, si, tokens)
    assert format_bytes(999.7e9) == "1 TB"
