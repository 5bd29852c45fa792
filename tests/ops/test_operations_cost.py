"""Tests for planner.ops cost and energy: by hand, stretched by failures, unpriced GPUs, budgets
below a step, and bad parameters or settings without progress refused naming the option.

Oracles: hand arithmetic in comments for cost and energy; the CLI contract (exit 2 naming the
option for bad input).
"""

from __future__ import annotations

import pytest
from cli_run import run
from operations_jobs import EXAMPLE, LAYOUT_64, make_job, perf_with_step

from planner.cli.ops_options import named_options
from planner.inputs.errors import InputError
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import AssumptionError, OpsParams

# ----------------------------------------------------------------------------- time, cost, energy


def test_cost_and_energy_by_hand() -> None:
    """64 H100 (8 nodes), 2.0 s steps of 128 x 8192 = 1,048,576 tokens, failures and checkpoints
    made negligible so that goodput ~ 1:
      budget 1,048,576,000 tokens = 1,000 steps = 2,000 s = 0.023148 days
      GPU-hours = 64 x 2,000 / 3,600 = 35.556; cost at $2 = $71.11
      IT power = 64 x 700 W + 8 x 4,600 W = 44,800 + 36,800 = 81,600 W; x PUE 1.1 = 89,760 W
      energy = 89,760 W x 2,000 s / 3.6e9 = 0.049867 MWh
    """
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    p = OpsParams(
        price_usd_per_gpu_hour=2.0,
        failure_rate_per_gpu_day=1e-12,
        storage_gb_per_s_per_node=1e9,
        host_copy_gb_per_s=1e9,  # a save copies to host memory too (resilience's docstring)
    )
    o = ops.operations(job, perf, 1_048_576_000, p)
    assert o.steps == 1000
    assert o.train_s == pytest.approx(2000.0)
    assert o.resilience.goodput == pytest.approx(1.0, abs=1e-9)
    assert o.days == pytest.approx(2000 / 86_400, rel=1e-6)
    assert o.gpu_hours == pytest.approx(35.5556, rel=1e-4)
    assert o.cost_usd == pytest.approx(71.111, rel=1e-4)
    assert o.nodes == 8
    assert o.node_overhead_w == pytest.approx(4600.0)
    assert o.facility_power_w == pytest.approx(89_760.0)
    assert o.energy_mwh == pytest.approx(0.049867, rel=1e-4)
    assert o.price_source == "--price"
    # $ per million tokens: 64 x $2 / 3600 s = $0.035556/s over 524,288 tokens/s = $0.0678/M
    assert o.usd_per_million_tokens == pytest.approx(0.035556 / 524_288 * 1e6, rel=1e-4)


def test_failures_stretch_wall_clock_cost_and_energy_together() -> None:
    job = make_job(num_gpus=8192)
    perf = perf_with_step(job, LAYOUT_64, 1.0)
    o = ops.operations(job, perf, 10**12)
    r = o.resilience
    assert r.goodput < 1
    assert o.wall_s == pytest.approx(o.train_s / r.goodput)  # type: ignore[operator]
    assert o.gpu_hours == pytest.approx(8192 * o.wall_s / 3600)  # type: ignore[operator]
    assert o.cost_usd == pytest.approx(o.gpu_hours * 3.24)  # type: ignore[operator]
    assert o.effective_tokens_per_s == pytest.approx(o.tokens_per_s * r.goodput)
    assert o.expected_failures == pytest.approx(o.wall_s / r.mtbf_s)  # type: ignore[operator]
    assert o.price_source.startswith("pricegpu.pages.dev")  # the catalog's source


def test_gpu_without_price_has_no_cost() -> None:
    job = make_job(num_gpus=64, gpu="h800-sxm-80gb")
    o = ops.operations(job, perf_with_step(job, LAYOUT_64, 2.0), 10**12)
    assert o.cost_usd is None and o.usd_per_million_tokens is None
    assert "--price" in o.price_source
    assert o.gpu_hours is not None and o.energy_mwh is not None


