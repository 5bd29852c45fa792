"""Tests for planner.ops (operations, resilience, assumptions): time, cost, energy,
checkpoints, failures and goodput.

Oracles: the closed forms of Young (1974) and Daly (2006) and the optimum intervals Daly's paper
reports for its own examples; a brute-force minimisation of Daly's complete wall-time model; hand
arithmetic in comments for cost, energy and checkpoint time; Meta's Llama 3 report (419
unexpected interruptions in 54 days on 16,384 GPUs, > 90 % effective training time); and the CLI
contract (exit 2 naming the option for bad input).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.cli.ops_options import named_options
from planner.emit.common import summary_lines
from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import FAILURE_RATE_PER_GPU_DAY, AssumptionError, OpsParams

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"


def make_job(model: str = "llama3.1-8b", num_gpus: int = 64, gpu: str = "h100-sxm-80gb") -> Job:
    g = catalog.get_gpu(gpu)
    cluster = ClusterSpec(
        gpu=g, num_gpus=num_gpus, gpus_per_node=g.gpus_per_node, memory_gib=g.memory_gib,
        tiers=g.tiers,
    )  # fmt: skip
    return Job(
        arch=catalog.resolve_model(model), cluster=cluster, seq_length=8192, global_batch_size=128
    )


def perf_with_step(job: Job, layout: Layout, step_time_s: float) -> Performance:
    """A real Performance with its step time set to a round number for hand arithmetic."""
    return replace(cost.estimate(job, layout), step_time_s=step_time_s)


LAYOUT_64 = Layout(tp=2, pp=1, dp=32, sequence_parallel=True)

LLAMA_405B_CHECKPOINT_BYTES = 5_681_947_443_200
"""405,853,388,800 parameters (HF meta-llama/Llama-3.1-405B) x 14 bytes."""


# ----------------------------------------------------------------------------- Young / Daly


def test_young_closed_form() -> None:
    # delta = 300 s, M = 1 day: sqrt(2 x 300 x 86,400) = sqrt(51,840,000) = 7,200 s exactly
    assert resilience.young_interval(300, 86_400) == pytest.approx(7_200, rel=1e-12)


@pytest.mark.parametrize(
    ("delta", "mtbf", "expected"),
    [
        # Daly's sqrt(2 delta M)(1 + sqrt(x)/3 + x/9) - delta with x = delta / 2M, by hand:
        # x = 300 / 172,800 = 1/576, sqrt(x) = 1/24: 7200 (1 + 1/72 + 1/5184) - 300 = 7001.3889
        (300.0, 86_400.0, 7001.3889),
        # x = 1/1440, sqrt(x) = 0.0263523: 189.73666 x 1.0088613 - 5 = 186.41797
        (5.0, 3_600.0, 186.41797),
        # x = 1/30, sqrt(x) = 0.1825742: 328.63353 x 1.0645618 - 60 = 289.85070
        (60.0, 900.0, 289.85070),
    ],
)
def test_daly_closed_form(delta: float, mtbf: float, expected: float) -> None:
    assert resilience.daly_interval(delta, mtbf) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    ("mtbf_min", "expected_min", "tol_min"),
    [(24 * 60, 117, 0.5), (6 * 60, 57, 0.5), (15, 9.1, 0.05)],
)
def test_daly_reproduces_the_paper(mtbf_min: float, expected_min: float, tol_min: float) -> None:
    # Daly 2006, Figs. 3-5: delta = 5 min, R = 10 min; the model predicts tau_opt = 117, 57 and
    # 9.1 min for M = 24 h, 6 h and 15 min
    got = resilience.daly_interval(5 * 60, mtbf_min * 60) / 60
    assert got == pytest.approx(expected_min, abs=tol_min)


def test_daly_beyond_two_mtbf_is_mtbf() -> None:
    assert resilience.daly_interval(700, 300) == 300
    assert resilience.daly_interval(600, 300) == 300


def test_daly_tends_to_young_for_cheap_checkpoints() -> None:
    ratio = resilience.daly_interval(1, 1e7) / resilience.young_interval(1, 1e7)
    assert ratio == pytest.approx(1, abs=1e-3)


@pytest.mark.parametrize(("delta", "mtbf", "restart"), [(5.0, 3_600.0, 600.0), (60, 20_000, 300)])
def test_daly_interval_minimises_the_complete_model(
    delta: float, mtbf: float, restart: float
) -> None:
    """Brute force: the tau that minimises Daly's complete wall-time model on a fine grid is the
    higher-order estimate (to within the estimate's own accuracy, ~1 %)."""
    grid = [delta * 0.5 + i * 0.25 for i in range(40_000)]
    best = min(grid, key=lambda t: resilience.daly_wall_time(1.0, t, delta, mtbf, restart))
    assert resilience.daly_interval(delta, mtbf) == pytest.approx(best, rel=0.01)


def test_complete_model_limits() -> None:
    # no failures (M -> infinity): wall = solve x (tau + delta) / tau
    assert resilience.daly_wall_time(100.0, 50.0, 5.0, 1e15, 600.0) == pytest.approx(
        110.0, rel=1e-6
    )
    # small ratios: 1 / goodput ~ 1 + delta/tau + (tau/2 + R)/M (first order)
    delta, tau, mtbf, restart = 3.0, 240.0, 11_000.0, 600.0
    first_order = 1 + delta / tau + (tau / 2 + restart) / mtbf
    assert resilience.daly_wall_time(1.0, tau, delta, mtbf, restart) == pytest.approx(
        first_order, rel=0.01
    )


# ----------------------------------------------------------------------------- checkpoint, failures


def test_checkpoint_size_and_write_time_by_hand() -> None:
    job = make_job("llama3.1-405b", num_gpus=16_384)
    # 405,853,388,800 parameters (the released checkpoint) x 14 bytes: 2 (bf16) + 4 (fp32
    # master) + 4 + 4 (Adam m, v), no gradients = 5,681,947,443,200 bytes
    assert resilience.checkpoint_bytes(job) == LLAMA_405B_CHECKPOINT_BYTES == 405_853_388_800 * 14
    # 16,384 GPUs / 8 = 2,048 nodes x 1 GB/s = 2.048e12 B/s -> 5.6819e12 / 2.048e12 = 2.7744 s
    assert resilience.checkpoint_write_s(job, OpsParams()) == pytest.approx(2.7743884, rel=1e-7)


def test_checkpoint_size_follows_the_optimizer_state_and_framework() -> None:
    """bf16 Adam moments need Megatron's precision-aware optimizer, whose TE FusedAdam holds the
    master: the checkpoint asks it for each state (Megatron-LM d98e8a64
    distrib_optimizer.py:1098-1109, `get_unscaled_state`), a bf16 moment saved as fp32 (TE
    fused_adam.py:344-349), the master as its int16 remainder (:335-339): 2 + 2 + 4 + 4 = 12, not
    10; where Megatron-Core keeps its own master (a tensorwise FP8 recipe for the optimizer), the
    states as they are: 2 + 4 + 2 + 2 = 10. torchtitan's FSDP2 shards fp32 parameters, with no
    bf16 copy: 4 + 4 + 4 = 12."""
    job = make_job("llama3.1-405b", num_gpus=16_384)
    bf16 = replace(job, optimizer_state_dtype="bf16")
    assert resilience.checkpoint_bytes(bf16) == 405_853_388_800 * 12
    own = replace(bf16, optimizer_fp8_recipe="tensorwise")
    assert resilience.checkpoint_bytes(own) == 405_853_388_800 * 10
    titan = replace(job, framework="torchtitan")
    assert resilience.checkpoint_bytes(titan) == 405_853_388_800 * 12


def _simulated_split(
    tau: float, delta: float, mtbf: float, restart: float, segments: int, seed: int
) -> tuple[float, float, float]:
    """(restart, re-done work, checkpoint) shares of the wall clock, by simulating Daly's model
    segment by segment: a segment of tau + delta runs until a failure (exponential, mean M)
    or its end; a failure loses the time run and starts a restart of R, which a failure during
    it starts over. Shares independent of the closed form being tested."""
    import random

    rng = random.Random(seed)
    seg = tau + delta
    lost_restart = lost_work = 0.0
    for _ in range(segments):
        while (t := rng.expovariate(1 / mtbf)) < seg:
            lost_work += t
            while (r := rng.expovariate(1 / mtbf)) < restart:
                lost_restart += r
            lost_restart += restart
    wall = segments * seg + lost_restart + lost_work
    return lost_restart / wall, lost_work / wall, segments * delta / wall


def test_failure_losses_split_into_restarts_and_rework() -> None:
    """At 10 failures per GPU-day on 8 GPUs (M = 86,400 / 80 = 1,080 s) the checkpoint interval
    is minutes, so a failure also loses minutes of work: the restart share used to be taken as
    R'/M capped by the whole loss, which left re-done work at 0. Oracle: a simulation of
    Daly's model (`_simulated_split`, 40,000 segments), within 3 points of a percent."""
    job = make_job(num_gpus=8)
    res = resilience.resilience(job, 2.0, OpsParams(failure_rate_per_gpu_day=10.0))
    restart, work, ckpt = _simulated_split(
        res.interval_s, res.checkpoint_blocking_s, res.mtbf_s, res.restart_s, 40_000, 7
    )
    assert res.lost_checkpoint == pytest.approx(ckpt, abs=0.003)
    assert res.lost_restart == pytest.approx(restart, abs=0.03)
    assert res.lost_rework == pytest.approx(work, abs=0.03)
    assert res.lost_rework > 0.05  # minutes of work lost per failure, not none
    total = res.goodput + res.lost_checkpoint + res.lost_restart + res.lost_rework
    assert total == pytest.approx(1.0, abs=1e-12)


def test_mtbf_of_llama3() -> None:
    # 419 interruptions in 54 days: 54 x 24 / 419 = 3.093 h between interruptions at 16,384 GPUs
    job = make_job("llama3.1-405b", num_gpus=16_384)
    assert resilience.mtbf_s(job, OpsParams()) / 3600 == pytest.approx(54 * 24 / 419, rel=1e-12)


def test_llama3_goodput_matches_meta_report() -> None:
    """Meta: > 90 % effective training time for Llama 3 405B on 16,384 H100 (tp8 pp16)."""
    job = make_job("llama3.1-405b", num_gpus=16_384)
    job = replace(job, global_batch_size=2048)
    layout = Layout(
        tp=8, pp=16, dp=128, sequence_parallel=True,
        pipeline_layers=(7,) + (8,) * 14 + (7,),
    )  # fmt: skip
    r = ops.operations(job, cost.estimate(job, layout), None).resilience
    assert 0.90 < r.goodput < 0.96
    assert r.lost_checkpoint + r.lost_failures == pytest.approx(1 - r.goodput, abs=1e-12)


def test_goodput_falls_with_size_and_failure_rate() -> None:
    small, big = make_job(num_gpus=64), make_job(num_gpus=8192)
    p = OpsParams()
    assert resilience.resilience(small, 2.0, p).goodput > resilience.resilience(big, 2.0, p).goodput
    worse = OpsParams(failure_rate_per_gpu_day=10 * FAILURE_RATE_PER_GPU_DAY)
    assert (
        resilience.resilience(big, 2.0, worse).goodput < resilience.resilience(big, 2.0, p).goodput
    )


def test_interval_is_whole_steps_and_can_be_given() -> None:
    job = make_job("llama3.1-405b", num_gpus=1024)
    r = resilience.resilience(job, 7.0, OpsParams())
    assert r.interval_s == pytest.approx(r.interval_steps * 7.0)
    assert abs(r.interval_s - r.daly_interval_s) <= 3.5 + 1e-9
    given = resilience.resilience(job, 7.0, OpsParams(checkpoint_interval_min=30))
    assert given.interval_steps == round(30 * 60 / 7.0)
    assert given.goodput <= r.goodput + 1e-12  # Daly's optimum is at least as good


def test_no_interval_outlasts_the_run() -> None:
    """A 2-step budget was told 'every 467 steps' with Daly's steady-state losses. Capped at the
    run, it saves once, at its end: one segment of Daly's model, goodput = tau / (M e^(R'/M)
    (e^((tau + delta)/M) - 1)), here by hand from the schedule's own figures."""
    job = make_job("llama3.1-405b", num_gpus=1024)
    long = resilience.resilience(job, 7.0, OpsParams())
    assert long.interval_steps > 2
    short = resilience.resilience(job, 7.0, OpsParams(), run_steps=2)
    assert short.interval_steps == 2 and short.interval_s == pytest.approx(14.0)
    assert short.whole_run and not long.whole_run
    m, tau, delta, r = short.mtbf_s, 14.0, short.checkpoint_blocking_s, short.restart_s
    assert short.goodput == pytest.approx(
        tau / (m * math.exp(r / m) * math.expm1((tau + delta) / m))
    )
    # a run longer than the interval keeps Daly's, and a given interval is capped alike
    assert resilience.resilience(job, 7.0, OpsParams(), run_steps=10**6) == long
    given = OpsParams(checkpoint_interval_min=30)
    assert resilience.resilience(job, 7.0, given, run_steps=5).interval_steps == 5
    # explain passes the budget's steps: 2 steps of 128 x 8,192 tokens
    perf = perf_with_step(job, Layout(tp=8, pp=8, dp=16, sequence_parallel=True), 7.0)
    o = ops.operations(job, perf, 2 * 128 * 8192)
    assert o.steps == 2 and o.resilience.interval_steps == 2


def test_short_runs_are_not_written_as_zero() -> None:
    """'0.0 days' and '0.0 MWh' for a 2-step run: the text keeps two significant digits where
    one decimal place would write 0 (2 x 2 s = 4 s = 4.6e-05 days)."""
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    text = "\n".join(summary_lines(ops.operations(job, perf, 2 * 128 * 8192)))
    assert " 0.0 days" not in text and " 0 MWh" not in text and "e-07M" not in text
    assert "(4.6e-05 without failures)" in text  # 4 s of training
    o = ops.operations(job, perf, 2 * 128 * 8192)
    assert o.days is not None and f"{o.days:.2g} days wall-clock" in text  # and the final save


def test_async_checkpoint_blocks_less_and_lags_by_a_write() -> None:
    job = make_job("llama3.1-405b", num_gpus=1024)  # 128 nodes: a 5.68 TB write takes 44 s
    sync = resilience.resilience(job, 7.0, OpsParams())
    asyn = resilience.resilience(job, 7.0, OpsParams(async_checkpoint=True))
    # blocking part: 5.6819e12 / 1024 GPUs / 25 GB/s = 0.221951 s per checkpoint
    assert asyn.checkpoint_blocking_s == pytest.approx(0.221951072, rel=1e-8)
    # the write itself: 5.6819e12 / (128 nodes x 1 GB/s) = 44.390214 s
    assert sync.checkpoint_write_s == pytest.approx(44.3902144, rel=1e-8)
    assert asyn.checkpoint_blocking_s < sync.checkpoint_blocking_s
    assert asyn.interval_s >= asyn.checkpoint_write_s  # a write must finish before the next
    assert asyn.restart_s == pytest.approx(sync.restart_s + sync.checkpoint_write_s)
    assert asyn.lost_checkpoint < sync.lost_checkpoint
    assert asyn.goodput > sync.goodput


def test_async_interval_is_never_rounded_under_the_write() -> None:
    """Frequent failures put Daly's interval near the write (44.39 s); rounded to whole 30 s
    steps it fell to 1 step, under the write, each checkpoint then waiting 14.39 s for the last
    (the fuzzer's case: async below sync). The interval is the first whole step past the write:
    2 steps, 60 s, and the host copy alone blocks (5.6819e12 / 1024 / 25 GB/s = 0.221951 s)."""
    job = make_job("llama3.1-405b", num_gpus=1024)
    p = OpsParams(async_checkpoint=True, failure_rate_per_gpu_day=0.05)
    r = resilience.resilience(job, 30.0, p)
    assert r.interval_steps == 2  # ceil(44.39 / 30)
    assert r.checkpoint_blocking_s == pytest.approx(0.221951072, rel=1e-8)
    sync = resilience.resilience(job, 30.0, replace(p, async_checkpoint=False))
    assert r.goodput > sync.goodput


def test_async_with_too_short_interval_waits_for_the_write() -> None:
    job = make_job("llama3.1-405b", num_gpus=1024)
    p = OpsParams(async_checkpoint=True, checkpoint_interval_min=0.25)  # 15 s < 44 s write
    r = resilience.resilience(job, 5.0, p)
    # the host copy 0.221951 s plus the wait for the previous write: 44.390214 - 15 s
    assert r.checkpoint_blocking_s == pytest.approx(0.221951072 + 44.3902144 - 15.0, rel=1e-8)


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


# ----------------------------------------------------------------------------- objectives, headers


def test_objective_values() -> None:
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    # 2.0 s / 1,048,576 tokens x 1e6 = 1.9073 s per million tokens
    thr = ops.objective_value(job, perf, "throughput")
    assert thr == pytest.approx(2.0 / 1_048_576 * 1e6)
    # goodput by hand, to first order 1 - delta/tau - (tau/2 + R')/M (Daly; the neglected terms
    # are ~1e-5 here): checkpoint 8,030,261,248 x 14 B over 8 nodes x 1 GB/s: delta = 14.053 s;
    # M = 86,400 / (419 / (54 x 16,384) x 64) = 2,850,581 s; Daly's tau = 8941.5 s, 4471 steps
    # of 2 s = 8942 s; R' = 600 s restart + 14.053 s load: 1 - 0.0015716 - 0.0017838 = 0.996645
    good = ops.objective_value(job, perf, "goodput")
    assert good == pytest.approx(thr / 0.996645, rel=1e-5)
    assert good > thr
    usd = ops.objective_value(job, perf, "cost")
    assert usd == pytest.approx(64 * good / 3600 * 3.24)
    priced = ops.objective_value(job, perf, "cost", OpsParams(price_usd_per_gpu_hour=1.0))
    assert priced == pytest.approx(64 * good / 3600)
    # steps of 1e6 s: 1e6 / 1,048,576 x 1e6 = 9.5e5 s a million tokens, x 64 GPUs / 3600 =
    # 1.7e4 GPU-hours (more with goodput), x $1.7e308 is past the largest float (1.8e308)
    slow = perf_with_step(job, LAYOUT_64, 1e6)
    with pytest.raises(AssumptionError, match=r"the cost overflows a float: .* x \$1\.7e\+308"):
        ops.objective_value(job, slow, "cost", OpsParams(price_usd_per_gpu_hour=1.7e308))
    faster = perf_with_step(job, LAYOUT_64, 1.5)
    for objective in ops.OBJECTIVES:
        assert ops.objective_value(job, faster, objective) < ops.objective_value(
            job, perf, objective
        )
    with pytest.raises(AssumptionError, match=r"objective.*'speed'"):
        ops.objective_value(job, perf, "speed")


def test_summary_lines() -> None:
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    lines = summary_lines(ops.operations(job, perf, 15 * 10**12))
    text = "\n".join(lines)
    for word in ("days", "GPU-hours", "MWh", "checkpoint", "goodput", "$"):
        assert word in text
    short = "\n".join(summary_lines(ops.operations(job, perf, None)))
    assert "days" not in short and "goodput" in short


# ----------------------------------------------------------------------------- CLI


def test_explain_tokens_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", str(EXAMPLE), "--tokens", "15T", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    o = data["operations"]
    for key in ("days", "gpu_hours", "cost_usd", "energy_mwh", "checkpoint_interval_min"):
        assert o[key] > 0, key
    assert 0 < o["goodput"] <= 1
    assert o["tokens"] == 15 * 10**12
    assert data["performance"]["step_time_s"] > 0  # the rest of the contract is still there


def test_explain_without_ops_options_has_no_operations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", str(EXAMPLE), "--json"], capsys)
    assert code == 0, err
    assert "operations" not in json.loads(out)


def test_explain_tokens_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        ["explain", str(EXAMPLE), "--tokens", "1T", "--price", "2.5", "--async-checkpoint"], capsys
    )
    assert code == 0, err
    assert "Operations" in out and "goodput" in out and "asynchronous" in out and "$2.5" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tokens", "100"], "--tokens: 100 tokens is less than one"),
        (["--tokens", "lots"], "--tokens"),
        (["--tokens", "1T", "--price", "-1"], "--price"),
        (["--tokens", "1T", "--failure-rate", "0"], "--failure-rate"),
        (["--tokens", "1T", "--storage-gb-per-s", "0"], "--storage-gb-per-s"),
        (["--tokens", "1T", "--pue", "0.5"], "--pue"),
        (["--restart-min", "-3"], "--restart-min"),
    ],
)
def test_explain_bad_ops_input_exits_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["explain", str(EXAMPLE), *args], capsys)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and out == ""


