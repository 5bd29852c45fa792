"""Megatron-LM logs written from the model itself, with chosen constants and noise: the oracle
of the calibration tests (what a fit must recover). Plans are written as plan files first, so a
log's run goes through the same reader as a user's (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Mapping
from pathlib import Path

from paths import REPO

from planner.emit.megatron import arguments
from planner.inputs.plan import load_plan
from planner.model import calibratable, cost, memory

sys.path.insert(0, str(REPO))
from benchmarks.megatron_logs import Step, log_text

MIB = 2**20

# (model, num_gpus, seq, global batch, parallel table): sizes from a few hundred ms to tens of
# seconds per step, so that a fixed per-step cost and the GEMM speed pull apart
PLANS = (
    ("llama3.1-8b", 8, 2048, 8, "tp = 1\npp = 1"),
    ("llama3.1-8b", 8, 8192, 128, "tp = 2\npp = 1\nsequence_parallel = true"),
    ("llama3.1-8b", 16, 4096, 32, "tp = 4\npp = 1\nsequence_parallel = true"),
    ("llama3.1-70b", 64, 8192, 64, "tp = 8\npp = 2\nsequence_parallel = true"),
    ("llama3.1-70b", 32, 4096, 32, "tp = 8\npp = 4\nsequence_parallel = true"),
    ("llama3.1-8b", 32, 2048, 32, "tp = 1\npp = 2"),
    ("llama3.1-8b", 16, 8192, 32, "tp = 2\npp = 2\nsequence_parallel = true"),
)
FITTED = range(6)
"""The plans the recovery tests fit; the last one is the outlier test's seventh run."""


def plan_file(directory: Path, i: int, gpu: str = "h100-sxm-80gb") -> Path:
    model, n, seq, gbs, parallel = PLANS[i]
    path = directory / f"plan{i}.toml"
    path.write_text(
        f'[model]\nname = "{model}"\n\n[cluster]\ngpu = "{gpu}"\nnum_gpus = {n}\n\n'
        f"[training]\nseq_length = {seq}\nglobal_batch_size = {gbs}\n\n[parallel]\n{parallel}\n"
    )
    return path


def write_log(
    directory: Path,
    i: int,
    truth: Mapping[str, float],
    noise: float = 0.01,
    seed: int = 0,
    slower: float = 1.0,
) -> Path:
    """The log of plan `i` as the model predicts it with constants `truth`: 21 iteration lines
    (the first 5x slower, as a start-up line is) with log-normal noise, the step `slower` times
    the prediction, and one memory report of the last stage's allocated memory."""
    plan = load_plan(plan_file(directory, i))
    job, layout = plan.job, plan.require_layout()
    rng = random.Random(seed * 100 + i)
    with calibratable.calibrated(truth):
        ms = 1000 * cost.estimate(job, layout).step_time_s * slower
        alloc = memory.estimate(job, layout).stages[-1].allocated
    steps = [Step(1, 5 * ms)] + [
        Step(10 * k, ms * math.exp(rng.gauss(0, noise))) for k in range(1, 21)
    ]
    n = job.cluster.num_gpus
    rank = (layout.pp - 1) * (n // layout.pp)
    text = log_text(arguments(plan).flat(), n, steps, (rank, 10, 0.7 * alloc / MIB, alloc / MIB))
    path = directory / f"run{i}.log"
    path.write_text(text)
    return path