def test_budget_smaller_than_one_step() -> None:
    job = make_job()
    with pytest.raises(AssumptionError, match=r"1,000 tokens is less than one .*1,048,576") as e:
        ops.operations(job, perf_with_step(job, LAYOUT_64, 2.0), 1000)
    assert e.value.field == "tokens"  # the command line names it --tokens (test_cli_names_...)


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("price_usd_per_gpu_hour", 0.0, "--price"),
        ("price_usd_per_gpu_hour", -2.0, "--price"),
        ("failure_rate_per_gpu_day", 0.0, "--failure-rate"),
        ("failure_rate_per_gpu_day", -1e-4, "--failure-rate"),
        ("restart_min", 0.0, "--restart-min"),
        ("storage_gb_per_s_per_node", 0.0, "--storage-gb-per-s"),
        ("storage_gb_per_s_per_node", float("nan"), "--storage-gb-per-s"),
        ("pue", 0.9, "--pue"),
        ("node_overhead_w", -1.0, "--node-overhead-w"),
        ("gpu_power_w", float("inf"), "--gpu-power-w"),
        ("checkpoint_interval_min", 0.0, "--checkpoint-interval-min"),
        ("checkpoint_interval_min", 1e250, "--checkpoint-interval-min"),
        ("failure_rate_per_gpu_day", 1e-300, "--failure-rate"),
        ("pue", 1e300, "--pue"),
        ("node_overhead_w", 1e300, "--node-overhead-w"),
        # no option sets the host copy's rate: it blocks under --async-checkpoint
        ("host_copy_gb_per_s", -5.0, "--async-checkpoint"),
    ],
)
def test_bad_parameters_name_the_option(field: str, value: float, option: str) -> None:
    with pytest.raises(AssumptionError, match=field) as info:
        OpsParams(**{field: value})  # type: ignore[arg-type]
    assert info.value.field == field and repr(value) in str(info.value)
    # the command line reports it under the option that set it
    with pytest.raises(InputError, match=f"^{option}: ") as named, named_options():
        OpsParams(**{field: value})  # type: ignore[arg-type]
    assert repr(value) in str(named.value)


