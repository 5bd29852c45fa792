"""The global batch of a plan read from Megatron-LM flags (for `megatron_training`): the line's
--global-batch-size, a --step-batch-size-schedule's largest batch, or Megatron's default of one
micro-batch per data-parallel rank; under --decrease-batch-size-if-needed rounded down to a
multiple of micro-batch x data-parallel size, as Megatron runs it. Megatron-LM d98e8a64."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line

DECREASE = "--decrease-batch-size-if-needed"


def global_batch(line: Line, parallel: dict[str, Any], num_gpus: int, notes: list[str]) -> int:
    """The global batch planner prices (module docstring); how it was read, to `notes`."""
    where = line.where
    gbs = line.integer("--global-batch-size")
    schedule = line.words("--step-batch-size-schedule")
    if schedule is not None:
        if gbs is not None:
            raise InputError(
                f"{where}: --step-batch-size-schedule: cannot be combined with "
                "--global-batch-size (Megatron-LM raises ValueError)"
            )
        gbs = _largest_batch(" ".join(schedule), where)
        notes.append(f"--step-batch-size-schedule: read at its largest batch, {gbs}")
    mbs = int(parallel.get("micro_batch_size", 1))
    model_size = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel.get("cp", 1)
    dp = max(num_gpus // model_size, 1)
    if gbs is None:  # Megatron's default: one micro-batch per data-parallel rank
        return mbs * dp
    if line.has(DECREASE) and schedule is None:  # the schedule's calculator ignores it
        return _decreased(line, gbs, mbs, dp, notes)
    return gbs


def _decreased(line: Line, gbs: int, mbs: int, dp: int, notes: list[str]) -> int:
    """--decrease-batch-size-if-needed: ConstantNumMicroBatchesCalculator runs
    `(gbs // (mbs x dp)) x mbs x dp` samples a step (num_microbatches_calculator.py:368-373,
    `_round` :299-301) and asserts at least one micro-batch (:388-390). validate_args still
    asserts the evaluation batch (--eval-global-batch-size, default the global batch) a multiple
    of --eval-micro-batch-size (default the micro-batch) x dp (arguments.py:708-721)."""
    where, unit = line.where, mbs * dp
    eval_gbs = line.integer("--eval-global-batch-size") or gbs
    eval_mbs = line.integer("--eval-micro-batch-size") or mbs
    if eval_gbs % (eval_mbs * dp):
        raise InputError(
            f"{where}: {DECREASE}: rounds only the training batch; validate_args still asserts "
            f"the evaluation batch ({eval_gbs}, --eval-global-batch-size, default "
            f"--global-batch-size) a multiple of --eval-micro-batch-size x dp "
            f"({eval_mbs} x {dp}; d98e8a64 arguments.py:708-721): give --eval-global-batch-size"
        )
    running = gbs // unit * unit
    if running < 1:
        raise InputError(
            f"{where}: {DECREASE}: --global-batch-size {gbs} is below micro_batch_size x dp "
            f"({mbs} x {dp} = {unit}): Megatron asserts at least one micro-batch "
            "(num_microbatches_calculator.py:388-390)"
        )
    if running != gbs:
        notes.append(
            f"{DECREASE}: the global batch {gbs} is not a multiple of micro_batch_size x dp "
            f"({mbs} x {dp} = {unit}): read at {running}, the batch Megatron-LM runs "
            "(num_microbatches_calculator.py:368-373)"
        )
    return running


def _largest_batch(schedule: str, where: str) -> int:
    """The largest batch of a "THRESHOLD:BS THRESHOLD:BS ..." schedule (Megatron-LM
    num_microbatches_calculator.py: thresholds in samples or tokens, with K/M/B/T suffixes)."""
    sizes = []
    for part in schedule.split():
        _, colon, size = part.partition(":")
        if not colon or not size.isdecimal() or int(size) < 1:
            raise InputError(
                f"{where}: --step-batch-size-schedule: expected THRESHOLD:BATCH pairs "
                f"(got {schedule!r})"
            )
        sizes.append(int(size))
    if not sizes:
        raise InputError(f"{where}: --step-batch-size-schedule: empty")
    return max(sizes)
