"""The bounds on the operations options (planner.ops.assumptions, the token budget's
units.MAX_TOKENS) and the count they keep below 2^53 (planner.ops.resilience).

Oracles: hand arithmetic in the comments, and each bound's own value (accepted at it, refused a
hair past it).
"""

from __future__ import annotations

import pytest
from jobs import job as make

from planner.ops import resilience
from planner.ops.assumptions import AssumptionError, OpsParams


def test_checkpoint_interval_steps_stay_below_2_to_the_53() -> None:
    """A count JSON readers cannot hold exactly (2^53 = 9.007e15 and up) is refused, under the
    option behind it: a 1e6-minute interval (the most, 6e7 s) over 1e-9 s steps is 6e16 steps;
    Daly's interval at the least failure rate (1e-12 per GPU-day x 8 GPUs: an interruption
    every 86,400 / 8e-12 = 1.08e16 s) is sqrt(2 delta M) ~ sqrt(2 x 113 x 1.08e16) ~ 1.6e9 s,
    1.6e18 steps of 1e-9 s. No plan's step is that short; the bounds on the options alone keep
    every real plan's count below 2^53."""
    job = make("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128)
    given = OpsParams(checkpoint_interval_min=1e6)
    with pytest.raises(AssumptionError, match=r"6e\+16 steps .* past 2\^53") as e:
        resilience.resilience(job, 1e-9, given)
    assert e.value.field == "checkpoint_interval_min"
    rate = OpsParams(failure_rate_per_gpu_day=1e-12)
    with pytest.raises(AssumptionError, match=r"1\.[5-7]\d*e\+18 steps .* past 2\^53") as e:
        resilience.resilience(job, 1e-9, rate)
    assert e.value.field == "failure_rate_per_gpu_day"
    # at a real step (2 s) the same settings are 3e7 and 8e8 steps: planned
    assert resilience.resilience(job, 2.0, given).interval_steps == 30_000_000
    assert resilience.resilience(job, 2.0, rate).interval_steps < 10**9


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("pue", 10.0, True),
        ("pue", 10.000001, False),
        ("node_overhead_w", 1e6, True),
        ("node_overhead_w", 1.000001e6, False),
        ("checkpoint_interval_min", 1e6, True),
        ("checkpoint_interval_min", 1.000001e6, False),
        ("failure_rate_per_gpu_day", 1e-12, True),
        ("failure_rate_per_gpu_day", 0.999999e-12, False),
    ],
)
def test_bounds_are_inclusive(field: str, value: float, ok: bool) -> None:
    """Each bound itself is accepted, a hair past it refused under its field (the command line
    names the option: test_bad_parameters_name_the_option)."""
    if ok:
        assert getattr(OpsParams(**{field: value}), field) == value  # type: ignore[arg-type]
        return
    with pytest.raises(AssumptionError) as e:
        OpsParams(**{field: value})  # type: ignore[arg-type]
    assert e.value.field == field and repr(value) in str(e.value)
