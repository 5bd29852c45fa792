"""The checkpoint interval is the best whole-step interval, and a run's last asynchronous write
is not hidden (planner.ops.resilience, planner.ops.checkpoint_interval).

Oracles: a brute force (every whole-step interval 1..N scored by Daly's complete model written
out here, independently of the module: the interval chosen reaches the best of them), the
monotone relations it implies (more failures or slower storage never raise the best goodput),
and hand arithmetic for the QA repros (8B on one 8-GPU H100 node, 3,599.857 s steps, the
plan's in /tmp/qa8/big8b.toml) and for a run's final save.

Checkpoint 8,030,261,248 x 14 = 112,423,657,472 B, one node; host copy H = B / 8 / 25e9 =
0.562118 s; restart 600 s; M = 86,400 / (rate x 8 GPUs).
"""

from __future__ import annotations

import itertools
import math

import pytest
from jobs import job

from planner.inputs.plan import Job
from planner.ops import resilience
from planner.ops.assumptions import OpsParams
from planner.ops.checkpoint_interval import best_whole_steps

BYTES = 112_423_657_472
COPY = BYTES / 8 / 25e9  # 0.562118 s
STEP = 3599.857  # the QA plan's step


def make_job(num_gpus: int = 8) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", num_gpus, 8192, 128)


def oracle_goodput(
    k: int, step: float, storage: float, rate: float, asyn: bool, run: int | None, n: int = 8
) -> float:
    """Daly's complete model for checkpoints every k steps, from the module docstring: wall per
    work M e^(R/M)(e^((tau + H + C)/M) - e^(lag/M)) / tau, lag = min(C, tau) asynchronous else
    0, R = 600 s + C; a run of T = run x step adds its last write M e^(R/M)(e^(lag/M) - 1) / T,
    and a run that saves once (k = run) is the synchronous segment. One node (n <= 8)."""
    write = BYTES / (storage * 1e9 * math.ceil(n / 8))
    copy = BYTES / n / 25e9
    m = 86_400 / (rate * n)
    r = 600.0 + write
    tau = k * step
    lag = min(write, tau) if asyn and k != run else 0.0
    try:
        wall = m * math.exp(r / m) * (math.expm1((tau + copy + write) / m) - math.expm1(lag / m))
        wall /= tau
        if run is not None and lag:
            wall += m * math.exp(r / m) * math.expm1(lag / m) / (run * step)
    except OverflowError:
        return 0.0
    return 1.0 / wall


def test_sync_interval_is_the_best_whole_step_not_daly_rounded() -> None:
    """QA: sync, 0.1 per GPU-day (M = 108,000 s): 0.805 GB/s gave 0.941472 at 2 steps, 0.809
    GB/s 0.939665 at 1 step (faster storage, less goodput). Daly's estimate, 5,397 s = 1.4993
    steps, rounded to 1. By hand at 0.809 GB/s: C = 138.966 s, delta = 139.528 s, R = 738.966 s;
    tau = 3,599.857 s: 3,599.857 / (108,000 e^(738.966/108,000) (e^(3,739.385/108,000) - 1))
    = 0.939665; tau = 7,199.714 s: 0.941570, the better."""
    slow = resilience.resilience(make_job(), STEP, OpsParams(failure_rate_per_gpu_day=0.1,
                                 storage_gb_per_s_per_node=0.805))  # fmt: skip
    fast = resilience.resilience(make_job(), STEP, OpsParams(failure_rate_per_gpu_day=0.1,
                                 storage_gb_per_s_per_node=0.809))  # fmt: skip
    assert slow.interval_steps == fast.interval_steps == 2
    assert slow.goodput == pytest.approx(0.941472, abs=1e-6)
    assert fast.goodput == pytest.approx(0.941570, abs=1e-6)
    assert fast.goodput > slow.goodput


