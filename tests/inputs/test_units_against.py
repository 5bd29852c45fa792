"""`units.against` and `units.over`: a peak beside its capacity, and the amount over it, as every
command and launch file prints them.

Oracles: hand arithmetic in GiB (2^30 bytes, 1 MiB = 1/1024 GiB) for the named cases; a brute
force over peaks and capacities a few MiB to a GiB apart for the order (rounding to a common
number of places never turns a peak within its capacity into one above it, nor the reverse)."""

from __future__ import annotations

import random

from planner.inputs.units import GIB, MIB, against, over


def test_one_place_where_it_tells_the_two_apart() -> None:
    # 61.5 and 61.9 GiB differ at one place
    assert against(61.5 * GIB, 61.9 * GIB) == ("61.5", "61.9")


def test_ten_mib_over_reads_as_more() -> None:
    # 61.894 GiB less 10 MiB (0.009766 GiB) = 61.884 GiB: 61.9 and 61.9 at one place, 61.89 and
    # 61.88 at two
    assert against(61.894 * GIB, 61.894 * GIB - 10 * MIB) == ("61.89", "61.88")


def test_three_places_where_two_read_alike() -> None:
    # 61.8949 GiB over 61.8851 GiB (10 MiB apart, to 0.0002): 61.89 and 61.89 at two places,
    # 61.895 and 61.885 at three
    assert against(61.8949 * GIB, 61.8851 * GIB) == ("61.895", "61.885")


def test_a_byte_exact_tie_reads_alike_at_one_place() -> None:
    # peak == capacity fits (`MemoryReport.fits`: shortfall <= 0), and reads as equal
    assert against(61.89 * GIB, 61.89 * GIB) == ("61.9", "61.9")


def test_rounding_keeps_the_order_brute_force() -> None:
    rng = random.Random(0)
    for _ in range(5000):
        capacity = rng.uniform(1, 200) * GIB
        delta = rng.choice([2 * 1024, MIB, 10 * MIB, 51 * MIB, GIB]) * rng.choice([1, -1])
        peak = capacity + delta
        a, b = against(peak, capacity)
        assert a != b, (peak, capacity)
        assert (float(a) > float(b)) == (peak > capacity), (peak, capacity, a, b)
        assert len(a.split(".")[1]) == len(b.split(".")[1])  # one number of places for both


def test_over_names_mib_below_a_twentieth_of_a_gib() -> None:
    # 10 MiB = 0.0098 GiB would read '0.0 GiB'; 0.5 GiB reads as GiB; a few bytes as 1 MiB
    assert over(10 * MIB) == "10 MiB"
    assert over(0.5 * GIB) == "0.5 GiB"
    assert over(100) == "1 MiB"
