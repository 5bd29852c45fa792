"""The one place units are converted, and quantities written as people write them.

Inside planner everything is SI: bytes, seconds, FLOP/s, bytes/s. Data files carry their units in
their key names (`bandwidth_gb_per_s_per_gpu`, `memory_gib`, `peak_tflops_bf16`) and are converted
here, once, at load time. A token budget typed as "15T" is read here (`parse_tokens`), and the
human output of every layer writes its numbers with the `format_*` functions ("67.8k", "$71M",
"5.68 TB", "2.5 h"), and a peak beside its capacity with `against` and `over`, alike in every
command and launch file.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from planner.inputs.errors import InputError

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9  # decimal gigabyte, as in link bandwidths and vendor "GB/s"
TERA = 10**12
SECONDS_PER_HOUR = 3_600.0
SECONDS_PER_DAY = 86_400.0


def gib(n_bytes: float) -> float:
    """Bytes -> GiB (2^30 bytes)."""
    return n_bytes / GIB


def from_gib(n_gib: float) -> float:
    """GiB -> bytes."""
    return n_gib * GIB


def gb_per_s(value_gb_per_s: float) -> float:
    """Decimal GB/s -> bytes/s."""
    return value_gb_per_s * GB


def gbit_per_s(value_gbit_per_s: float) -> float:
    """Line rate in Gb/s -> bytes/s."""
    return value_gbit_per_s * GB / 8


def tflops(value_tflops: float) -> float:
    """TFLOP/s -> FLOP/s."""
    return value_tflops * TERA


def microseconds(value_us: float) -> float:
    """Microseconds -> seconds."""
    return value_us * 1e-6


# --- quantities as people write them

JSON_EXACT_INT = 2**53
"""Whole numbers JSON readers hold exactly: below 2^53 (a double's 53-bit significand;
JavaScript's Number.MAX_SAFE_INTEGER is 2^53 - 1). Every count planner prints in `--json` (the
token budget, its steps, the steps between checkpoints) stays below it."""

MAX_TOKENS = 9 * 10**15
"""The largest token budget `parse_tokens` reads: 9P, 600 times Llama 3's pre-training (some
15T tokens: The Llama 3 Herd of Models, arXiv:2407.21783) and below JSON_EXACT_INT
(9,007,199,254,740,992), so that the budget and its steps print exactly in `--json`. Past it a
budget is a typo, and its days and dollars only long strings of digits."""

_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12, "P": 10**15}
_TOKENS_RE = re.compile(r"^\s*([0-9][0-9_,]*\.?[0-9_]*(?:[eE][+-]?[0-9]+)?)\s*([KMBGTP]?)\s*$")


def parse_tokens(text: str, option: str) -> int:
    """A token count: '15T', '2.5e12', '300B', '1.2M', '500k', '1_000_000' -> int (> 0).

    Suffixes are decimal: K 1e3, M 1e6, B or G 1e9, T 1e12, P 1e15 (case-insensitive). Read
    exactly, in decimal ('4503599627370494.5' rounds half up to ...495, where the nearest float
    is ...494); a fraction of a token ('1.5') rounds half up. At most MAX_TOKENS (9P)."""
    m = _TOKENS_RE.match(text.upper()) if isinstance(text, str) else None
    if m is None:
        raise InputError(
            f"{option}: expected a token count like 15T, 300B, 1.2M or 2.5e12 (got {text!r})"
        )
    number, suffix = m.groups()
    whole = re.split(r"[.E]", number)[0]
    if "," in whole and not re.fullmatch(r"[0-9]{1,3}(?:[,_][0-9]{3})+", whole):
        raise InputError(
            f"{option}: commas only between groups of three digits (1,000B); a fraction takes a "
            f"point (1.5T) (got {text!r})"
        )
    try:
        digits = Decimal(number.replace("_", "").replace(",", ""))
    except InvalidOperation:  # a number's syntax, with an exponent past any Decimal's
        digits = Decimal(0 if "E-" in number else "1e999")
    # a number past 1e30 is past MAX_TOKENS at any suffix: refused before the product, which
    # a large enough exponent ("1e999999T") overflows Decimal's context with
    big = digits.adjusted() > 30
    value = Decimal(0) if big else digits * _SUFFIX[suffix]
    if big or value > MAX_TOKENS:
        bound = (
            f"at most {format_tokens(MAX_TOKENS)} tokens ({MAX_TOKENS:,}: 600 times Llama 3's "
            "15T, and below 2^53, the largest whole number JSON holds exactly)"
        )
        if not math.isfinite(float(digits) * _SUFFIX[suffix]):
            raise InputError(f"{option}: too large to be a number (got {text!r}); {bound}")
        raise InputError(f"{option}: {bound} (got {text!r})")
    if value < 1:
        raise InputError(f"{option}: must be at least one token (got {text!r})")
    return int(value.to_integral_value(ROUND_HALF_UP))


def _scaled(x: float, units: tuple[tuple[str, float], ...], spec: str) -> str | None:
    """x in the largest of the (suffix, scale) units it reaches once written in `spec`, largest
    first (1.5e6 -> '1.5M'; 999,800 at 3 digits -> '1M', not '1e+03k'; 999.7 -> '1k'); None
    below the smallest. Past the largest (1,000 of it once rounded: 999.5 x it at 3 digits)
    x in `spec` alone, without a unit ('1e+18'), never '1e+03' of the largest. The units are
    each 1,000 times the next."""
    for i, (suffix, scale) in enumerate(units):
        text = f"{x / scale:{spec}}"
        if abs(float(text)) < 1:
            continue
        if abs(float(text)) >= 1000:  # rounded up into the larger unit, or past the largest
            if i == 0:
                return f"{x:{spec}}"
            suffix, scale = units[i - 1]
            text = f"{x / scale:{spec}}"
        return f"{text}{suffix}"
    return None


def format_si(x: float, spec: str = ".3g") -> str:
    """67800 -> '67.8k', 1.35e5 -> '135k', 12.5 -> '12.5' (G, M, k)."""
    return _scaled(x, (("G", 1e9), ("M", 1e6), ("k", 1e3)), spec) or f"{x:{spec}}"


def format_tokens(n: float) -> str:
    """15e12 -> '15T', 3e11 -> '300B', 1.2e6 -> '1.2M', 1e15 -> '1P': every budget
    `parse_tokens` reads (up to 9P) in a unit; 999.5T, which rounds to 1,000T, as '1P'."""
    units = (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))
    return _scaled(n, units, ".3g") or f"{n:.0f}"


def format_money(usd: float) -> str:
    """7.1e7 -> '$71M', 950 -> '$950', 2.5e12 -> '$2.5T'; from $999.5T, dollars in exponent
    form ('$1e+15'), not '$1e+03T'."""
    scaled = _scaled(usd, (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)), ".3g")
    return f"${scaled or f'{usd:,.0f}'}"


def format_bytes(n: float) -> str:
    """5.68e12 -> '5.68 TB', 2e15 -> '2 PB'."""
    units = ((" PB", 1e15), (" TB", 1e12), (" GB", 1e9), (" MB", 1e6))
    scaled = _scaled(n, units, ".3g")
    if scaled is None:
        return f"{n:.0f} B"
    return scaled if scaled[-1] == "B" else f"{scaled} B"  # past the PB, '1e+18 B'


def format_amount(x: float, decimals: int = 1) -> str:
    """x with thousands separated and `decimals` places (12,345.7), or two significant digits
    where those places would write a quantity that is not zero as 0 (0.00029 days)."""
    text = f"{x:,.{decimals}f}"
    if x != 0 and float(text.replace(",", "")) == 0:
        return f"{x:.2g}"
    return text


def format_duration(seconds: float) -> str:
    if seconds >= 2 * SECONDS_PER_HOUR:  # thousands separated; past a million hours, exponent
        hours = seconds / SECONDS_PER_HOUR
        return f"{hours:,.1f} h" if hours < 1e6 else f"{hours:.3g} h"
    if seconds >= 600:
        return f"{seconds / 60:.0f} min"
    if seconds >= 120:
        return f"{seconds / 60:.1f} min"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.2g} ms"  # 530 ms, not 5.3e+02 ms


def gib_text(n_bytes: float) -> str:
    """Bytes as GiB to one place ('61.9'), as the memory tables print them."""
    return f"{gib(n_bytes):.1f}"


AGAINST_MAX_PLACES = 6
"""The most decimals `against` writes GiB to: 10^-6 GiB is about 1 KiB, so only a peak within
a KiB or so of its capacity may still read alike (a byte-exact tie does, and fits)."""


def against(peak: float, capacity: float) -> tuple[str, str]:
    """A peak and its capacity (bytes) in GiB, to one place, or to the fewest more at which the
    two read apart where they are not the same bytes ('peak 61.90 GiB of 61.89 GiB', never
    'peak 61.9 GiB of 61.9 GiB' over a plan 10 MiB over). Rounding keeps their order, so a peak
    within its capacity never reads above it, nor one over it below it."""
    places = 1
    while peak != capacity and places < AGAINST_MAX_PLACES:
        if f"{gib(peak):.{places}f}" != f"{gib(capacity):.{places}f}":
            break
        places += 1
    return f"{gib(peak):.{places}f}", f"{gib(capacity):.{places}f}"


def over(n_bytes: float) -> str:
    """An amount over a capacity (bytes): GiB to one place, or MiB below 0.05 GiB ('10 MiB',
    not '0.0 GiB'), at least 1 MiB."""
    if gib(n_bytes) >= 0.05:
        return f"{gib_text(n_bytes)} GiB"
    return f"{max(1.0, n_bytes / MIB):.0f} MiB"


def shown(value: float, digits: int) -> float:
    """`value` rounded to the `digits` decimals a message prints, a negative zero made 0.0: a
    change that rounds away prints 0.000 (or +0.0%), never -0.000."""
    return round(value, digits) + 0.0