def test_pools_are_priced_and_powered_each_at_its_own_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,024 A100 and 1,024 H100 (examples/pools-llama3.1-70b-h100-a100-plan.toml): each pool's
    GPU-hours at its catalog price and its GPUs at their TDP, its nodes at 8 GPUs' overhead
    (hand arithmetic below; all were the first pool's A100 figures), and a pool's own price."""
    plan = REPO / "examples" / "pools-llama3.1-70b-h100-a100-plan.toml"
    code, out, err = run(["explain", str(plan), "--tokens", "1T", "--json"], capsys)
    assert code == 0, err
    o = json.loads(out)["operations"]
    a100, h100 = catalog.get_gpu("a100-sxm-80gb"), catalog.get_gpu("h100-sxm-80gb")
    assert a100.price_usd_per_gpu_hour is not None and h100.price_usd_per_gpu_hour is not None
    half = o["gpu_hours"] / 2  # both pools run the same wall clock
    cost = half * (a100.price_usd_per_gpu_hour + h100.price_usd_per_gpu_hour)
    assert o["cost_usd"] == pytest.approx(cost, rel=1e-4)
    # (1,024 x 400 W + 1,024 x 700 W + 256 nodes x 8 x NODE_OVERHEAD_W_PER_GPU) x PUE 1.1
    nodes_w = 256 * 8 * ops.NODE_OVERHEAD_W_PER_GPU
    assert o["facility_power_mw"] == pytest.approx((1024 * (400 + 700) + nodes_w) * 1.1 / 1e6)
    dear = plan.read_text().replace(
        'gpu = "h100-sxm-80gb"\n', 'gpu = "h100-sxm-80gb"\nprice_usd_per_gpu_hour = 100.0\n'
    )
    path = tmp_path / "dear.toml"
    path.write_text(dear)
    code, out, err = run(["explain", str(path), "--tokens", "1T", "--json"], capsys)
    assert code == 0, err
    o = json.loads(out)["operations"]
    dear_cost = o["gpu_hours"] / 2 * (100 + a100.price_usd_per_gpu_hour)
    assert o["cost_usd"] == pytest.approx(dear_cost, rel=1e-5)  # six significant digits


@pytest.mark.parametrize(
    ("options", "source"),
    [
        # 0.1 min = 6 s against a 14.1 s step: under half a step, so one step, and said
        (
            ["--checkpoint-interval-min", "0.1"],
            "every 1 step = 14.1 s (given 0.1 min, under a step",
        ),
        (["--checkpoint-interval-min", "60"], "(given; Young"),
        (["--tokens", "15T"], "(Daly optimum; Young"),
    ],
)
def test_interval_says_where_it_comes_from(
    options: list[str], source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["explain", str(EXAMPLE), *options], capsys)
    assert code == 0
    assert source in " ".join(out.split())


def test_asynchronous_interval_held_by_the_write_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Asynchronous save may not start a checkpoint before the last write ended: at 0.01 GB/s
    per node the 8B checkpoint (112 GB, one node) takes 11,242 s to write, far past Daly's
    optimum for a blocking host copy of 112 GB / 8 GPUs over 25 GB/s (0.56 s), ~7 min at an
    MTBF of 6,300 h: the interval is the write, labelled so, not "Daly optimum"."""
    argv = ["explain", str(EXAMPLE), "--async-checkpoint", "--storage-gb-per-s", "0.01"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "the write time, past Daly's optimum" in " ".join(out.split())


def test_checkpoint_counts_the_mtp_layers() -> None:
    """DeepSeek-V3's MTP layer is trained and saved with the model. The released checkpoint
    holds 685B parameters, the 671B main model and a 14B MTP module whose embedding and head
    (2 x 129,280 x 7,168 = 1.85B) Megatron shares with the main model: about 683.1B saved, which
    planner's count (671.03B + 11.61B of MTP layer) meets within the rounding of 685B and 14B."""
    job = make_job("deepseek-v3", num_gpus=1024)
    saved = resilience.checkpoint_bytes(job) / 14
    assert saved == pytest.approx(685e9 - 2 * 129_280 * 7_168, rel=2e-3)
    assert saved > 671.5e9  # the main model alone is 671.03B


def test_operations_size_the_checkpoint_by_the_layouts_zero_stage() -> None:
    """`operations` and the goodput objective pass the layout's ZeRO stage to `resilience`: at
    ZeRO 3 the checkpoint is Megatron-FSDP's fsdp_dtensor, the fp32 main weights and the fp32
    moments with no 16-bit copy (Megatron-LM d98e8a64 megatron_fsdp.py:1403,
    distrib_optimizer.py:1635-1657): 4 + 4 + 4 = 12 bytes a parameter, not the distributed
    optimizer's 2 + 4 + 4 + 4 = 14 (hand arithmetic)."""
    job = make_job("llama3.1-405b", num_gpus=16_384)
    perf = cost.estimate(job, Layout(tp=8, pp=16, dp=128, zero_stage=3))
    zero3 = ops.operations(job, perf, None, zero_stage=3).resilience
    assert zero3.checkpoint_bytes == 405_853_388_800 * 12
    assert ops.operations(job, perf, None).resilience.checkpoint_bytes == 405_853_388_800 * 14
    want = resilience.resilience(job, perf.step_time_s, OpsParams(), zero_stage=3).goodput
    got = ops.objective_value(job, perf, "goodput", zero_stage=3)
    assert got == pytest.approx(perf.step_time_s / job.tokens_per_step * 1e6 / want, rel=1e-12)
