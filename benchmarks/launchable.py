"""Whether what `planner suggest` ranks can be launched: every top row of a grid of jobs, written
as the plan `suggest --write-plan` writes, against the launch targets of its training code
(`planner.emit.launch.refusals`).

    python benchmarks/launchable.py [--quick]

Grid: 8 models (dense, MoE, hybrid) on 16 H100, B200, GB200 and MI300X, 4,096-token sequences,
batch 128, bf16 and FP8 (NVIDIA only), Megatron-LM eager and with CUDA graphs, and torchtitan for
the models it has a flavor of; the top 3 rows of each (--quick: 3 models, 2 GPUs). A row fails
when every target of its framework refuses it: suggest ranked a plan nobody can run (e.g. CPU
offloading under CUDA graphs, or DeepEP for qwen3 with torchtitan's every-N checkpointing, both
fixed). Prints each failing row with the targets' messages, then the counts; exits 1 on a failure.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.plan import Job, load_plan, parse_plan
from planner.inputs.torchtitan import MODELS as TITAN_MODELS
from planner.search.space import Space
from planner.search.suggest import search_rows
from planner.search.titan_variants import candidate_job

MODELS = (
    "llama3.1-8b",
    "llama3.1-70b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "deepseek-v2-lite",
    "nemotron3-nano-30b-a3b",
    "qwen3-next-80b-a3b",
)
GPUS = ("h100-sxm-80gb", "b200-sxm-180gb", "gb200-nvl72", "mi300x-192gb")
NUM_GPUS, SEQ, BATCH, TOP = 16, 4096, 128, 3


def jobs(models: tuple[str, ...], gpus: tuple[str, ...]) -> list[tuple[str, Job]]:
    """(label, job) of the grid: every model, GPU and precision, Megatron-LM eager and graphed,
    torchtitan where it has the model."""
    out = []
    for model, gpu, precision in itertools.product(models, gpus, ("bf16", "fp8")):
        if precision == "fp8" and gpu.startswith("mi"):
            continue  # AMD's FP8 is not modelled for every recipe here
        runs: list[dict[str, object]] = [{}, {"cuda_graphs": True}]
        if model in TITAN_MODELS:
            runs.append({"framework": "torchtitan"})
        for extra in runs:
            training = {"seq_length": SEQ, "global_batch_size": BATCH, "precision": precision}
            doc = {
                "model": {"name": model},
                "cluster": {"gpu": gpu, "num_gpus": NUM_GPUS},
                "training": {**training, **extra},
            }
            tag = "graphs" if extra.get("cuda_graphs") else str(extra.get("framework", "megatron"))
            out.append((f"{model} {gpu} {precision} {tag}", parse_plan(doc).job))
    return out


def refused_rows(job: Job, where: Path) -> tuple[int, list[str]]:
    """How many top rows the job's search lists, and a line per row no target of its framework
    writes."""
    _, rows = search_rows(job, Space(framework=job.framework), TOP)
    targets = {t for t in launch.TARGETS if launch.FRAMEWORK.get(t, "megatron") == job.framework}
    failed = []
    for i, row in enumerate(rows):
        c = row.candidate
        path = where / f"row{i}.toml"
        model = {"name": job.arch.name}
        path.write_text(plan_writer.render(candidate_job(job, c), c.layout, model, []))
        messages = launch.refusals(load_plan(path))
        if not targets - {t for ts in messages.values() for t in ts}:
            why = " | ".join(m.split(": ", 1)[-1][:160] for m in messages)
            failed.append(f"  row {i + 1} {c.layout.describe()}: {why}")
    return len(rows), failed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 models on 2 GPUs")
    args = ap.parse_args()
    models = MODELS[:3] if args.quick else MODELS
    gpus = GPUS[:2] if args.quick else GPUS
    total = bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for label, job in jobs(models, gpus):
            n, failed = refused_rows(job, Path(tmp))
            total += n
            bad += len(failed)
            if failed:
                print(label)
                print("\n".join(failed))
    print(f"{total} top rows of {len(jobs(models, gpus))} jobs; no target writes {bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
