"""planner.ops.figures: the operations figures `scale --json` prints.

Oracles: the definition of significant digits (hand-written expectations below), and the keys
of `explain --json`'s operations object (planner.cli.report.operations_dict), which
`scale --json` keeps.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from jobs import job

from planner.cli import report
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.ops import figures
from planner.ops import operations as ops
from planner.ops.assumptions import OpsParams


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.2838755228190396e-08, 1.28388e-08),  # a goodput fixed decimals printed as 0.0
        (0.0037632000000000004, 0.0037632),  # 100M tokens' MWh on 8 GPUs, printed as 0.0
        (0.999823456, 0.999823),
        (234_688_760.628, 234_689_000.0),
        (-0.0123456789, -0.0123457),
        (0.0, 0.0),
        (None, None),
    ],
)
def test_significant_digits(value: float | None, expected: float | None) -> None:
    assert figures.significant(value) == expected


def test_significant_never_turns_a_number_into_zero() -> None:
    for exponent in range(-300, 300, 7):
        x = 1.234567 * 10.0**exponent
        assert figures.significant(x) != 0
        assert math.isclose(figures.significant(x) or 0, x, rel_tol=1e-5)
    assert figures.significant(5e-324) == 5e-324  # the smallest float stays itself


def _job(num_gpus: int = 8) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", num_gpus, 8192, 128)


def test_the_keys_are_explains() -> None:
    """`scale --json` keeps the keys of `explain --json`'s operations (only the rounding
    differs), and every figure not zero stays not zero. By hand: 100M tokens on 8 GPUs are
    ceil(1e8 / 1,048,576) = 96 steps of 14 s = 1,344 s; IT power 8 x 700 W + one node's
    4,600 W = 10,200 W, x PUE 1.1 = 11,220 W; 11,220 W x 1,344 s / 3.6e9 = 0.0041888 MWh
    failure-free (/ goodput with failures), which 2 decimals printed as 0.0."""
    job = _job()
    perf = replace(cost.estimate(job, Layout(tp=8)), step_time_s=14.0)
    o = ops.operations(job, perf, 100_000_000, OpsParams(price_usd_per_gpu_hour=0.02))
    ours = figures.operations_dict(o)
    assert ours == report.operations_dict(o)  # explain --json prints the same object
    assert o.steps == 96 and o.facility_power_w == pytest.approx(11_220.0)
    assert o.energy_mwh is not None
    assert o.energy_mwh * o.resilience.goodput == pytest.approx(0.0041888, rel=1e-4)
    for key, value in ours.items():
        if isinstance(value, float) and value != 0:
            assert math.isclose(value, _raw(o, key), rel_tol=1e-5), key
    assert ours["energy_mwh"] > 0  # 2 fixed decimals printed 0.0


def test_effective_tokens_per_gpu_is_a_key() -> None:
    """`scale`'s "eff. tokens/s/GPU" column had no key: it is `effective_tokens_per_s_per_gpu`,
    beside the failure-free `tokens_per_s`. By hand: 1,048,576 tokens a step in 14 s on 8 GPUs
    are 74,898.29 tokens/s, 9,362.29 a GPU, failure-free; x goodput with failures."""
    job = _job()
    perf = replace(cost.estimate(job, Layout(tp=8)), step_time_s=14.0)
    d = figures.operations_dict(ops.operations(job, perf, None, OpsParams()))
    assert d["tokens_per_s"] == pytest.approx(74_898.29, rel=1e-6)
    assert d["effective_tokens_per_s_per_gpu"] == pytest.approx(9_362.29 * d["goodput"], rel=1e-5)
    assert d["effective_tokens_per_s_per_gpu"] == pytest.approx(d["effective_tokens_per_s"] / 8)


def _raw(o: ops.Operations, key: str) -> float:
    """The unrounded figure behind a key (None where it is an option's value)."""
    r = o.resilience
    raw = {
        "days": o.days,
        "days_no_failures": o.days_no_failures,
        "gpu_hours": o.gpu_hours,
        "cost_usd": o.cost_usd,
        "usd_per_million_tokens": o.usd_per_million_tokens,
        "energy_mwh": o.energy_mwh,
        "facility_power_mw": o.facility_power_w / 1e6,
        "tokens_per_s": o.tokens_per_s,
        "effective_tokens_per_s": o.effective_tokens_per_s,
        "effective_tokens_per_s_per_gpu": o.effective_tokens_per_s / o.num_gpus,
        "goodput": r.goodput,
        "lost_to_checkpoints": r.lost_checkpoint,
        "lost_to_failures": r.lost_failures,
        "lost_to_restarts": r.lost_restart,
        "lost_to_rework": r.lost_rework,
        "checkpoint_interval_min": r.interval_s / 60,
        "young_interval_min": r.young_interval_s / 60,
        "daly_interval_min": r.daly_interval_s / 60,
        "checkpoint_gb": r.checkpoint_bytes / 1e9,
        "checkpoint_write_s": r.checkpoint_write_s,
        "checkpoint_blocking_s": r.checkpoint_blocking_s,
        "mtbf_h": r.mtbf_s / 3600,
        "restart_s": r.restart_s,
        "expected_failures": o.expected_failures,
    }.get(key)
    if raw is None:  # an option's own value, printed as given
        return float(figures.operations_dict(o)[key])
    return float(raw)
