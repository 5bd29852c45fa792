"""Megatron-LM's functional-test step times as measured runs (planner Cases).

    python benchmarks/functional_steps.py            # every row, then median / worst per group
    python benchmarks/functional_steps.py --skipped  # also every golden file left out, and why

Data: benchmarks/data/megatron_functional_tests/ (NVIDIA/Megatron-LM d98e8a64; see its README):
`golden_values.json` holds `iteration-time` (seconds per iteration, the mean over each log
interval, logged by the last rank) for the calibration cases only (SHA-256 of "<family>/<case>"
starting 5-9 or a-f; nothing of the other cases is stored or read), `command_lines.json` each
case's arguments. A case's arguments become a plan the way `planner check --megatron-args` reads
them (benchmarks/functional_tests.py: `command_line`, `golden_target`, `evaluate`, imported).

One Case per first-run golden file (the resumed `_2nd` runs repeat the configuration) whose
arguments planner reads and that fits, on that file's platform (GPU kind) with the GPU count of
the case's CI recipe rows (nodes x processes per node; golden_target). Left out, and counted by
reason: files with no iteration-time, RL (GRPO) and inference cases (an iteration includes
rollouts or decoding), no platform in their name (GPU kind unknown), a GPU count
that is in no recipe, a line planner does not read or that does not fit, fewer than
MIN_INTERVALS timed intervals after the warm-up. The release cases (real-size models) are in no
recipe: their count is read off the run's allocated memory where that singles one out, and a
run faster than its named GPU's matmuls is left out (benchmarks/functional_gpus.py); they are
`load_release_steps`, the rest `load_functional_steps`.

Step time: the median of the recorded iteration-time values after the warm-up. The warm-up is
every value logged at a step <= WARMUP_STEPS (10): the first value (iteration 1 alone, or the
first log interval) holds the one-time costs (CUDA/NCCL initialisation, kernel autotuning and JIT,
CUDA-graph capture, the first data loads) and is 5-20x the later ones; the next steps still settle
(allocator growth, lazy buffers). With --log-interval 1 that skips steps 1-10, with 5 the values
at steps 1, 5 and 10. The median then ignores the isolated slow intervals the files show (a
checkpoint save, a straggler). tokens/s/GPU = global_batch x seq_length / step time / GPUs.

Deterministic mode: most cases pass --deterministic-mode, and their env_vars (and the runner
_run_training.sh, by default) set NCCL_ALGO=Ring, NCCL_PROTO=simple, NCCL_NVLS_ENABLE=0,
NVTE_ALLOW_NONDETERMINISTIC_ALGO=0 and CUBLAS_WORKSPACE_CONFIG=:4096:8
(megatron/training/determinism.py: torch.use_deterministic_algorithms(True); no TP comm overlap, no
fused cross-entropy). That costs time the planner does not model: Ring-only simple-protocol
collectives (no NVLS / tree, slower small messages), deterministic attention backward kernels,
deterministic torch ops. The measurements are kept as they are (no correction): each Case's
`raw` says `deterministic` (the flag) and `nccl_algo` (the env, else the runner's Ring) so a fit
can weight, split or drop those rows; main() prints the per-group summary with and without them.

Scale: these are tiny models (most have 12 layers and small hidden sizes) run for 50-100 steps
on 1-2 nodes. Their step times are a median 0.3 s (80% of rows between 0.12 and 1.6 s), where
the host issuing kernels (Python and kernel-launch latency per operation, the optimizer's many
small kernels, logging, the gradient statistics they log) dominates the FLOPs and bytes: the
regime of planner/model/host.py, whose constants benchmarks/fit_host.py fits on these rows.
Use them for the host model and to check ordering, not GEMM efficiencies.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.functional_gpus import RELEASE, faster_than_gpu, release_inference
from benchmarks.functional_platforms import golden_target
from benchmarks.functional_tests import DATA, Verdict, command_line, evaluate, load_cases
from benchmarks.runs import Case
from planner.inputs.job import Job

WARMUP_STEPS = 10
"""Values logged at steps <= this are warm-up (see the module docstring)."""
MIN_INTERVALS = 3
"""Fewest timed intervals after the warm-up for a row."""
RUNNER_NCCL_ALGO = "Ring"
"""_run_training.sh: `export NCCL_ALGO="${NCCL_ALGO:-Ring}"` (with NCCL_PROTO simple)."""


ONE_TRAY_SUFFIX = "_1node"
"""Cases run on one 4-GPU GB200 tray (their CI scope: "mr-github-temp-disabled"): the same
arguments as the two-tray case of the name without the suffix, measured 3-22x slower per step
(benchmarks/fit_host.py prints each pair), which no host or GPU physics explains. Left out of
the host fit and reported apart by benchmarks/fidelity.py (`one_tray`)."""


def one_tray(c: Case) -> bool:
    """Is the Case a run of a one-tray GB200 case (ONE_TRAY_SUFFIX)?"""
    return str(c.raw.get("case", "")).endswith(ONE_TRAY_SUFFIX)


def steps_of(metric: dict[str, Any]) -> list[int]:
    """The step of each value, per golden_values.json's `step_rule` (see its source block)."""
    n = len(metric["values"])
    start, every = int(metric["start_step"]), int(metric["step_interval"])
    rule = metric["step_rule"]
    if rule == "explicit":
        return [int(s) for s in metric["steps"]]
    if rule == "start_then_multiples":
        return [start] + [every * k for k in range(1, n)]
    return [start + every * k for k in range(n)]  # range, legacy_list


