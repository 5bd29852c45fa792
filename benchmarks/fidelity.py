"""Predicted vs measured throughput on the dev set: every published run with a throughput figure,
the MLPerf Training submissions, and Megatron-LM's functional-test step times.

    python benchmarks/fidelity.py [--functional]

Rows:
  published   benchmarks/data/published_runs.yaml rows with result.tokens_per_s_per_gpu or
              derived.tokens_per_s_per_gpu, mapped by benchmarks/runs.py (`load_published`)
  mlperf      benchmarks/mlperf.py `load_mlperf` (MLPerf Training GPT-3 175B, Llama 3.1 405B / 8B:
              NVIDIA's NeMo / Megatron reference code on every submitter's system)
  functional  benchmarks/functional_steps.py `load_functional_steps` (Megatron-LM CI cases, tiny
              models on one or two nodes, most in deterministic mode: summarised, rows with
              --functional)
  release     benchmarks/functional_steps.py `load_release_steps` (Megatron-LM's release cases:
              Mixtral 8x7B / 8x22B and a DeepSeek-V3 proxy on 32-128 H100 / A100 / GB200, their
              GPU count read off the allocated memory: benchmarks/functional_gpus.py)
A source whose loader is missing is skipped with a note (`SOURCES`: the hook a new loader joins).

Prints predicted and measured tokens/s/GPU, the relative error, predicted and published MFU where
the source's convention is ours (model FLOPs, no causal halving, no recompute: SC21's derived
eq.(7) figure, Korthikanti, Megatron-Core r0.8), the largest non-compute cost as suggest's "top
cost" names it (the host's eager kernel issue among them: `switch_notes.host_seconds`), and
marks with * the rows benchmarks/fit_constants.py fits on. Then median and worst |error| for the
fit rows and the rest, per source (published: per paper), per family (dense / MoE) and per
training code (Megatron family: Megatron-LM, Megatron-Core, NeMo, MLPerf's NeMo reference; other:
torchtitan).
Target on the held-out Megatron-family runs: median |error| <= 5%, worst <= 15%. Then the
held-out Megatron rows by GPU, and the MLPerf rows by round (the software of the day), family
and whether explain flags the layout as optimistic (known_gaps.optimistic).
"""

from __future__ import annotations

import importlib
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.calibration_loo import hash_fold
from benchmarks.functional_steps import one_tray
from benchmarks.runs import Case, load_published
from planner.cli import switch_notes
from planner.model import performance
from planner.model.known_gaps import optimistic

FIT_PREFIXES = ("sc21-", "mcore-h100-")
"""Published rows benchmarks/fit_constants.py fits on (ids starting so): the SC21 Table 1 and
Megatron-Core r0.8 H100 weak-scaling runs."""

MLPERF_FIT_FOLD = 0
"""And the dense MLPerf rows whose id falls in this of two hash folds
(`calibration_loo.hash_fold`): FP8, flash attention, sequences of 2k-8k, H100 to GB200, which
the 2021-2023 rows alone leave the attention constant free to run to its bound on. The other fold,
the MoE rows and everything else are held out."""

SOURCES: tuple[tuple[str, str, str], ...] = (
    ("mlperf", "benchmarks.mlperf", "load_mlperf"),
    ("functional", "benchmarks.functional_steps", "load_functional_steps"),
    ("release", "benchmarks.functional_steps", "load_release_steps"),
)
"""(source, module, loader) of the dev-set loaders besides the published runs: each returns
list[benchmarks.runs.Case]. A new loader joins here."""

OTHER_CODE = ("torchtitan",)
"""Row-id prefixes of runs not made with Megatron-family code."""

TARGET_MEDIAN, TARGET_WORST = 0.05, 0.15
"""The target on held-out Megatron-family runs, dense and MoE each: median |error| at most 5%,
worst at most 15% (issue 22)."""


MLPERF_NOT_FITTED = ("v3.0-",)
"""MLPerf rounds left out of the fit (held out): v3.0's GPT-3 175B runs were beaten by 9% in
v3.1 on the same 512 H100, layout and batch (678.5 -> 741.1 tokens/s/GPU, tp 4 pp 8 vpp 12,
benchmarks/data/mlperf/runs.yaml): software the model does not describe, not physics."""