def test_async_interval_is_the_best_whole_step() -> None:
    """QA: async at 0.03 GB/s (C = 3,747.455 s, just past one 3,599.857 s step): 1.36 per
    GPU-day gave 0.221616 at 2 steps, 1.37 gave 0.273737 at 1 step (more failures, more
    goodput). By hand at 1.36 (M = 7,941.18 s, R = 4,347.455 s): 1 step (lag = tau, waiting
    147.6 s for the write) 0.276276; 2 steps (lag = C) 0.221616. The chosen is 1 step, as the
    interval given as 59.998 min (1 step)."""

    def at(rate: float, given: float | None = None) -> resilience.Resilience:
        p = OpsParams(async_checkpoint=True, storage_gb_per_s_per_node=0.03,
                      failure_rate_per_gpu_day=rate, checkpoint_interval_min=given)  # fmt: skip
        return resilience.resilience(make_job(), STEP, p)

    low, high = at(1.36), at(1.37)
    assert low.interval_steps == high.interval_steps == 1
    assert low.goodput == pytest.approx(0.276276, abs=1e-6)
    assert high.goodput == pytest.approx(0.273737, abs=1e-6)
    assert low.goodput > high.goodput
    assert low == at(1.36, given=59.998)


GRID = [
    (step, storage, rate, asyn, run)
    for step in (600.0, 1800.0, 3599.857)
    for storage in (0.02, 0.03, 0.1, 0.8)
    for rate in (0.1, 0.5, 1.36, 3.0)
    for asyn in (False, True)
    for run in (None, 3, 40)
]


@pytest.mark.parametrize(("step", "storage", "rate", "asyn", "run"), GRID)
def test_chosen_interval_is_the_brute_force_best(
    step: float, storage: float, rate: float, asyn: bool, run: int | None
) -> None:
    """Every whole-step interval from 1 to past the time between interruptions and the write
    (the optimum lies below both: the module docstring), or to the run, scored by the oracle:
    the module's goodput is the best of them (to 1e-12), and the model's own at its interval."""
    p = OpsParams(storage_gb_per_s_per_node=storage, failure_rate_per_gpu_day=rate,
                  async_checkpoint=asyn)  # fmt: skip
    write = BYTES / (storage * 1e9)
    top = run or math.ceil(max(86_400 / (rate * 8), write) / step) + 2
    try:
        r = resilience.resilience(make_job(), step, p, run_steps=run)
    except resilience.NoProgress:
        assert max(oracle_goodput(k, step, storage, rate, asyn, run) for k in
                   range(1, top + 1)) < resilience.MIN_GOODPUT  # fmt: skip
        return
    best = max(oracle_goodput(k, step, storage, rate, asyn, run) for k in range(1, top + 1))
    assert r.goodput == pytest.approx(best, rel=1e-12)
    own = oracle_goodput(r.interval_steps, step, storage, rate, asyn, run)
    assert r.goodput == pytest.approx(own, rel=1e-12)


@pytest.mark.parametrize("asyn", [False, True])
@pytest.mark.parametrize("run", [None, 5, 200])
def test_best_goodput_falls_with_failures_and_slower_storage(asyn: bool, run: int | None) -> None:
    """Metamorphic: at each interval Daly's wall time grows with the failure rate and with the
    write time, so the best of them can only fall (to float rounding, 1e-12) as failures rise
    or storage slows; fine grids across the 1/2-step flips of the QA repros."""

    def goodput(rate: float, storage: float) -> float:
        p = OpsParams(storage_gb_per_s_per_node=storage, failure_rate_per_gpu_day=rate,
                      async_checkpoint=asyn)  # fmt: skip
        return resilience.resilience(make_job(), STEP, p, run_steps=run).goodput

    for storage in (0.03, 0.1, 0.807):
        gs = [goodput(0.05 + 0.02 * i, storage) for i in range(80)]
        assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(gs))
    for rate in (0.1, 1.36):
        gs = [goodput(rate, 1.0 - 0.0122 * i) for i in range(80)]  # 1.0 down to 0.036 GB/s
        assert all(b <= a * (1 + 1e-12) for a, b in itertools.pairwise(gs))


