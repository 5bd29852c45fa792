"""Measured runs from Megatron-LM logs: each run's plan (from its printed arguments, or the plan
file given), its median step time and its peak allocated memory per pipeline stage.

Step time: the iteration lines at the run's global batch (a batch ramp's smaller steps are
left out), less the warm-up: the first logged line always (it times iteration 1 alone, with
start-up and compilation), and the next one too when three or more remain (Megatron does not
reset the interval timer after the first line, so the second interval still carries part of
it). The median of the rest is the step time: robust to a checkpoint save or a straggler in
one interval.

Memory: `report_memory` lines come from data-parallel rank 0 of every model-parallel group;
a rank's pipeline stage follows from Megatron's rank order (megatron/training/initialize.py
d98e8a64): tp-cp-ep-dp-pp by default, the stage rank // (world size / pp); tp-cp-ep-pp-dp
under a printed `use_tp_pp_dp_mapping True`, the stage (rank // (tp x cp)) mod pp. Per stage,
the largest `max allocated` of any of its lines is what `torch.cuda.max_memory_allocated()`
reached there.

A log that cannot be from the GPU given is refused, naming its line: a device name that other
programs printed (`nvidia-smi`, `torch.cuda.get_device_name`) of another GPU family, a logged
throughput above the GPU's dense peak at the run's precision, or memory reserved or allocated
beyond its capacity. (The log reader bounds every figure first: `megatron_log.MAX_ELAPSED_MS`,
`MAX_MEMORY_MIB`.)
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from planner.inputs import catalog, megatron_log, megatron_log_args
from planner.inputs.errors import InputError
from planner.inputs.files import read_log
from planner.inputs.hardware import GpuSpec
from planner.inputs.plan import Plan, load_plan, parse_plan
from planner.inputs.units import GIB
from planner.search.rules import check_plan

MIB = 2**20
WARMUP_LINES = 2
"""Logged iteration lines left out at the start of a run (see the module docstring)."""

MIN_LINES = 2
"""The fewest iteration lines a run is measured on: the first times start-up alone."""

FULL_LINES = 3
"""Iteration lines left after both warm-up lines that make a step time without start-up in it
(fewer, and only the first is left out: a note says so)."""


@dataclass(frozen=True)
class StagePeak:
    """The largest `max allocated` a memory report gave for one pipeline stage."""

    stage: int
    rank: int
    line: int
    max_allocated_bytes: float


@dataclass(frozen=True)
class MeasuredRun:
    """One run of a log: its plan and what the log measured."""

    where: str
    """`file:line` of the run's arguments block (or of its first iteration line)."""
    plan: Plan
    step_time_s: float
    iterations_used: int
    memory: tuple[StagePeak, ...] = ()

    @property
    def tokens_per_s_per_gpu(self) -> float:
        job = self.plan.job
        return job.global_batch_size * job.seq_length / self.step_time_s / job.cluster.num_gpus

    def peak(self) -> StagePeak | None:
        """The stage with the largest measured peak."""
        return max(self.memory, key=lambda p: p.max_allocated_bytes) if self.memory else None


def family(gpu: GpuSpec) -> str:
    """The device family a GPU's name prints with: 'H100', 'A100', 'GB200', 'MI300X'."""
    words = gpu.display_name.split()
    return words[2] if words[0] == "AMD" else words[1].split("-")[0]


def gpu_of(log: megatron_log.MegatronLog, gpu: str | None) -> GpuSpec:
    """The catalog GPU given (checked against the device names the log prints), or the one its
    device names identify."""
    printed = {fam for _, fam in log.devices}
    if gpu is not None:
        spec = catalog.get_gpu(gpu)
        for line, fam in log.devices:
            if fam != family(spec):
                raise InputError(
                    f"{log.path}:{line}: this log ran on {fam} GPUs, not {gpu} (--gpu): "
                    "calibrate each GPU kind with its own logs"
                )
        return spec
    matches = [g for g in catalog.gpus().values() if family(g) in printed]
    if len(printed) == 1 and len(matches) == 1:
        return matches[0]
    seen = f"it names {', '.join(sorted(printed))}" if printed else "it names no GPU"
    raise InputError(f"{log.path}: --gpu: required ({seen}; give a catalog name)")


