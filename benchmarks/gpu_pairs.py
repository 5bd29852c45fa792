"""The model's error on one GPU over another, with the software and the layout held fixed: MLPerf
Training runs of the same round, benchmark, precision and layout on two GPU kinds.

    python benchmarks/gpu_pairs.py

An MLPerf round ships one NVIDIA reference implementation per benchmark (NeMo / Megatron-Core at
one container), which every submitter of the round runs. Runs of a round, benchmark and precision
with the same tp, cp, ep and micro-batch size (a "cell"; the data-parallel size and the batch may
differ) so share their software and the shape of their per-GPU work, and a GPU kind's bias in
the cell (the median of predicted over measured throughput of its rows, `bias`) differs from
another's by what the model gets wrong about the two GPUs (and their systems: NVL72 racks
against 8-GPU nodes): the software's gain over the model, which changes from round to round
(v3.0 -> v3.1: +9% on the same GPUs and layout), cancels in the ratio.

Prints, per cell with two or more GPU kinds, each kind's bias and row count, then for each pair of
kinds the ratio error (1 + bias_a) / (1 + bias_b) - 1: positive where the model puts GPU a too far
ahead of GPU b. `benchmarks/fidelity.py` gives the absolute errors by GPU, across rounds.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.mlperf import load_mlperf
from benchmarks.runs import Case

Cell = tuple[str, str, str, str]
"""(round, benchmark, precision, layout: "tp{tp} cp{cp} ep{ep} mbs{micro batch}")."""


def cell_of(c: Case) -> Cell:
    lay = c.layout
    shape = f"tp{lay.tp} cp{lay.cp} ep{lay.ep} mbs{lay.micro_batch_size}"
    return str(c.raw["round"]), str(c.raw["benchmark"]), c.job.precision, shape


def bias(ratios: list[float]) -> float:
    """A GPU kind's bias in a cell: the median of its rows' predicted / measured throughput, - 1."""
    return statistics.median(ratios) - 1.0


def cells(cases: list[Case]) -> dict[Cell, dict[str, list[float]]]:
    """Predicted / measured throughput of every row, by cell and GPU kind (catalog name)."""
    out: dict[Cell, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for c in cases:
        ratio = c.estimate().tokens_per_s_per_gpu / c.tokens_per_s_per_gpu
        out[cell_of(c)][c.job.cluster.gpu.name].append(ratio)
    return out


def pair_errors(by_gpu: dict[str, list[float]]) -> list[tuple[str, str, float]]:
    """(GPU a, GPU b, ratio error) for each pair of kinds in a cell, a before b by name."""
    out = []
    for a, b in itertools.combinations(sorted(by_gpu), 2):
        out.append((a, b, (1 + bias(by_gpu[a])) / (1 + bias(by_gpu[b])) - 1))
    return out


def main() -> None:
    table = cells(load_mlperf())
    print(f"{'round':6s} {'benchmark':16s} {'prec':5s} {'layout':21s} GPU kinds: bias (rows)")
    pairs: list[tuple[str, str, float]] = []
    for key in sorted(table):
        by_gpu = table[key]
        if len(by_gpu) < 2:
            continue
        kinds = "  ".join(f"{g} {bias(r):+.1%} ({len(r)})" for g, r in sorted(by_gpu.items()))
        print(f"{key[0]:6s} {key[1]:16s} {key[2]:5s} {key[3]:21s} {kinds}")
        for a, b, e in pair_errors(by_gpu):
            print(f"{'':51s} {a} over {b}: ratio error {e:+.1%}")
            pairs.append((a, b, e))
    print("\nratio error by GPU pair (median over cells; + puts the first too far ahead)")
    grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a, b, e in pairs:
        grouped[(a, b)].append(e)
    for (a, b), es in sorted(grouped.items()):
        print(f"  {a} over {b}: {statistics.median(es):+.1%} (cells {len(es)})")


if __name__ == "__main__":
    main()
