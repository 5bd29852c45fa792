"""planner.inputs.units: token budgets as people write them, and numbers written back.

Oracles: the decimal suffixes by hand (K 1e3, M 1e6, B/G 1e9, T 1e12, P 1e15), the round trip,
the rounding boundaries by hand (999.5 of a unit rounds to 1e+03 at three significant digits,
999.4 to 999), and a brute force over every power of ten and its boundaries up to the largest
budget."""

from __future__ import annotations

import pytest

from planner.inputs.errors import InputError
from planner.inputs.units import (
    JSON_EXACT_INT,
    MAX_TOKENS,
    format_bytes,
    format_money,
    format_si,
    format_tokens,
    parse_tokens,
)


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


@pytest.mark.parametrize(
    ("x", "tokens"),
    [
        (999.4e12, "999T"),
        (999.5e12, "1P"),  # 999.5 at three digits is 1e+03: one unit up, not "1e+03T"
        (1e15, "1P"),
        (2.5e15, "2.5P"),
        (9e15, "9P"),  # the largest budget
        (999.5e15, "1e+18"),  # past the largest unit: exponent form, not "1e+03P"
    ],
)
def test_format_tokens_has_petatokens(x: float, tokens: str) -> None:
    """`--tokens 1P` printed "1e+03T tokens": parse_tokens reads P (1e15), format_tokens had no
    P."""
    assert format_tokens(x) == tokens


@pytest.mark.parametrize(
    ("usd", "money"),
    [
        (999.4e9, "$999B"),
        (999.5e9, "$1T"),  # "$1e+03B" before
        (2.5e12, "$2.5T"),
        (999.4e12, "$999T"),
        (999.5e12, "$1e+15"),  # past the largest unit: dollars in exponent form
        (1e300, "$1e+300"),  # "$1e+291B" before
    ],
)
def test_format_money_has_trillions(usd: float, money: str) -> None:
    assert format_money(usd) == money


def test_no_number_prints_as_a_thousand_of_its_largest_unit() -> None:
    """The same boundary in the other writers: 999.7 TB is 1 PB, 999.7 PB exponent form."""
    assert (format_bytes(999.7e12), format_bytes(999.7e15)) == ("1 PB", "1e+18 B")
    assert format_si(999.7e9) == "1e+12"


def test_every_budget_prints_in_a_unit() -> None:
    """Brute force over every power of ten up to the largest budget, and just below and at each
    rounding boundary (999.4 and 999.5 of a unit): no budget parse_tokens reads prints in
    exponent form or as 1,000 of a unit, and each of those written back parses to within the
    three significant digits format_tokens keeps."""
    values = [10**k for k in range(16)] + [MAX_TOKENS]
    values += [999 * 10**k + d * 10 ** (k - 1) for k in range(1, 13) for d in (4, 5)]
    for n in (v for v in values if v <= MAX_TOKENS):
        text = format_tokens(n)
        assert "e" not in text and not text.startswith("1000"), (n, text)
        back = parse_tokens(text, "--tokens")
        assert abs(back - n) <= 0.005 * n, (n, text)
    for text in ("1P", "9P", "2.5P"):
        assert format_tokens(parse_tokens(text, "--tokens")) == text


@pytest.mark.parametrize(
    "text",
    # one token past 9P; 1e300 tokens (290-digit days, exit 0); an exponent past Decimal's
    # context ("1e999999T" raised decimal.Overflow, an internal error)
    ["9000000000000001", "9.0000000000000001P", "1e300", "1e999999T", "1e99999999999999999999"],
)
def test_parse_tokens_caps_the_budget(text: str) -> None:
    with pytest.raises(InputError, match=r"^--tokens: .*at most 9P tokens") as info:
        parse_tokens(text, "--tokens")
    assert repr(text) in str(info.value)


def test_the_largest_budget_is_exact_in_json() -> None:
    """9P = 9,000,000,000,000,000 < 2^53 = 9,007,199,254,740,992: a double holds it, and every
    count up to it, exactly."""
    assert parse_tokens("9P", "--tokens") == MAX_TOKENS == 9 * 10**15
    assert MAX_TOKENS < JSON_EXACT_INT == 9_007_199_254_740_992
    assert int(float(MAX_TOKENS)) == MAX_TOKENS
