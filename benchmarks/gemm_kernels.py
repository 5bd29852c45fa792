"""planner's linear-GEMM model against Transformer Engine's measured GEMMs on B300.

Data: benchmarks/data/te_gemm/ (Transformer Engine's GEMM profiling tutorial: its harness timed
the 12 GEMMs of one transformer layer, hidden 4096, FFN 16384, 15,872 tokens, on a B300 in bf16,
FP8 current (tensorwise) and delayed scaling, MXFP8 and NVFP4; the README says what and where
from). Each of the harness's GEMMs is timed by `planner.model.gemm.gemm_time` at the job's linear
peak and large-GEMM fraction (`layer_time.gpu_of`), as `planner.model.linear_time` times a
layer's GEMMs, and in the harness's autocast mode with the recipe's quantisation
(`gemm.quant_bytes` per element at the modelled HBM rate) of the two operands it quantises on
every call: the input and the weight (a training step quantises the weight once per step and the
output gradient instead: `linear_time.linear_times`).

    python benchmarks/gemm_kernels.py

prints, per recipe and mode (pre-quantised: the GEMM kernels alone; autocast: with the
quantisation), the measured and predicted per-layer milliseconds by pass and their ratio, then
the autocast forward GEMMs one by one.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs.plan import Job, parse_plan
from planner.model.gemm import gemm_time, quant_bytes
from planner.model.layer_time import gpu_of

DATA = Path(__file__).parent / "data" / "te_gemm" / "gemm_profiling_b300.csv"

TOKENS, HIDDEN, FFN = 15872, 4096, 16384
"""The harness's model config: micro-batch 31 x sequence 512 tokens, hidden, FFN."""

Shape = tuple[int, int, int]

PASSES: dict[str, tuple[Shape, ...]] = {
    "fprop": (
        (TOKENS, HIDDEN, 3 * HIDDEN),
        (TOKENS, HIDDEN, HIDDEN),
        (TOKENS, HIDDEN, FFN),
        (TOKENS, FFN, HIDDEN),
    ),
    "dgrad": (
        (TOKENS, 3 * HIDDEN, HIDDEN),
        (TOKENS, HIDDEN, HIDDEN),
        (TOKENS, FFN, HIDDEN),
        (TOKENS, HIDDEN, FFN),
    ),
    "wgrad": (
        (HIDDEN, TOKENS, 3 * HIDDEN),
        (HIDDEN, TOKENS, HIDDEN),
        (HIDDEN, TOKENS, FFN),
        (FFN, TOKENS, HIDDEN),
    ),
}
"""The harness's GEMMs of one layer (M, K, N), as it derives them (`compute_gemm_shapes`):
forward Y = X W (QKV, attention output, MLP up, MLP down), dgrad (M, N, K), wgrad (K, M, N); each
run as a te.Linear forward of that shape."""

RECIPES = ("bf16", "tensorwise", "delayed", "mxfp8", "nvfp4")


@dataclass(frozen=True)
class Row:
    """One measured time: a pass's four GEMMs summed (op "sum") or one forward GEMM."""

    gpu: str
    mode: str
    recipe: str
    pass_: str
    op: str
    shape: Shape | None
    ms: float


def load() -> list[Row]:
    rows = []
    with DATA.open(newline="") as fh:
        for r in csv.DictReader(fh):
            shape = (int(r["m"]), int(r["k"]), int(r["n"])) if r["m"] else None
            rows.append(
                Row(r["gpu"], r["mode"], r["recipe"], r["pass"], r["op"], shape, float(r["ms"]))
            )
    return rows


@cache
def job(gpu: str, recipe: str) -> Job:
    """A one-GPU job in the recipe's precision (the model is a carrier: only the precision,
    the recipe and the GPU reach the GEMM times), parsed once per pair."""
    training: dict[str, Any] = {"seq_length": 512, "global_batch_size": 1}
    if recipe == "nvfp4":
        training["precision"] = "fp4"
    elif recipe != "bf16":
        training.update(precision="fp8", fp8_recipe=recipe)
    doc = {
        "model": {"name": "llama3.1-8b"},
        "cluster": {"gpu": gpu, "num_gpus": 1},
        "training": training,
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1},
    }
    return parse_plan(doc, DATA).job


def predicted_ms(gpu: str, recipe: str, mode: str, shapes: tuple[Shape, ...]) -> float:
    """planner's time for the harness's GEMMs of `shapes`: each on the linear roofline, and
    under autocast the recipe's quantisation of its input (M x K) and weight (K x N)."""
    j = job(gpu, recipe)
    g = gpu_of(j)
    per_element = quant_bytes(j.quant_recipe, True, False) if j.quantised else 0.0
    seconds = 0.0
    for m, k, n in shapes:
        seconds += gemm_time(m, k, n, g.peak_linear, g.ridge, g.e_linear)
        if mode == "autocast":
            seconds += per_element * (m * k + k * n) / g.hbm
    return 1e3 * seconds


def layer_ratios(rows: list[Row]) -> dict[tuple[str, str], float]:
    """Predicted over measured per-layer time (the three passes' sums) by (mode, recipe)."""
    measured: dict[tuple[str, str], float] = {}
    predicted: dict[tuple[str, str], float] = {}
    for r in rows:
        if r.op != "sum":
            continue
        key = (r.mode, r.recipe)
        measured[key] = measured.get(key, 0.0) + r.ms
        predicted[key] = predicted.get(key, 0.0) + predicted_ms(
            r.gpu, r.recipe, r.mode, PASSES[r.pass_]
        )
    return {k: predicted[k] / measured[k] for k in measured}


def main() -> None:
    rows = load()
    print("per-layer GEMM milliseconds on B300, by recipe and mode: measured / predicted by pass")
    print(f"{'mode':13s} {'recipe':11s} {'fprop':>15s} {'dgrad':>15s} {'wgrad':>15s}  ratio")
    ratios = layer_ratios(rows)
    for mode in ("prequantized", "autocast"):
        for recipe in RECIPES:
            sums = {r.pass_: r for r in rows if (r.mode, r.recipe, r.op) == (mode, recipe, "sum")}
            if not sums:
                continue
            cells = [
                f"{sums[p].ms:6.3f} / {predicted_ms(sums[p].gpu, recipe, mode, PASSES[p]):6.3f}"
                for p in PASSES
            ]
            print(f"{mode:13s} {recipe:11s} {' '.join(cells)}  {ratios[(mode, recipe)]:.3f}")
    print("\nautocast forward GEMMs one by one: measured / predicted ms (+: the model slower)")
    for r in rows:
        if r.shape is not None:
            p = predicted_ms(r.gpu, r.recipe, r.mode, (r.shape,))
            print(f"{r.recipe:11s} {r.op:9s} {r.ms:6.3f} / {p:6.3f}  {p / r.ms - 1:+6.1%}")


if __name__ == "__main__":
    main()
