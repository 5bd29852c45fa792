"""Operations figures as `--json` prints them: every computed figure to SIGNIFICANT_DIGITS
significant digits, so that no figure that is not zero prints as 0.0 (fixed decimals printed
the 0.0038 MWh of a 100M-token run on 8 GPUs as 0.0, and a goodput of 1.3e-8 as 0.0 beside
234,688,760 days). The options' own values (price, power, PUE, rates) print as given.
"""

from __future__ import annotations

import math
from typing import Any

from planner.inputs import units
from planner.inputs.units import SECONDS_PER_HOUR
from planner.ops.operations import Operations

SIGNIFICANT_DIGITS = 6
"""Digits kept: six, so that a goodput near 1 keeps the 1e-5 steps of its losses (0.99982 and
0.99975 differ; four digits print both as 0.9998) and no figure loses a digit it had at the
fixed decimals before (days to 1e-3 up to a thousand days, goodput to 1e-5)."""


def significant(x: float | None, digits: int = SIGNIFICANT_DIGITS) -> float | None:
    """x to `digits` significant digits; None, zero and non-finite values as they are. Never
    turns a number that is not zero into 0.0 (1.2838e-08 -> 1.28388e-08)."""
    if x is None or x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits}g}")


def operations_dict(o: Operations) -> dict[str, Any]:
    """`scale --json`'s `operations` object (the keys of `explain --json`'s): days, GPU-hours,
    cost, energy, checkpoint interval, goodput (the fraction of wall-clock time that trains).
    `tokens_per_s` is failure-free (the cluster's, as `performance.tokens_per_s_per_gpu` is a
    GPU's); `effective_tokens_per_s` and `effective_tokens_per_s_per_gpu` are with failures
    (x goodput): `scale`'s "tokens/s (eff.)" and "tokens/s/GPU (eff.)" columns, its efficiency
    the per-GPU one over the first size's."""
    r = o.resilience
    p = o.params
    sig = significant
    return {
        "tokens": o.tokens,
        "steps": o.steps,
        "days": sig(o.days),
        "days_no_failures": sig(o.days_no_failures),
        "gpu_hours": sig(o.gpu_hours),
        "cost_usd": sig(o.cost_usd),
        "price_usd_per_gpu_hour": o.price_usd_per_gpu_hour,
        "price_source": o.price_source,
        "usd_per_million_tokens": sig(o.usd_per_million_tokens),
        "energy_mwh": sig(o.energy_mwh),
        "facility_power_mw": sig(o.facility_power_w / 1e6),
        "gpu_power_w": o.gpu_power_w,
        "node_overhead_w": o.node_overhead_w,
        "pue": o.pue,
        "tokens_per_s": sig(o.tokens_per_s),
        "effective_tokens_per_s": sig(o.effective_tokens_per_s),
        "effective_tokens_per_s_per_gpu": sig(o.effective_tokens_per_s / o.num_gpus),
        "goodput": sig(r.goodput),
        "lost_to_checkpoints": sig(r.lost_checkpoint),
        "lost_to_failures": sig(r.lost_failures),
        "lost_to_restarts": sig(r.lost_restart),
        "lost_to_rework": sig(r.lost_rework),
        "checkpoint_interval_min": sig(r.interval_s / 60),
        "checkpoint_interval_steps": r.interval_steps,
        "young_interval_min": sig(r.young_interval_s / 60),
        "daly_interval_min": sig(r.daly_interval_s / 60),
        "checkpoint_gb": sig(r.checkpoint_bytes / units.GB),
        "checkpoint_write_s": sig(r.checkpoint_write_s),
        "checkpoint_blocking_s": sig(r.checkpoint_blocking_s),
        "async_checkpoint": r.async_checkpoint,
        "mtbf_h": sig(r.mtbf_s / SECONDS_PER_HOUR),
        "restart_s": sig(r.restart_s),
        "expected_failures": sig(o.expected_failures),
        "failure_rate_per_gpu_day": p.failure_rate_per_gpu_day,
        "storage_gb_per_s_per_node": p.storage_gb_per_s_per_node,
    }
