"""The speedup of one training precision over another, measured and predicted, on MLPerf runs of
the same model, GPU, GPU count and parallel layout that differ in precision (NVFP4 against FP8 or
bf16, FP8 against bf16).

    python benchmarks/precision_pairs.py

A check of the precision physics that no step-time constant absorbs: a run's other settings
(TP overlap, CUDA graphs, FP8 attention, the software round) may differ within a pair, and the
model's ratio includes those it models; the attention column gives each run's attention precision
(training.fp8_attention). Data: benchmarks/mlperf.py `load_mlperf`.
"""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mlperf import load_mlperf
from benchmarks.runs import Case

ORDER = {"bf16": 0, "fp8": 1, "fp4": 2}
"""Lower precision last in a pair: the ratio is its throughput over the higher one's."""


def _key(c: Case) -> tuple[object, ...]:
    lay = c.layout
    shape = (lay.tp, lay.pp, lay.vpp, lay.cp, lay.ep, lay.micro_batch_size)
    return (c.job.arch.name, c.job.cluster.gpu.name, c.job.cluster.num_gpus, shape)


def pairs(cases: list[Case]) -> list[tuple[Case, Case]]:
    """(higher-precision run, lower-precision run) of the same key (`_key`)."""
    out = []
    for a, b in combinations(cases, 2):
        if _key(a) != _key(b) or a.job.precision == b.job.precision:
            continue
        out.append((a, b) if ORDER[a.job.precision] < ORDER[b.job.precision] else (b, a))
    return sorted(out, key=lambda p: (p[0].id, p[1].id))


def main() -> None:
    rows = pairs(load_mlperf())
    print(
        f"{'higher precision':36s} {'lower precision':36s} {'attention':>10s} {'measured':>9s} "
        f"{'predicted':>9s}"
    )
    errors = []
    for hi, lo in rows:
        measured = lo.tokens_per_s_per_gpu / hi.tokens_per_s_per_gpu
        predicted = lo.estimate().tokens_per_s_per_gpu / hi.estimate().tokens_per_s_per_gpu
        errors.append(predicted / measured - 1)
        attn = "/".join("fp8" if c.job.fp8_attention else "bf16" for c in (hi, lo))
        print(f"{hi.id:36s} {lo.id:36s} {attn:>10s} {measured:8.3f}x {predicted:8.3f}x")
    if errors:
        worst = max(errors, key=abs)
        print(f"{len(rows)} pairs; predicted / measured speedup - 1: worst {worst:+.1%}")


if __name__ == "__main__":
    main()
