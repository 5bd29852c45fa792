"""Checkpoints, failures and goodput: how much of the wall clock a job spends training.

Checkpoint. Size = (params_total + mtp_params) x `checkpoint_bytes_per_param`
(`planner.model.checkpoint_size`; the MTP layers are saved too): under Megatron-LM bf16 weights
(2) + fp32 master weights (4) + Adam m and v (4 + 4, or 2 + 2 with `optimizer_state_dtype =
"bf16"`): 14 or 10; with Transformer Engine's FusedAdam holding the master (the precision-aware
optimizer) 2 + the int16 remainder 2 + fp32 m and v 8: 12; under Megatron-FSDP (ZeRO 2 / 3) the
fp32 main weights and the moments, 12; under torchtitan the fp32 parameters FSDP2 shards (4) + m
and v (4 + 4): 12. Gradients are not saved (the next step rebuilds them). Muon's one momentum
buffer is counted as Adam's two (the Adam that trains its embeddings and norms keeps both): the
safe side, a checkpoint no smaller than it is. Megatron
Core's distributed checkpoint (`--ckpt-format torch_dist`, fully parallel save) shards the state
so that every GPU writes a distinct 1/N of it; the job writes at nodes x storage bandwidth per
node, so
    C = size / (nodes x storage_bytes_per_s_per_node)
and reading it back at restart takes the same time. Every save first copies each GPU's shard
(size / N) to host memory at HOST_COPY_GB_PER_S, taking H = size / (N x host copy rate), and then
writes it (`assumptions.HOST_COPY_GB_PER_S` gives the sources). A synchronous save blocks
training for both, one after the other: delta = H + C. Asynchronous save (`--async-save`) blocks
only for the copy H; the write to storage then overlaps training, must finish before the next
checkpoint starts, and makes the newest durable checkpoint older by the write time C. Both are
durable H + C after the save starts, so at the same interval asynchronous save is never the
slower (tests/ops/test_async_checkpoint.py).

Failures. Interruptions of the whole job arrive as a Poisson process with rate
lambda = failure_rate_per_gpu_day x N / 86400 per second; MTBF M = 1 / lambda. One interruption
costs the restart time R (reschedule, re-initialise, NCCL set-up: RESTART_MIN) plus the checkpoint
load C, plus the work since the last durable checkpoint. With tau the compute time between
checkpoints and delta the time a checkpoint blocks training:

    Young (1974):  tau = sqrt(2 delta M)
    Daly (2006):   tau = sqrt(2 delta M) (1 + sqrt(delta / 2M) / 3 + delta / (9 x 2M)) - delta
                   for delta < 2M, else tau = M

("A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22 (2006) 303-312, the perturbation solution) estimate the optimum
of T_wall below for a continuous tau. The interval is the whole number of steps (>= 1 and, for a
run of a known length, a token budget, at most the run's steps) of least T_wall, found exactly
(`checkpoint_interval.best_whole_steps` over each span where T_wall is unimodal in tau; Daly's
rounded to the nearest step was not always it, and goodput then rose with the failure rate or
with slower storage). A run shorter than the interval checkpoints once, at its end, and a
failure re-does it from the start.

Asynchronous checkpoints block for the copy H alone, and a save that starts before the previous
write finished waits for it: delta = H + max(0, C - tau). A checkpoint is durable once written;
the training done meanwhile, min(C, tau), is lost with it at an interruption and counts to the
restart (R' below). From one snapshot to the next durable point is then
tau + delta + min(C, tau) = tau + H + C, the synchronous segment, and at any one tau
    e^(min(C, tau)/M) (e^((tau + delta)/M) - 1) <= e^((tau + H + C)/M) - 1:
asynchronous save never trains less of the wall clock than synchronous save. T_wall is unimodal
in tau over intervals no longer than the write (least near min(M, C)) and over those no shorter
(least near max(C, Daly's for delta = H)): the interval is the better of the two spans' bests.

The run's end. A run is done when its last checkpoint is durable (Megatron-LM saves at the end
of training and its exit waits for an asynchronous write: d98e8a64 megatron/training/
training.py:2056, :2130). A synchronous run counts that in its last segment; an asynchronous
run's last write has no training after it to hide under, so its last segment is a synchronous
one: a run of T_s in segments of tau adds M e^(R/M) (e^(min(C, tau)/M) - 1) (min(C, tau) without
failures) to the steady-state T_wall below, and a run that saves once, at its end, is exactly
the synchronous save's: tau + H + C without failures (blocking H + C, restart R).

Goodput (the fraction of wall-clock time that trains) is Daly's complete cost model for
solve time T_s:
    T_wall = M e^(R'/M) (e^((tau + delta)/M) - 1) T_s / tau,     goodput = T_s / T_wall
with R' = R + C (load) (+ min(C, tau) with asynchronous save: the durable checkpoint lags). To
first order it is 1 - delta/tau - (tau/2 + R')/M: the checkpoint share delta/tau plus the rework
tau/2 and restart R' per failure times failures per second. Split exactly, per
segment of L = tau + delta (the same model: e^(L/M) - 1 failed attempts, each losing the work
it did, E[t | t < L], then a restart phase of M (e^(R'/M) - 1) that failures may restart too):
    wall = L + (M (e^(L/M) - 1) - L) + M (e^(L/M) - 1)(e^(R'/M) - 1)
(the segment, the re-done work, the restarts; they sum to Daly's M e^(R'/M)(e^(L/M) - 1)):
of the wall clock tau / wall trains (the goodput), delta / wall checkpoints, and the two failure
terms over wall re-do work and restart (a run's last write: min(C, tau) checkpoints, its
failures split alike). Effective tokens/s = tokens/s x goodput; without a run's length
(`objective_value`) the steady state alone.

Defaults (the failure rate, restart time, storage and host-copy rates) and their sources:
planner/ops/assumptions.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from planner.inputs import units
from planner.inputs.plan import Job
from planner.inputs.units import GB, SECONDS_PER_DAY
from planner.model import params as params_mod
from planner.model.checkpoint_size import checkpoint_bytes_per_param
from planner.ops.assumptions import AssumptionError, OpsParams, for_job
from planner.ops.checkpoint_interval import (
    best_whole_steps,
    daly_interval,
    daly_wall_time,
    final_write_s,
    least_wall_time,
    young_interval,
)


@dataclass(frozen=True)
class Resilience:
    """Checkpointing and failures for one job and step time (no token budget needed)."""

    checkpoint_bytes: float
    """Size of one checkpoint (weights + fp32 master + Adam m, v)."""
    checkpoint_write_s: float
    """Time to write it to storage, all nodes in parallel (and to read it back)."""
    checkpoint_blocking_s: float
    """Time a checkpoint stops training: the host copy and the write, or with async save the host
    copy alone (plus any wait for the previous write; the one save of a whole run, at its end,
    waits for its write too)."""
    mtbf_s: float
    """Mean time between job interruptions."""
    restart_s: float
    """Time lost per interruption before re-doing work: restart + load (+ with async save the
    training done while the newest checkpoint was written)."""
    interval_s: float
    """Training time between checkpoints (whole steps)."""
    interval_steps: int
    young_interval_s: float
    daly_interval_s: float
    goodput: float
    """Fraction of wall-clock time that trains."""
    lost_checkpoint: float
    """Fraction of wall-clock time spent blocked on checkpoints."""
    lost_failures: float
    """Fraction lost to failures: restarts and re-done work."""
    lost_restart: float
    """Of lost_failures, the restarts themselves (the module docstring's split; ~ R'/M)."""
    async_checkpoint: bool
    whole_run: bool = False
    """The interval is the whole run (a token budget shorter than the optimum): one save, at its
    end."""

    @property
    def lost_rework(self) -> float:
        return max(0.0, self.lost_failures - self.lost_restart)


class NoProgress(AssumptionError):
    """Settings under which the job makes no progress at its size (goodput below MIN_GOODPUT).
    `field` is the setting that decides it (as `AssumptionError.field`); `involved` every setting
    behind it, the deciding one first and the failure rate always among them, so that a command
    line can say which of them the user gave and which are defaults (`params`)."""

    def __init__(
        self,
        field: str,
        problem: str,
        involved: tuple[str, ...],
        params: OpsParams,
        goodput: float,
    ) -> None:
        super().__init__(field, problem)
        self.involved = involved
        self.params = params
        self.goodput = goodput


def _no_progress(
    job: Job,
    ops: OpsParams,
    times: tuple[float, float, float, float, float, float],
    goodput: float,
    step_time_s: float,
) -> NoProgress:
    """The error for settings under which the job makes no progress: a step (the least
    checkpoint interval) longer than the mean time between interruptions (the plan's sizes, not
    an operations setting: `step_time`, with the failure rate); else under the setting whose term
    of Daly's exponents is the larger: the restart and reload R / M (the restart, or the
    storage that reloads), or the checkpoint interval and its blocking time (tau + delta) / M
    (the interval where given, the storage or the host copy, whichever blocks longer, where
    the checkpoint blocks longer than the interval, else the failure rate alone). Every setting
    named is with the failure rate, whose interruptions the times are measured against."""
    m, restart, tau, delta, write, copy = times
    rate = "failure_rate_per_gpu_day"
    if tau >= m and tau == step_time_s:  # one step outlasts the time between interruptions
        return NoProgress(
            "step_time",
            f"one step takes {_duration(step_time_s)}, longer than the {_duration(m)} between "
            f"interruptions on average ({ops.failure_rate_per_gpu_day:g} per GPU-day x "
            f"{job.cluster.num_gpus:,} GPUs): the job would make no progress (goodput "
            f"{goodput:.1e})",
            (rate,),
            ops,
            goodput,
        )
    if restart >= tau + delta:
        field = "restart_min" if ops.restart_min * 60.0 >= write else "storage_gb_per_s_per_node"
    elif ops.checkpoint_interval_min is not None and tau >= delta:
        field = "checkpoint_interval_min"
    elif delta > tau:
        # the blocking: the host copy, then the write (synchronous) or any wait for the
        # previous write (asynchronous)
        storage = max(0.0, write - tau) if ops.async_checkpoint else write
        field = "storage_gb_per_s_per_node" if storage >= copy else "host_copy_gb_per_s"
    else:
        field = rate
    return NoProgress(
        field,
        f"the job would make no progress (goodput {goodput:.1e}): an interruption every "
        f"{_duration(m)} on average ({ops.failure_rate_per_gpu_day:g} per GPU-day x "
        f"{job.cluster.num_gpus:,} GPUs), each costing {_duration(restart)} to restart and "
        f"reload the checkpoint, and checkpoints blocking {_duration(delta)} every "
        f"{_duration(tau)} of training",
        (field,) if field == rate else (field, rate),
        ops,
        goodput,
    )


def _too_many_steps(
    ops: OpsParams, steps: int, step_time_s: float, m: float, write: float
) -> AssumptionError:
    """A checkpoint interval of 2^53 steps or more (no JSON reader holds the count exactly):
    under --checkpoint-interval-min where given, else under the failure rate whose time between
    interruptions the interval grows with. Only steps far shorter than any plan's take it past
    the bounds on both (`assumptions`)."""
    given = ops.checkpoint_interval_min
    field = "checkpoint_interval_min" if given is not None else "failure_rate_per_gpu_day"
    why = (
        f"{given:g} minutes given"
        if given is not None
        else f"planned for an interruption every {_duration(m)} "
        f"({ops.failure_rate_per_gpu_day:g} per GPU-day) and a write of {_duration(write)}"
    )
    return AssumptionError(
        field,
        f"the checkpoint interval, {steps:.3g} steps of {step_time_s:.3g} s ({why}), is past "
        "2^53 steps, the largest whole number JSON holds exactly",
    )


def _duration(seconds: float) -> str:
    """`units.format_duration`, or seconds past a thousand days."""
    return units.format_duration(seconds) if seconds < 1e8 else f"{seconds:.2e} s"


def num_nodes(job: Job) -> int:
    """The job's nodes: each pool's own, with pools."""
    clusters = [p.cluster for p in job.pools] or [job.cluster]
    return sum(-(-c.num_gpus // c.gpus_per_node) for c in clusters)


def checkpoint_bytes(job: Job, zero_stage: int = 0) -> float:
    """(params_total + mtp_params) x `checkpoint_bytes_per_param` under the layout's ZeRO stage
    (weights, master weights, Adam m and v): the MTP layers are trained and saved with the rest
    (DeepSeek-V3's published checkpoint is 671B + 14B of MTP module, of which 11.6B are the
    layers planner counts)."""
    params = params_mod.params_total(job.arch) + params_mod.mtp_params(job.arch)
    return float(params * checkpoint_bytes_per_param(job, zero_stage))


def checkpoint_write_s(job: Job, ops: OpsParams, zero_stage: int = 0) -> float:
    """Size / (nodes x per-node storage bandwidth): every GPU writes its own 1/N shard."""
    bandwidth = num_nodes(job) * ops.storage_gb_per_s_per_node * GB
    return checkpoint_bytes(job, zero_stage) / bandwidth


def host_copy_s(job: Job, ops: OpsParams, zero_stage: int = 0) -> float:
    """Size / N / host copy rate: each GPU copies its own shard to host memory."""
    size = checkpoint_bytes(job, zero_stage)
    return size / job.cluster.num_gpus / (ops.host_copy_gb_per_s * GB)


def mtbf_s(job: Job, ops: OpsParams) -> float:
    """Mean time between job interruptions: 86400 / (rate per GPU-day x N) seconds."""
    return SECONDS_PER_DAY / (ops.failure_rate_per_gpu_day * job.cluster.num_gpus)


def least_wall_per_work(job: Job, ops: OpsParams | None = None) -> float:
    """A lower bound on 1 / goodput of the job at any step time, interval, run length and ZeRO
    stage (`checkpoint_interval.least_wall_time`, at the least checkpoint of any stage): each
    segment blocks at least the copy H (asynchronous) or H + C, and a restart costs R + C."""
    ops = for_job(job, ops)
    least = min(range(4), key=lambda z: checkpoint_bytes(job, z))
    copy, write = host_copy_s(job, ops, least), checkpoint_write_s(job, ops, least)
    delta = copy if ops.async_checkpoint else copy + write
    return least_wall_time(delta, mtbf_s(job, ops), ops.restart_min * 60.0 + write)


MIN_GOODPUT = 1e-9
"""Below this share of the wall clock training (a billionth) the job makes no progress that any
figure could show: the settings are refused (`resilience`)."""


def resilience(
    job: Job,
    step_time_s: float,
    ops: OpsParams,
    run_steps: int | None = None,
    zero_stage: int = 0,
) -> Resilience:
    """Checkpoint cost, optimal interval (the whole steps of least wall time by Daly's complete
    model, at most `run_steps`, the run's length where a token budget gives it, whose last
    write is then not hidden), goodput and its losses.
    Settings under which the job makes no progress (goodput below MIN_GOODPUT: interruptions
    far more often than the restart or the checkpoints take) are an AssumptionError naming the
    one that decides it and every figure behind it. `zero_stage`, the layout's (the checkpoint's
    size depends on it: `checkpoint_size`); 0, the distributed optimizer's, where not given.
    Saves are asynchronous where the job's launch saves so or `ops` asks (`for_job`)."""
    ops = for_job(job, ops)
    size = checkpoint_bytes(job, zero_stage)
    write = checkpoint_write_s(job, ops, zero_stage)
    m = mtbf_s(job, ops)
    if not m > 0:  # at least MIN_FAILURE_RATE_PER_GPU_DAY, m is finite
        rate = f"{ops.failure_rate_per_gpu_day:g} per GPU-day on {job.cluster.num_gpus:,} GPUs"
        raise AssumptionError(
            "failure_rate_per_gpu_day",
            f"{rate} leaves no time between interruptions (MTBF {m:g} s)",
        )
    reload = ops.restart_min * 60.0 + write  # restart, then read the checkpoint back
    copy = host_copy_s(job, ops, zero_stage)
    # the blocking: the copy to host memory, then (synchronous) the write: the module docstring
    delta0 = copy if ops.async_checkpoint else copy + write
    young = young_interval(delta0, m)
    daly = daly_interval(delta0, m)

    run_s = None if run_steps is None else run_steps * step_time_s

    def schedule(steps: int) -> tuple[float, float, float, float, float]:
        """(tau, delta, R', the run's last write past a steady segment, wall time per unit of
        work) checkpointing every `steps` steps: the module docstring."""
        tau = steps * step_time_s
        if steps == run_steps or not ops.async_checkpoint:  # one save, or synchronous saves
            lag, last, delta = 0.0, 0.0, copy + write
        else:  # training under the write; the next save waits for what outlasts it
            lag = min(write, tau)
            last = 0.0 if run_s is None else lag
            delta = copy + max(0.0, write - tau)
        try:
            # from one snapshot to the next durable point: the copy and the write past tau
            wall = daly_wall_time(1.0, tau, copy + write, m, reload, lag)
            if last:  # the last save's write, with no training after it to hide under
                wall += final_write_s(m, reload, last) / (run_s or 1.0)
        except OverflowError:  # e^(x) past the largest float: no progress
            wall = math.inf
        return tau, delta, reload + lag, last, wall

    def cost(steps: int) -> float:
        return schedule(steps)[4]

    top = run_steps if run_steps is not None else math.ceil(max(m, write) / step_time_s) + 1
    if ops.checkpoint_interval_min is not None:  # at most MAX_CHECKPOINT_INTERVAL_MIN
        steps = max(1, round(ops.checkpoint_interval_min * 60.0 / step_time_s))
        steps = steps if run_steps is None else min(steps, run_steps)  # it saves at its end
    elif ops.async_checkpoint:
        # the best whole step of each span where the cost is unimodal: intervals no longer
        # than the write (least near min(M, write)), and no shorter (near max(write, Daly's))
        under, over = math.floor(write / step_time_s), max(1, math.ceil(write / step_time_s))
        spans = [(1, min(under, top)), (over, top)]
        bests = [best_whole_steps(cost, lo, hi) for lo, hi in spans if lo <= hi]
        steps = min(bests, key=cost)
    else:
        steps = best_whole_steps(cost, 1, top)
    tau, delta, restart, last, wall_per_work = schedule(steps)
    goodput = 1.0 / wall_per_work
    if not goodput >= MIN_GOODPUT:
        raise _no_progress(job, ops, (m, restart, tau, delta, write, copy), goodput, step_time_s)
    if steps >= units.JSON_EXACT_INT:
        raise _too_many_steps(ops, steps, step_time_s, m, write)
    last_share = 0.0 if run_s is None else last / run_s  # the last write per unit of work
    lost_ckpt = goodput * (delta / tau + last_share)
    lost_fail = max(0.0, 1.0 - goodput - lost_ckpt)
    # per segment: restarts M (e^(L/M) - 1)(e^(R'/M) - 1) of the wall, tau / goodput; the last
    # write's M (e^(lag/M) - 1)(e^(R/M) - 1) once a run
    restarts = goodput * (
        m * math.expm1((tau + delta) / m) * math.expm1(restart / m) / tau
        + (m * math.expm1(last / m) * math.expm1(reload / m) / run_s if run_s else 0.0)
    )
    return Resilience(
        checkpoint_bytes=size,
        checkpoint_write_s=write,
        checkpoint_blocking_s=delta,
        mtbf_s=m,
        restart_s=restart,
        interval_s=tau,
        interval_steps=steps,
        young_interval_s=young,
        daly_interval_s=daly,
        goodput=goodput,
        lost_checkpoint=lost_ckpt,
        lost_failures=lost_fail,
        lost_restart=min(lost_fail, restarts),
        async_checkpoint=ops.async_checkpoint,
        whole_run=steps == run_steps,
    )
