"""The GPU count of a Megatron-LM functional-test run that no CI recipe names, read off the memory
the run measured, and whether a run's speed is possible on the GPU its file names.

    python benchmarks/functional_gpus.py   # the check on known counts, then every release file

Which runs: the release cases (model_config.yaml TEST_TYPE "release": real-size models, Mixtral
8x7B / 8x22B and a 14-layer DeepSeek-V3 proxy among them, trained for hundreds of steps on many
nodes). No CI recipe at d98e8a64 names them (benchmarks/data/megatron_functional_tests/README.md),
so their world size is unknown, and tokens/s per GPU is the global batch over it.

How (`infer`): the world size is tp x pp x cp x dp, and what the line fixes besides dp fixes the
rest. The distributed optimizer shards the fp32 master weights and Adam's two moments (12 bytes
per parameter) over dp (the experts' over the expert-dp ranks), so what stays allocated between
steps on the last pipeline stage (the golden file's mem-allocated-bytes, logged by the last
rank) falls with dp: for Mixtral 8x7B at tp 2 pp 4 ep 4, 29.7 / 20.8 / 16.4 / 14.2 GiB at dp 4 /
8 / 16 / 32. For each dp of DP_CANDIDATES whose plan planner reads, `rank_states.persistent_bytes`
of the last stage (the memory model's own, fitted on other rows: benchmarks/fit_allocated.py)
against the measured value; the count is the best candidate's when its |log(predicted /
measured)| is at most MATCH and every other candidate's at least SEPARATION and twice the best's.
Else the run is left out.

The check (`check_known`, an oracle the inference does not see): the same rule on the regular
cases' first runs, whose CI recipes give the count. Printed by main(): how many it gets right,
wrong, or leaves undecided.

Which GPU (`faster_than_gpu`): a release file's platform names where its golden values were
recorded, and two of the "lts_dgx_a100" files time steps within 15% of the same case's H100 file
(Mixtral 8x7B at tp 1 pp 4 ep 8: 3.75 s against 3.29 s). A run whose model FLOPs per second per
GPU exceed what the named GPU's matmuls can run at all (its dense peak at the run's precision x
its measured matmul ceiling, the best-shape MAMF: no GEMM runs faster, and a training step has
attention, communication and elementwise work besides) did not run on that GPU: it is left out.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_platforms import GPU_OF_PLATFORM, golden_target
from benchmarks.functional_tests import DATA, Verdict, command_line, evaluate, load_cases
from planner.inputs.megatron_unread import memory_notes
from planner.inputs.plan import Job
from planner.model import flops, rank_states

DP_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
"""Data-parallel sizes tried: the powers of two and their 1.5x up to 512."""

MATCH = 0.10
"""The chosen count's predicted allocated memory is within this of the measured (as |log| of
their ratio): about twice the memory model's median error on these rows (fit_allocated.py)."""

SEPARATION = 0.10
"""Every other count's prediction is at least this far from the measured (|log|), and at least
twice as far as the chosen one's: a 2x dp step changes the optimizer shard by 2x, so counts the
model cannot tell apart at its accuracy (large dp, where the shard is small) are left undecided."""

RELEASE = "release"
"""model_config.yaml TEST_TYPE of the cases this module infers counts for."""


@dataclass(frozen=True)
class Inference:
    """A world size read off the allocated memory (`infer`)."""

    num_gpus: int
    error: float
    """The chosen count's predicted / measured allocated memory - 1."""
    runner_up: tuple[int, float] | None
    """The next-closest count and its error, if any."""


def allocated_after_step(rec: dict[str, Any]) -> float | None:
    """The last recorded mem-allocated-bytes (what stays allocated between steps)."""
    values = [v for v in (rec["metrics"].get("mem-allocated-bytes") or {}).get("values", []) if v]
    return float(values[-1]) if values else None


def candidates(words: list[str], gpu: str, name: str) -> list[tuple[int, float]]:
    """(world size, predicted allocated bytes of the last pipeline stage) for each dp of
    DP_CANDIDATES whose plan planner reads (Megatron's rules: expert-parallel sizes that divide
    the ranks, a global batch that divides into micro-batches); none for a line with a feature
    the reader reports as not modelled in memory (Verdict.not_modelled less the step-time ones,
    `megatron_unread.memory_notes`: e.g. an attention output gate, whose weights the memory
    would not count)."""
    first = evaluate(words, gpu, None, name)
    if first.plan is None or memory_notes(first.not_modelled):
        return []  # a line with features the reader does not model: its memory is not the run's
    lay = first.plan.require_layout()
    model_parallel = lay.tp * lay.pp * lay.cp
    out = []
    for dp in DP_CANDIDATES:
        v = evaluate(words, gpu, model_parallel * dp, name)
        if v.plan is None or v.plan.require_layout().dp != dp:
            continue
        job, lay = v.plan.job, v.plan.require_layout()
        out.append((job.cluster.num_gpus, rank_states.persistent_bytes(job, lay, lay.pp - 1)))
    return out


