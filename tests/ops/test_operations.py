"""Tests for planner.ops resilience: Young's and Daly's checkpoint intervals, checkpoint size and
write time, failures, goodput and asynchronous checkpoints.

Oracles: the closed forms of Young (1974) and Daly (2006) and the optimum intervals Daly's paper
reports for its own examples; a brute-force minimisation of Daly's complete wall-time model; hand
arithmetic in comments for checkpoint time; Meta's Llama 3 report (419 unexpected interruptions
in 54 days on 16,384 GPUs, > 90 % effective training time).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from operations_jobs import LAYOUT_64, make_job, perf_with_step

from planner.emit.prediction import summary_lines
from planner.inputs.layout import Layout
from planner.model import cost
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import FAILURE_RATE_PER_GPU_DAY, OpsParams

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
