"""What the host-memory budget (planner/model/host_memory.py) changes in `planner suggest`'s top
picks.

    python benchmarks/host_memory.py [--quick]

Over a grid of jobs (6 models, 8 GPUs, 64 and 256 GPUs, sequences of 8,192 and 32,768, global
batch 256; --quick: 2 models, 3 GPUs, 64 GPUs), each job is searched twice: with the host memory
its catalog GPU's node has (the search keeps offloading within a GPU's share less the process's
reserve) and with an unbounded host (1 PiB a node: what the search did before the budget). The
table lists the jobs whose unbounded top pick pins more host memory than the GPU may, with the
bounded pick and what respecting the host costs in step time; the summary counts the jobs, the
unbounded picks that offload and those over the host, and checks that no bounded pick is over it.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs.hardware import MAX_HOST_MEMORY_GIB
from planner.inputs.plan import Job, parse_plan
from planner.inputs.units import GIB
from planner.model import host_memory
from planner.search import top_k as search
from planner.search.space import Space
from planner.search.top_k import Candidate

MODELS = (
    "llama3.1-8b",
    "llama3.1-70b",
    "llama3.1-405b",
    "mixtral-8x22b",
    "deepseek-v3",
    "qwen3-235b-a22b",
)
GPUS = (
    "h100-sxm-80gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "gb200-nvl72",
    "gb300-nvl72",
    "a100-sxm-80gb",
    "mi300x-192gb",
    "l40s-48gb",
)


def make_job(model: str, gpu: str, n: int, seq: int) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": gpu, "num_gpus": n},
        "training": {"seq_length": seq, "global_batch_size": 256},
    }
    return parse_plan(doc).job


def unbounded(job: Job) -> Job:
    """The job with a host too large to bind (MAX_HOST_MEMORY_GIB a node)."""
    cluster = job.cluster.model_copy(update={"host_memory_gib_per_node": MAX_HOST_MEMORY_GIB})
    return replace(job, cluster=cluster)


def top(job: Job) -> Candidate | None:
    res = search.search(job, Space(), top_k=1)
    return res.candidates[0] if res.candidates else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 12-job grid")
    quick = ap.parse_args().quick
    models, gpus = (MODELS[1:3], GPUS[2:5]) if quick else (MODELS, GPUS)
    grid = itertools.product(models, gpus, (64,) if quick else (64, 256), (8192, 32768))
    jobs = picks = offloading = over = bounded_over = 0
    rows: list[str] = []
    for model, gpu, n, seq in grid:
        job = make_job(model, gpu, n, seq)
        jobs += 1
        free = top(unbounded(job))
        if free is None:
            continue
        picks += 1
        need = host_memory.estimate(job, free.layout)
        offloading += need.total > 0
        kept = top(job)
        if kept is not None and not host_memory.estimate(job, kept.layout).fits:
            bounded_over += 1
        if need.fits:
            continue
        over += 1
        cost = "nothing fits" if kept is None else f"{kept.step_time / free.step_time - 1:+.1%}"
        pinned = host_memory.estimate(job, kept.layout).total / GIB if kept else 0.0
        rows.append(
            f"{model:16} {gpu:15} {n:4} {seq:6} {need.total / GIB:8.1f} {need.capacity / GIB:7.1f}"
            f"{'*' if need.assumed else ' '} {free.layout.describe():60.60} "
            f"{(kept.layout.describe() if kept else '-'):60.60} {pinned:7.1f} {cost:>12}"
        )
    head = (
        f"{'model':16} {'gpu':15} {'gpus':>4} {'seq':>6} {'pinned':>8} {'usable':>7}  "
        f"{'top pick, unbounded host':60} {'top pick, host budget':60} {'pinned':>7} "
        f"{'step cost':>12}"
    )
    print(head)
    print("\n".join(rows) if rows else "(no unbounded pick over the host)")
    print(
        f"\n{jobs} jobs, {picks} with a layout; unbounded top picks that offload: {offloading}, "
        f"over the host (GiB a GPU, * an assumed share): {over}; bounded picks over it: "
        f"{bounded_over}"
    )


if __name__ == "__main__":
    main()