def is_fit(c: Case) -> bool:
    """A row benchmarks/fit_constants.py fits on (FIT_PREFIXES; MLPERF_FIT_FOLD but for
    MLPERF_NOT_FITTED). NVFP4 rows (precision "fp4") are never fitted: their physics is checked,
    not fitted, as the FP4 GEMM ceiling comes from a kernel measurement
    (planner.model.gemm.fp4_ceiling), not from these step times. Nor are rows on a GPU whose
    matmul ceiling is derived, not measured (the catalog's `mamf_derived_from`: GB300, B300's
    fractions at its peaks): GEMM_EFFICIENCY_MAX and FP8_CEILING_FRACTION are fractions of a
    measured ceiling, and such a row would fit the derivation instead (GB300 runs 6-12% faster
    relative to B300, B200 and GB200 than that derivation gives: benchmarks/gpu_pairs.py). Nor
    AMD rows (ROCm's forks of Megatron-LM and Transformer Engine, settings partly assumed: the
    MI355X and MI350X entries' training script is not stored): they check that the physics
    carries to a GPU the constants never saw."""
    gpu = c.job.cluster.gpu
    if c.job.precision == "fp4" or gpu.mamf_derived_from is not None or gpu.vendor != "nvidia":
        return False
    if c.id.startswith(FIT_PREFIXES):
        return True
    if source(c) != "mlperf" or family(c) != "dense" or c.id.startswith(MLPERF_NOT_FITTED):
        return False
    return hash_fold(c.id, 2) == MLPERF_FIT_FOLD


def source(c: Case) -> str:
    """'mlperf', 'functional', or the published row's paper (its id's first word)."""
    return c.group.split("-")[0]


def family(c: Case) -> str:
    return "MoE" if c.job.arch.is_moe else "dense"


def code(c: Case) -> str:
    return "other" if c.id.startswith(OTHER_CODE) else "Megatron"


def dev_set(note: Callable[[str], None] = print) -> list[Case]:
    """The published runs, then every loader of SOURCES that exists."""
    cases = load_published()
    for name, module, loader in SOURCES:
        try:
            load = getattr(importlib.import_module(module), loader)
        except (ImportError, AttributeError) as e:
            note(f"(source {name} skipped: {module}.{loader} not available: {e})")
            continue
        cases += load()
    return cases


def rows(cases: list[Case]) -> list[tuple[Case, performance.Performance, float]]:
    out = []
    for c in cases:
        p = c.estimate()
        out.append((c, p, p.tokens_per_s_per_gpu / c.tokens_per_s_per_gpu - 1))
    return out


def summary(errors: list[float]) -> str:
    if not errors:
        return "none"
    a = [abs(e) for e in errors]
    return f"median |error| {statistics.median(a):.1%}, worst {max(a):.1%} (n={len(a)})"


def _print_row(c: Case, p: performance.Performance, err: float) -> None:
    fit = "*" if is_fit(c) else " "
    mfu_pub = f"{c.mfu_pct:.1f}" if c.mfu_pct else "-"
    mfu_pred = f"{100 * p.mfu:.1f}" if c.mfu_pct else "-"
    lay = c.layout.describe().replace(" zero", " z").replace("recompute=", "rc=")
    if c.job.precision != "bf16":
        lay += f" {c.job.precision}"
    print(
        f"{c.id[:41] + fit:42s} {c.job.arch.name[:20]:20s} {lay[:44]:44s} "
        f"{c.tokens_per_s_per_gpu:9.1f} {p.tokens_per_s_per_gpu:9.1f} {err:+7.1%} {mfu_pub:>7s} "
        f"{mfu_pred:>8s}  {p.bottleneck(switch_notes.host_seconds(c.job, c.layout))}"
    )