def _plan(
    run: megatron_log.LogRun,
    gpu: GpuSpec,
    num_gpus: int | None,
    plan_path: Path | None,
    vocab_size: int | None,
) -> Plan:
    if run.args_line is None:
        if plan_path is None:
            first = run.iterations[0].line if run.iterations else None
            raise InputError(
                f"{run.where(first)}: no arguments block before this run (Megatron prints it "
                "at start-up on rank 0): `calibrate` takes the run's plan with --plan; "
                "`explain` and `check --megatron-log` need the block"
            )
        plan = check_plan(load_plan(plan_path))
        if plan.job.cluster.gpu.name != gpu.name:
            raise InputError(
                f"{plan_path}: cluster.gpu: {plan.job.cluster.gpu.name!r}, but the log is "
                f"calibrated as {gpu.name} (--gpu)"
            )
        return plan
    printed = megatron_log_args.world_size(run)
    if num_gpus is not None and printed is not None and printed != num_gpus:
        line = run.arg_lines.get("world_size")
        raise InputError(f"{run.where(line)}: world_size: {printed}, but --num-gpus is {num_gpus}")
    count = num_gpus if num_gpus is not None else printed
    if count is None:
        raise InputError(f"{run.where(run.args_line)}: no world_size printed: give --num-gpus")
    reading = megatron_log_args.reading(run, gpu.name, count, vocab_size)
    return check_plan(parse_plan(reading.doc, Path(run.where(run.args_line))))


def _step_time(run: megatron_log.LogRun, plan: Plan) -> tuple[float, int, bool]:
    """(median step time, lines it is measured on, whether both warm-up lines were left out)."""
    job = plan.job
    lines = [
        it
        for it in run.iterations
        if it.global_batch is None or it.global_batch == job.global_batch_size
    ]
    if len(lines) < 2:
        where = run.where(run.args_line or (run.iterations[0].line if run.iterations else None))
        raise InputError(
            f"{where}: {len(lines)} iteration line(s) at global batch {job.global_batch_size}: "
            "need two or more (the first only times start-up; a truncated log?)"
        )
    skip = WARMUP_LINES if len(lines) - WARMUP_LINES >= FULL_LINES else 1
    gpu = job.cluster.gpu
    peak = gpu.peak_flops(job.precision) / 1e12
    for it in lines:
        if it.tflops_per_gpu is not None and it.tflops_per_gpu > peak:
            raise InputError(
                f"{run.where(it.line)}: throughput per GPU {it.tflops_per_gpu:.1f} TFLOP/s is "
                f"above the {gpu.name}'s dense {job.precision} peak ({peak:.0f}): this log is "
                "not from that GPU (--gpu)"
            )
    used = lines[skip:]
    return statistics.median(it.elapsed_ms for it in used) / 1000, len(used), skip == WARMUP_LINES


def _memory(run: megatron_log.LogRun, plan: Plan) -> tuple[StagePeak, ...]:
    job, layout = plan.job, plan.require_layout()
    per_stage = job.cluster.num_gpus // layout.pp
    tp_pp_dp = run.args.get("use_tp_pp_dp_mapping") == "True"
    capacity = job.cluster.gpu.memory_gib * GIB
    best: dict[int, StagePeak] = {}
    for rep in run.memory:
        for name, mib in (("reserved", rep.max_reserved_mib), ("allocated", rep.max_allocated_mib)):
            if mib * MIB > capacity * 1.01:
                raise InputError(
                    f"{run.where(rep.line)}: max {name} {mib:.0f} MB is more than a "
                    f"{job.cluster.gpu.name} holds ({capacity / MIB:.0f}): this log is not from "
                    "that GPU (--gpu)"
                )
        stage = rep.rank // per_stage
        if tp_pp_dp and rep.rank < job.cluster.num_gpus:
            stage = rep.rank // (layout.tp * layout.cp) % layout.pp
        if stage >= layout.pp:
            raise InputError(
                f"{run.where(rep.line)}: rank {rep.rank} is outside the run's "
                f"{job.cluster.num_gpus} GPUs"
            )
        peak = StagePeak(stage, rep.rank, rep.line, rep.max_allocated_mib * MIB)
        if stage not in best or peak.max_allocated_bytes > best[stage].max_allocated_bytes:
            best[stage] = peak
    return tuple(best[s] for s in sorted(best))