def step_time(metric: dict[str, Any]) -> tuple[float, int] | None:
    """(median seconds per iteration after the warm-up, number of intervals used)."""
    pairs = zip(steps_of(metric), metric["values"], strict=True)
    timed = [float(v) for s, v in pairs if v is not None and s > WARMUP_STEPS]
    if len(timed) < MIN_INTERVALS:
        return None
    return statistics.median(timed), len(timed)


def _label(rec: dict[str, Any]) -> str:
    return rec["file"].removeprefix("golden_values_").removesuffix(".json")


def load_with_skips() -> tuple[list[Case], list[tuple[str, str]]]:
    """The Cases, and (golden file, reason) for every first-run file left out (read once per
    process: `load_functional_steps` and `load_release_steps` both take from it)."""
    cases, skipped = _load()
    return list(cases), list(skipped)


@cache
def _load() -> tuple[tuple[Case, ...], tuple[tuple[str, str], ...]]:
    by_name = {c["name"]: c for c in load_cases()}
    golden = json.loads((DATA / "golden_values.json").read_text())["files"]
    cache: dict[tuple[str, str, int], Verdict] = {}
    cases: list[Case] = []
    skipped: list[tuple[str, str]] = []
    for rec in golden:
        if rec["run"] != "first run":
            continue
        where = f"{rec['case']} ({_label(rec)})"
        metric = rec["metrics"].get("iteration-time")
        case = by_name.get(rec["case"])
        reason = _first_reason(rec, metric, case)
        if reason:
            skipped.append((where, reason))
            continue
        assert case is not None and metric is not None
        assert case["usable_for_calibration"], rec["case"]  # the data holds no other
        target = golden_target(rec, case)
        t, inferred = target.target, None
        if not target.count_known:
            inferred = release_inference(rec, case)
            if inferred is None:
                skipped.append((where, "GPU count in no recipe row, nor singled out by memory"))
                continue
            t = replace(t, num_gpus=inferred.num_gpus)
        key = (case["name"], t.gpu, t.num_gpus)
        if key not in cache:
            cache[key] = evaluate(command_line(case), t.gpu, t.num_gpus, case["name"])
        v = cache[key]
        if v.plan is None or v.code != 0:
            skipped.append((where, f"not read or does not fit: {v.describe()[:90]}"))
            continue
        timed = step_time(metric)
        if timed is None:
            skipped.append((where, f"fewer than {MIN_INTERVALS} intervals after the warm-up"))
            continue
        seconds, intervals = timed
        job, layout = _as_timed(v.plan.job, case), v.plan.require_layout()
        if inferred is not None and faster_than_gpu(job, seconds):
            skipped.append((where, "faster than the named GPU's matmuls run: not run on it"))
            continue
        tokens = job.global_batch_size * job.seq_length / seconds / job.cluster.num_gpus
        env = case.get("env_vars") or {}
        raw = {
            "case": case["name"],
            "family": case["family"],
            "file": rec["file"],
            "platform": rec["platform"],
            "environment": rec["environment"],
            "gpu": t.gpu,
            "num_gpus": t.num_gpus,
            "step_time_s": seconds,
            "intervals": intervals,
            "deterministic": "--deterministic-mode" in case["model_args"],
            "nccl_algo": env.get("NCCL_ALGO", RUNNER_NCCL_ALGO),
            "not_modelled": list(v.not_modelled),
            "gpus_from_memory": inferred is not None,
        }
        moe = (job.arch.num_moe_experts or 0) > 1
        source = "release" if inferred is not None else "functional"
        group = f"{source}-moe" if moe else f"{source}-dense"
        cid = f"{case['name']}@{_label(rec)}"
        cases.append(Case(cid, job, layout, tokens, None, group, raw))
    return tuple(cases), tuple(skipped)