def test_no_progress_is_refused_under_the_setting_that_decides_it() -> None:
    """Settings under which the job never trains are refused, not divided by: 100 interruptions
    per GPU-day on 32 GPUs is one every 86,400 / 3,200 = 27 s, against a 10 min restart, so
    Daly's e^(R / M) alone is e^(600 / 27) ~ 4e9 and goodput is below a billionth (the restart
    decides it); 1e308 per GPU-day leaves no time between interruptions (MTBF 0 s); a
    checkpoint interval of 1e308 minutes is past its bound; and at 1e-9 GB/s per node
    the reload of an 8B checkpoint (8.03e9 x 14 bytes, one node) takes ~1.1e11 s (storage)."""
    job = make_job(num_gpus=32)
    with pytest.raises(AssumptionError, match=r"no progress .* every 27\.0 s") as e:
        resilience.resilience(job, 2.0, OpsParams(failure_rate_per_gpu_day=100.0))
    assert e.value.field == "restart_min"
    with pytest.raises(AssumptionError, match="MTBF 0 s") as e:
        resilience.resilience(job, 2.0, OpsParams(failure_rate_per_gpu_day=1e308))
    assert e.value.field == "failure_rate_per_gpu_day"
    with pytest.raises(AssumptionError, match=r"1e\+308 is too large: at most 1e\+06") as e:
        resilience.resilience(job, 2.0, OpsParams(checkpoint_interval_min=1e308))
    assert e.value.field == "checkpoint_interval_min"
    one_node = make_job(num_gpus=8)
    with pytest.raises(AssumptionError, match=r"1\.12e\+11 s to restart") as e:
        resilience.resilience(one_node, 2.0, OpsParams(storage_gb_per_s_per_node=1e-9))
    assert e.value.field == "storage_gb_per_s_per_node"
    # a step of 1e9 s (31 years) against an interruption every 86,400 / (4.74e-4 x 8) = 2.3e7 s
    # (264 days): no checkpoint interval is shorter than a step, the plan's sizes decide it
    with pytest.raises(AssumptionError, match=r"one step takes 1\.00e\+09 s, longer than") as e:
        resilience.resilience(one_node, 1e9, OpsParams())
    assert e.value.field == "step_time"
    with pytest.raises(InputError, match=r"^--failure-rate: one step takes"), named_options():
        resilience.resilience(one_node, 1e9, OpsParams())
    # 1e-320 per GPU-day (a subnormal float): 86,400 / (1e-320 x 32) overflows to inf, an MTBF
    # of no interruption at all, below the least rate (assumptions.MIN_FAILURE_RATE_PER_GPU_DAY)
    with pytest.raises(AssumptionError, match="1e-320 is too small: at least 1e-12") as e:
        resilience.resilience(job, 2.0, OpsParams(failure_rate_per_gpu_day=1e-320))
    assert e.value.field == "failure_rate_per_gpu_day"
    # one interruption every 86,400 / 32 s = 45 min: slow, but training
    slow = resilience.resilience(job, 2.0, OpsParams(failure_rate_per_gpu_day=1.0))
    assert resilience.MIN_GOODPUT < slow.goodput < 0.9


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["scale", "--num-gpus", "8", "--restart-min", "1e308"], "--restart-min"),
        (["explain", str(EXAMPLE), "--failure-rate", "1e308"], "--failure-rate"),
        (["explain", str(EXAMPLE), "--tokens", "15T", "--restart-min", "1e308"], "--restart-min"),
        (["scale", "--num-gpus", "8", "--checkpoint-interval-min", "1e308"], "--checkpoint-"),
        (["scale", "--num-gpus", "8", "--storage-gb-per-s", "1e-9"], "--storage-gb-per-s"),
    ],
)
def test_cli_no_progress_exits_2_naming_the_option(
    command: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fuzzer's internal errors (overflow, division by zero): now exit 2 naming the option."""
    code, _, err = run(command, capsys)
    assert code == 2, err
    assert f"planner: error: {option}" in err and "internal error" not in err


@pytest.mark.parametrize(
    ("options", "lead", "factor"),
    [
        # 1 node x 1.7e308 W x PUE 1.1 > 1.8e308, the largest float; then PUE 1e308; then a
        # finite power whose energy over 15T tokens is past a float: now each past its bound
        # (at most 1e6 W a node, a PUE of 10), named with its value
        (["--node-overhead-w", "1.7e308"], "--node-overhead-w: 1.7e+308 is too large", ""),
        (["--pue", "1e308"], "--pue: 1e+308 is too large", ""),
        (["--tokens", "15T", "--node-overhead-w", "1e300"], "--node-overhead-w: 1e+300 is", ""),
        # a cost past a float is the price's (the tokens are at most 9P): 1T tokens on the
        # example's 8 GPUs are ~3e4 GPU-hours, x $1e305 = 3e309 > 1.8e308; it was reported
        # under "operations", no option
        (
            ["--tokens", "1T", "--price", "1e305"],
            "--price: the cost overflows a float",
            "x $1e+305 (--price)",
        ),
        (["--tokens", "1e300", "--price", "1e300"], "--tokens: at most 9P tokens", ""),
    ],
)
def test_cli_figures_past_a_float_exit_2_naming_their_factors(
    options: list[str], lead: str, factor: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fuzzer's `--json` with Infinity in it (not JSON) and 'inf MWh': finite options whose
    product overflows exit 2 naming the option at fault first (it was "operations: the energy
    overflows a float ... (--tokens)" for --pue 1e300), with its value, and each factor."""
    code, out, err = run(["explain", str(EXAMPLE), "--json", *options], capsys)
    assert code == 2 and not out, out
    assert f"planner: error: {lead}" in err, err
    assert factor in err and "error: operations:" not in err, err