def infer(words: list[str], gpu: str, name: str, measured: float) -> Inference | None:
    """The world size whose predicted allocated memory alone matches `measured` (`decide` over
    `candidates`), or None."""
    return decide(candidates(words, gpu, name), measured)


def decide(predicted: list[tuple[int, float]], measured: float) -> Inference | None:
    """The module docstring's rule over (world size, predicted bytes) pairs: the closest count
    when its |log(predicted / measured)| is at most MATCH and the next closest's at least
    SEPARATION and twice that; else None."""
    scored = sorted((abs(math.log(p / measured)), n, p / measured - 1) for n, p in predicted)
    if not scored or scored[0][0] > MATCH:
        return None
    best, n, err = scored[0]
    if len(scored) == 1:
        return Inference(n, err, None)
    other = scored[1]
    if other[0] < max(SEPARATION, 2 * best):
        return None
    return Inference(n, err, (other[1], other[2]))


def faster_than_gpu(job: Job, step_s: float) -> bool:
    """Whether a run of `step_s` seconds per step does more model FLOPs per second per GPU
    (`flops.model_flops`: 6 x parameters x tokens and the attention's, no recompute) than the
    named GPU's dense peak at the run's precision times its measured matmul ceiling (the module
    docstring)."""
    gpu = job.cluster.gpu
    # NVFP4 has no measured ceiling: its peak alone bounds it (a looser bound, never a wrong cut)
    ceiling = 1.0 if job.precision == "fp4" else gpu.matmul_ceiling(job.precision) or 1.0
    model = flops.model_flops(job.arch, job.seq_length, job.global_batch_size)
    rate = model / step_s / job.cluster.num_gpus
    return rate > gpu.peak_flops(job.precision) * ceiling


def check_known() -> tuple[int, int, int, list[str]]:
    """(right, wrong, undecided, the wrong ones) of `infer` on the regular cases' first runs
    whose CI recipes give the world size."""
    cases = {c["name"]: c for c in load_cases()}
    golden = json.loads((DATA / "golden_values.json").read_text())["files"]
    right = wrong = undecided = 0
    wrongs: list[str] = []
    cache: dict[tuple[str, str, float], Inference | None] = {}
    for rec in golden:
        case = cases.get(rec["case"])
        gpu = GPU_OF_PLATFORM.get(rec.get("platform") or "")
        measured = allocated_after_step(rec)
        if case is None or case.get("test_type") != "regular" or rec["run"] != "first run":
            continue
        if gpu is None or measured is None or case.get("mode") in ("rl", "inference"):
            continue
        target = golden_target(rec, case)
        if not target.count_known:
            continue
        key = (case["name"], gpu, measured)
        if key not in cache:
            cache[key] = infer(command_line(case), gpu, case["name"], measured)
        got = cache[key]
        if got is None:
            undecided += 1
        elif got.num_gpus == target.target.num_gpus:
            right += 1
        else:
            wrong += 1
            wrongs.append(
                f"{rec['case']} ({rec['file']}): recipe {target.target.num_gpus}, "
                f"inferred {got.num_gpus} ({got.error:+.1%})"
            )
    return right, wrong, undecided, wrongs


def release_inference(rec: dict[str, Any], case: dict[str, Any]) -> Inference | None:
    """`infer` for a release case's golden file (None for other cases, or where undecided)."""
    gpu = GPU_OF_PLATFORM.get(rec.get("platform") or "")
    measured = allocated_after_step(rec)
    if case.get("test_type") != RELEASE or gpu is None or measured is None:
        return None
    return infer(command_line(case), gpu, case["name"], measured)


def _describe(v: Verdict, got: Inference | None) -> str:
    if got is None:
        return f"undecided ({v.describe()[:60]})"
    other = f", next {got.runner_up[0]} ({got.runner_up[1]:+.1%})" if got.runner_up else ""
    return f"{got.num_gpus} GPUs (memory {got.error:+.1%}{other})"


def main() -> None:
    right, wrong, undecided, wrongs = check_known()
    print("check: the regular cases' first runs whose recipes give the count (not seen by it)")
    print(f"  right {right}, wrong {wrong}, undecided {undecided}")
    for w in wrongs:
        print(f"  wrong: {w}")
    print("\nrelease cases (no recipe count):")
    cases = {c["name"]: c for c in load_cases()}
    for rec in json.loads((DATA / "golden_values.json").read_text())["files"]:
        case = cases.get(rec["case"])
        if case is None or case.get("test_type") != RELEASE or rec["run"] != "first run":
            continue
        gpu = GPU_OF_PLATFORM.get(rec.get("platform") or "") or "?"
        v = evaluate(command_line(case), gpu, None, case["name"]) if gpu != "?" else Verdict(2)
        print(f"  {rec['case']:66s} {rec['file']:34s} {_describe(v, release_inference(rec, case))}")


if __name__ == "__main__":
    main()