def _as_timed(job: Job, case: dict[str, Any]) -> Job:
    """The job as the median of its logged iteration times sees it: a weight-hash check every N
    steps (planner.model.weight_hash, which predicts the mean over N steps) is in under half the
    logged values when each spans fewer than N / 2 steps (--log-interval), and the median then
    holds none of it; where each value spans N / 2 steps or more it holds a share like the mean."""
    n = job.weight_hash_interval
    args = case["model_args"]
    every = int(args[args.index("--log-interval") + 1]) if "--log-interval" in args else 100
    # (100: Megatron-LM d98e8a64 training_config.py log_interval)
    if n and 2 * every < n:
        return replace(job, weight_hash_interval=0)
    return job


def _first_reason(
    rec: dict[str, Any], metric: dict[str, Any] | None, case: dict[str, Any] | None
) -> str:
    if metric is None:
        return "no iteration-time in the golden file"
    if case is None:
        return "no command line (folder without model_config.yaml)"
    if case.get("mode") in ("rl", "inference"):
        return f"mode {case['mode']}: an iteration is not one training step (RL rollouts, decoding)"
    if not rec.get("platform"):
        return "no platform in the file name: GPU kind unknown"
    if not golden_target(rec, case).count_known and case.get("test_type") != RELEASE:
        return "GPU count in no recipe row"
    return ""


def load_functional_steps() -> list[Case]:
    """One Case per usable first-run golden file whose CI recipe gives the GPU count (see the
    module docstring): the tiny-model CI runs."""
    return [c for c in load_with_skips()[0] if not c.raw["gpus_from_memory"]]


def load_release_steps() -> list[Case]:
    """The release cases' runs (real-size models) whose GPU count the allocated memory singles
    out (benchmarks/functional_gpus.py)."""
    return [c for c in load_with_skips()[0] if c.raw["gpus_from_memory"]]


def _summary(errs: list[float]) -> str:
    if not errs:
        return "none"
    a = [abs(e) for e in errs]
    return (
        f"median error {statistics.median(errs):+.1%}, median |error| {statistics.median(a):.1%}, "
        f"worst {max(errs, key=abs):+.1%} (n={len(a)})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skipped", action="store_true", help="list every golden file left out")
    args = ap.parse_args()
    cases, skipped = load_with_skips()
    print(
        f"{'id':86s} {'gpu':14s} {'n':>3s} {'layout':40s} {'step s':>7s} "
        f"{'measured':>9s} {'predicted':>9s} {'error':>7s}"
    )
    errs: dict[str, list[tuple[float, bool]]] = {}
    for c in cases:
        p = c.estimate()
        err = p.tokens_per_s_per_gpu / c.tokens_per_s_per_gpu - 1
        det = bool(c.raw["deterministic"])
        errs.setdefault(c.group, []).append((err, det))
        lay = c.layout.describe().replace(" zero", " z").replace("recompute=", "rc=")
        print(
            f"{c.id + ('' if det else ' (nd)'):86s} {c.raw['gpu']:14s} {c.raw['num_gpus']:3d} "
            f"{lay[:40]:40s} {c.raw['step_time_s']:7.3f} {c.tokens_per_s_per_gpu:9.0f} "
            f"{p.tokens_per_s_per_gpu:9.0f} {err:+7.1%}"
        )
    print("\n(nd) = not in deterministic mode; error = predicted / measured - 1")
    print(f"rows: {len(cases)}; golden first-run files left out: {len(skipped)}")
    for reason, k in Counter(r.split(":")[0] for _, r in skipped).most_common():
        print(f"  {k:4d}  {reason}")
    for g, es in sorted(errs.items()):
        print(f"{g:18s} all:               {_summary([e for e, _ in es])}")
        print(f"{g:18s} deterministic:     {_summary([e for e, d in es if d])}")
        print(f"{g:18s} not deterministic: {_summary([e for e, d in es if not d])}")
    if args.skipped:
        print("\nLeft out:")
        for where, reason in skipped:
            print(f"  {where:90s} {reason}")


if __name__ == "__main__":
    main()