def main() -> None:
    res = rows(dev_set())
    print(
        f"{'id':42s} {'model':20s} {'layout':44s} {'measured':>9s} {'predicted':>9s} "
        f"{'error':>7s} {'MFU pub':>7s} {'MFU pred':>8s}  bottleneck"
    )
    for c, p, err in res:
        if source(c) != "functional" or "--functional" in sys.argv:
            _print_row(c, p, err)

    def errs(keep: Callable[[Case], bool]) -> list[float]:
        return [e for c, _, e in res if keep(c)]

    print(f"\nfit rows (*):  {summary(errs(is_fit))}")
    held = errs(lambda c: not is_fit(c) and source(c) != "functional")
    print(f"held-out rows (published, MLPerf): {summary(held)}")
    print(f"held-out rows with the functional tests: {summary(errs(lambda c: not is_fit(c)))}")
    print("\nper source (held-out rows; the fit rows' sources also with them)")
    for s in dict.fromkeys(source(c) for c, _, _ in res):
        held = errs(lambda c, s=s: source(c) == s and not is_fit(c))  # type: ignore[misc]
        every = errs(lambda c, s=s: source(c) == s)  # type: ignore[misc]
        line = f"  {s:12s} {summary(held)}"
        if len(every) != len(held):
            line += f"   all: {summary(every)}"
        print(line)
    print("\nheld-out rows by family and training code (functional-test rows apart)")
    for fam in ("dense", "MoE"):
        for who in ("Megatron", "other"):
            e = errs(
                lambda c, f=fam, w=who: (
                    not is_fit(c)  # type: ignore[misc]
                    and source(c) != "functional"
                    and family(c) == f
                    and code(c) == w
                )
            )
            line = f"  {fam:5s} {who:8s} {summary(e)}"
            if who == "Megatron" and e:
                a = [abs(x) for x in e]
                med, worst = statistics.median(a) <= TARGET_MEDIAN, max(a) <= TARGET_WORST
                line += (
                    f"   target median <= {TARGET_MEDIAN:.0%}: {'met' if med else 'missed'}, "
                    f"worst <= {TARGET_WORST:.0%}: {'met' if worst else 'missed'}"
                )
            print(line)
    _by_gpu(res)
    _by_round(res)
    _functional_summary(res)


def _by_gpu(res: list[tuple[Case, Any, float]]) -> None:
    """The held-out Megatron-family rows (functional tests apart) by family and GPU, with the
    signed median: where the model runs fast or slow as a whole rather than row by row."""
    print("\nheld-out Megatron rows by family and GPU (signed median: + predicted faster)")
    held = [
        (c, x)
        for c, _, x in res
        if not is_fit(c) and source(c) != "functional" and code(c) == "Megatron"
    ]
    for fam in ("dense", "MoE"):
        for gpu in sorted({c.job.cluster.gpu.name for c, _ in held if family(c) == fam}):
            e = [x for c, x in held if family(c) == fam and c.job.cluster.gpu.name == gpu]
            print(f"  {fam:5s} {gpu:14s} {summary(e)}, median {statistics.median(e):+.1%}")


def _by_round(res: list[tuple[Case, Any, float]]) -> None:
    """Every MLPerf row (fit and held out) by round, family and whether explain flags its layout
    as optimistic (known_gaps.optimistic), with the signed median: each round
    runs one NVIDIA reference software, so this is the model against the software of the day
    (v3.0's GPT-3 ran 9% slower than v3.1's on the same GPUs and layout)."""
    print("\nMLPerf rows by round (the software of the day), family and the flagged regime")
    groups: dict[tuple[str, str, bool], list[float]] = {}
    for c, _, x in res:
        if source(c) == "mlperf":
            flagged = optimistic(c.job, c.layout)
            groups.setdefault((str(c.raw["round"]), family(c), flagged), []).append(x)
    for (rnd, fam, flagged), e in sorted(groups.items()):
        where = "flagged optimistic" if flagged else "unflagged"
        print(f"  {rnd:5s} {fam:5s} {where:18s} {summary(e)}, median {statistics.median(e):+.1%}")