def read_runs(
    paths: Sequence[Path],
    gpu: str | None,
    num_gpus: int | None = None,
    plan_path: Path | None = None,
    vocab_size: int | None = None,
    notes: list[str] | None = None,
) -> list[MeasuredRun]:
    """Every run of every log, with its plan and measurements (InputError names the file and
    line of what cannot be used). A run that logged no iteration (an attempt that died before
    its first log interval, then restarted in the same file) is left out and said in `notes`,
    unless no run of the file logged one: then the log is truncated, an error. A run logged
    twice (a log given twice, or copied into another) counts once, said in `notes`: a copy
    would weigh its run double and, left out, keep its twin in (the left-out errors would say
    nothing). A --plan `plan_path` that no run reads (each printed its arguments block) is
    refused, as `check` refuses options it would ignore."""
    out = []
    seen: dict[tuple[object, ...], str] = {}
    plan_read = False
    for path in paths:
        log = megatron_log.parse(read_log(path), path)
        if notes is not None:
            notes.extend(log.notes)
        spec = gpu_of(log, gpu)
        measurable = [r for r in log.runs if len(r.iterations) >= MIN_LINES]
        for run in log.runs:
            key = (
                tuple(sorted(run.args.items())),
                tuple((it.iteration, it.elapsed_ms) for it in run.iterations),
                tuple((m.rank, m.after, m.max_allocated_mib) for m in run.memory),
            )
            if run.iterations and key in seen:
                if notes is not None:
                    notes.append(f"{run.where(run.args_line)}: the run of {seen[key]} again: once")
                continue
            seen.setdefault(key, run.where(run.args_line))
            if len(run.iterations) < MIN_LINES and measurable:
                # an attempt that died within its first log intervals, then restarted
                lines = len(run.iterations)
                if notes is not None:
                    notes.append(
                        f"{run.where(run.args_line)}: {lines} iteration line(s) after this (the "
                        "run ended within its first log intervals): left out"
                    )
                continue
            if not run.iterations:
                why = "no iteration lines after this (the run ended before its first log interval"
                raise InputError(
                    f"{run.where(run.args_line)}: {why}, or the log is truncated; or it is one "
                    "rank's file of per-rank logs: the last rank prints the iteration lines)"
                )
            restart = _same_job(run, measurable)
            if restart is not None:
                if notes is not None:
                    first = restart.where(restart.args_line or restart.iterations[0].line)
                    notes.append(
                        f"{run.where(run.args_line or run.iterations[0].line)}: a run of "
                        f"{len(run.iterations)} iteration line(s), the job of {first} again "
                        "(a restart): left out, measured on the run with more iteration lines"
                    )
                continue
            plan_read = plan_read or run.args_line is None
            plan = _plan(run, spec, num_gpus, plan_path, vocab_size)
            step, used, warm_free = _step_time(run, plan)
            where = run.where(run.args_line or run.iterations[0].line)
            if not warm_free and notes is not None:
                notes.append(
                    f"{where}: measured on {used} iteration line(s), the second logged interval "
                    "among them, which still carries start-up: log more iterations for a "
                    "warm-up-free step time"
                )
            out.append(MeasuredRun(where, plan, step, used, _memory(run, plan)))
    if plan_path is not None and not plan_read:
        raise InputError(
            f"--plan {plan_path}: not read: each run of the logs prints its arguments block, "
            "which gives its plan (--plan is for a log without one): leave --plan out"
        )
    return out


def _same_job(
    run: megatron_log.LogRun, runs: list[megatron_log.LogRun]
) -> megatron_log.LogRun | None:
    """Another run of the same file with the same printed arguments (a job restarted from its
    checkpoint; in a log without arguments blocks, which `--plan` completes, every start of the
    job, `megatron_log` splitting them at their iteration numbers) that logged more iteration
    lines, the first of them on a tie; None if there is none or `run` is it. One job measured
    twice would weigh double in a fit."""
    twins = [r for r in runs if r.args == run.args]
    best = max(twins, key=lambda r: len(r.iterations), default=run)
    return None if best is run else best