def test_a_single_save_run_waits_for_its_write() -> None:
    """QA: a 191-step run of 14.1 s steps at 0.01 GB/s (C = 11,242.4 s, past the run's 2,693 s)
    gave sync 19.3% and async 23.9% (a wait for a 'previous write' the run never made); with the
    write under the run (1 GB/s, C = 112.4 s) async charged no write at all. The run is done when
    its one checkpoint is durable: wall = tau + H + C either way, so async = sync. By hand at the
    least failure rate (failures ~1e-12 of the wall): 2,693.2 / (2,693.2 + 0.562 + 11,242.4) =
    0.19324; at 1 GB/s 2,693.2 / (2,693.2 + 0.562 + 112.42) = 0.95973."""
    step, steps = 14.1, 191
    tau = step * steps
    for storage in (0.01, 1.0):
        base = dict(storage_gb_per_s_per_node=storage, failure_rate_per_gpu_day=1e-12)
        sync = resilience.resilience(make_job(), step, OpsParams(**base), run_steps=steps)
        asyn = resilience.resilience(
            make_job(), step, OpsParams(**base, async_checkpoint=True), run_steps=steps
        )
        write = BYTES / (storage * 1e9)
        assert asyn.whole_run and asyn.interval_steps == steps
        assert asyn.goodput == pytest.approx(tau / (tau + COPY + write), rel=1e-9)
        assert asyn.goodput == sync.goodput
        assert asyn.checkpoint_blocking_s == pytest.approx(COPY + write)
        assert asyn.lost_checkpoint == pytest.approx((COPY + write) / (tau + COPY + write))


def test_a_longer_async_run_waits_for_its_last_write() -> None:
    """10 s steps, a save every 10 steps (100 s) over 100 steps, 1 GB/s (C = 112.424 s), the
    least failure rate. By hand, 10 saves: each blocks H = 0.562 s, saves 2-10 wait C - tau =
    12.424 s for the write before, and the run ends when the last write is durable, C later:
    10 x (100 + 0.562) + 9 x 12.424 + 112.424 = 1,229.86 s; goodput 1,000 / 1,229.86 = 0.81310.
    The steady state (no final write: the rate `objective_value` ranks by) is 10 x 112.986 s
    per 1,000 s: 0.88507."""
    p = OpsParams(storage_gb_per_s_per_node=1.0, failure_rate_per_gpu_day=1e-12,
                  async_checkpoint=True, checkpoint_interval_min=100 / 60)  # fmt: skip
    write = BYTES / 1e9
    wall = 10 * (100 + COPY) + 9 * (write - 100) + write
    run = resilience.resilience(make_job(), 10.0, p, run_steps=100)
    assert run.interval_steps == 10 and not run.whole_run
    assert run.goodput == pytest.approx(1000 / wall, rel=1e-9)
    assert run.lost_checkpoint == pytest.approx((wall - 1000) / wall, rel=1e-9)
    steady = resilience.resilience(make_job(), 10.0, p)
    assert steady.goodput == pytest.approx(100 / (COPY + write), rel=1e-9)


def test_best_whole_steps_against_brute_force() -> None:
    """The ternary search over a unimodal cost returns the brute-force least, on parabolas
    with their least at each place in and past [lo, hi], flat runs (ties) included, and with a
    tail of inf (the wall time past the largest float: the old QA case of --failure-rate 5 on
    512 GPUs, whose ties of inf dropped every finite interval)."""
    for lo, hi in ((1, 1), (1, 2), (3, 40), (1, 1000)):
        for centre in range(lo - 3, hi + 4):
            for flat in (0, 2):

                def cost(k: int, c: int = centre, f: int = flat) -> float:
                    return float(max(0, abs(k - c) - f) ** 2)

                best = min(cost(k) for k in range(lo, hi + 1))
                assert cost(best_whole_steps(cost, lo, hi)) == best

                def capped(k: int, c: int = centre, f: int = flat, e: int = lo) -> float:
                    # e^(x) past the largest float from 5 past the least on: inf, as resilience's
                    return math.inf if k > max(c, e) + 5 else cost(k, c, f)

                best = min(capped(k) for k in range(lo, hi + 1))
                assert capped(best_whole_steps(capped, lo, hi)) == best