def _functional_summary(res: list[tuple[Case, Any, float]]) -> None:
    """The functional-test rows by family, then without the one-tray GB200 runs
    (functional_steps.one_tray: their two-tray twins run 3-22x faster on the same arguments),
    by family and GPU."""
    func = [(c, e) for c, _, e in res if source(c) == "functional"]
    for fam in ("dense", "MoE"):
        e = [x for c, x in func if family(c) == fam]
        print(f"  {fam:5s} functional tests (Megatron-LM CI, tiny models) {summary(e)}")
    trays = [x for c, x in func if one_tray(c)]
    print(f"\nfunctional tests less the one-tray GB200 runs ({len(trays)}: {summary(trays)})")
    kept = [(c, x) for c, x in func if not one_tray(c)]
    for fam in ("dense", "MoE"):
        gpus = sorted({c.job.cluster.gpu.name for c, _ in kept})
        for gpu in ["all", *gpus]:
            e = [x for c, x in kept if family(c) == fam and gpu in ("all", c.job.cluster.gpu.name)]
            signed = f", median {statistics.median(e):+.1%}" if e else ""
            print(f"  {fam:5s} {gpu:14s} {summary(e)}{signed}")
    _functional_pipeline(kept)


def _functional_pipeline(kept: list[tuple[Case, float]]) -> None:
    """The same rows by GPU, pipeline schedule and optimizer, with the signed median: in this
    host-bound regime the residual splits by schedule, one stage predicted too fast and 1F1B too
    slow. Dropping the host-bound 1F1B bubble (with the host constants refit by
    benchmarks/fit_host.py) removes the split on A100 and GB200, but Megatron's p2p synchronises
    the device after every send / receive (batch_p2p_sync), so the ranks cannot issue ahead of
    their data and no physics of the model's allows it (issue 22's closing note, stop 44)."""

    def schedule(c: Case) -> str:
        if c.layout.pp == 1:
            return "pp 1"
        return "1F1B" if c.layout.vpp == 1 else "interleaved"

    print("\nfunctional tests less the one-tray runs, by GPU, schedule and optimizer")
    groups: dict[tuple[str, str, str], list[float]] = {}
    for c, x in kept:
        opt = "distributed" if c.layout.zero_stage >= 1 else "replicated"
        groups.setdefault((c.job.cluster.gpu.name, schedule(c), opt), []).append(x)
    for (gpu, sched, opt), e in sorted(groups.items()):
        print(f"  {gpu:14s} {sched:11s} {opt:11s} {summary(e)}, median {statistics.median(e):+.1%}")
    _moe_one_stage(kept)


OUTLIER_PLATFORM = "dgxh100_dgxc"
"""The functional tests' H100 platform whose runs take 7-9x their dgx_h100 twins' step on the
same arguments (its golden files): an environment apart, as the one-tray GB200 runs are."""


def _moe_one_stage(kept: list[tuple[Case, float]]) -> None:
    """The MoE rows at pp 1 by GPU, apart from the outlier platform: the residual no term of the
    model's explains (issue 22, stop of 2026-12-07). On H100 every such row (11, median +31%)
    is predicted faster, each run deterministic, and the same arguments measure 0.96 of their
    A100 twins' step against 0.67-0.68 for dense and pp-2 MoE pairs, while planner gives 0.75-0.77
    everywhere; each candidate term (MoE host issue, a fixed per-layer cost, EP latency) that
    closes it moves the A100 and GB200 rows 9-26 points the other way. The likeliest cause, a host
    barrier each MoE layer's dispatcher takes (token_dispatcher.py:320, :326, :958 at d98e8a64)
    costing more on the H100 CI nodes, needs per-host data the golden files do not record."""
    print(f"\nMoE functional tests at pp 1 by GPU (less {OUTLIER_PLATFORM}'s runs)")
    for gpu in sorted({c.job.cluster.gpu.name for c, _ in kept}):
        e = [
            x
            for c, x in kept
            if family(c) == "MoE"
            and c.layout.pp == 1
            and c.job.cluster.gpu.name == gpu
            and c.raw.get("platform") != OUTLIER_PLATFORM
        ]
        if e:
            print(f"  {gpu:14s} {summary(e)}, median {statistics.median(e):+.1%}")


if __name__ == "__main__":
    main()
