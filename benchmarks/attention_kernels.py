"""planner's flash-attention kernel model against cuDNN's measured kernel times.

Data: benchmarks/data/cudnn_sdpa/ (NVIDIA cudnn-frontend's SDPA training benchmark on H200, GB200
and GB300, one SDPA call per direction timed alone, and ten forward rows of its inference
benchmark on B200 and B300, whole-sequence attention at head dim 64 and 128; the data README says
what and where from). Each causal bf16 / per-tensor FP8 row is timed by
`planner.model.attention_time.core_attention` at ATTENTION_EFFICIENCY 1 (the kernel alone, as
the benchmark times it) on a one-layer model of the row's heads, head dims and sliding window.

    python benchmarks/attention_kernels.py [--rows]

prints the median and worst |error| (predicted / measured time) by GPU, precision, direction
and full or windowed attention, and with --rows every row; then cuDNN's deterministic backward
over its default one, measured on the same shapes, against the model's
`determinism.DETERMINISTIC_ATTENTION_BWD` (FlashAttention-3's on H100).

    python benchmarks/attention_kernels.py --fit

refits the cuDNN kernels of `planner.model.attention.FUSED_KERNELS` on the same rows (one E per
GPU generation, direction and precision; the span, head-dim, exponential and CUDA-core terms
shared; soft-L1 on the log error, Nelder-Mead, numpy only) and prints the constants to paste and
the errors after. Left out of both (planner/model/attention.py says why): non-causal rows, MXFP8,
the deterministic backward, the 32k sliding-window rows, FP8 sliding-window backward.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.fit_constants import loss, nelder_mead
from planner.inputs.plan import Job, parse_plan
from planner.model import attention, attention_time, determinism
from planner.model.gemm import Gpu
from planner.model.layer_time import gpu_of

DATA = Path(__file__).parent / "data" / "cudnn_sdpa"
FILES = ("sdpa_training.csv", "sdpa_inference.csv")

GENERATIONS = ("b300", "b200", "*")
"""The `FUSED_KERNELS` entries the fit sets (by their prefixes' first member): cuDNN's."""


@dataclass(frozen=True)
class Row:
    """One measured kernel: its shapes as a planner job, direction and time."""

    job: Job
    gpu: Gpu
    tokens: float
    seq: int
    window: int | None
    direction: str
    ms: float
    label: str


def usable(r: dict[str, str]) -> bool:
    """Rows the model is held to (the module docstring's exclusions)."""
    if r["mask"] != "causal" or r["dtype"] not in ("bf16", "fp8"):
        return False
    if r["direction"] == "bwd" and r["deterministic"] == "true":
        return False
    fp8_bwd = r["dtype"] == "fp8" and r["direction"] == "bwd"
    return not (r["window"] and (int(r["seq"]) > 16384 or fp8_bwd))


def plan_doc(r: dict[str, str]) -> dict[str, Any]:
    """A one-layer model of the row's attention on one GPU of its part."""
    heads, qk, vo, seq = (
        int(r["q_heads"]),
        int(r["head_dim_qk"]),
        int(r["head_dim_vo"]),
        int(r["seq"]),
    )
    model: dict[str, Any] = {
        "name": "sdpa",
        "num_layers": 1,
        "hidden_size": heads * vo,
        "ffn_hidden_size": 4 * heads * vo,
        "num_attention_heads": heads,
        "num_query_groups": int(r["kv_heads"]),
        "vocab_size": 32000,
        "max_position_embeddings": seq,
        "normalization": "RMSNorm",
        "position_embedding_type": "rope",
    }
    if qk != vo:  # MLA as the kernel sees it: Q and K of qk_head_dim + the rope part, V vo wide
        model.update(
            multi_latent_attention=True,
            qk_head_dim=vo,
            qk_pos_emb_head_dim=qk - vo,
            v_head_dim=vo,
            kv_lora_rank=512,
            q_lora_rank=1536,
            kv_channels=vo,
        )
    else:
        model["kv_channels"] = qk
    if r["window"]:  # the harness's W keys, the query's own included: Megatron's W - 1 before it
        model["window_size"] = int(r["window"]) - 1
    fp8 = r["dtype"] == "fp8"
    training: dict[str, Any] = {
        "seq_length": seq,
        "global_batch_size": int(r["batch"]),
        "precision": "fp8" if fp8 else "bf16",
        "fp8_attention": fp8,
    }
    if fp8:
        training["fp8_recipe"] = "delayed"
    return {
        "model": model,
        "cluster": {"gpu": r["gpu"], "num_gpus": 1},
        "training": training,
        "parallel": {"tp": 1, "pp": 1, "micro_batch_size": int(r["batch"])},
    }


def load() -> list[Row]:
    rows = []
    for name in FILES:
        with (DATA / name).open(newline="") as fh:
            rows += [_row(r, DATA / name) for r in csv.DictReader(fh) if usable(r)]
    return rows


def _row(r: dict[str, str], path: Path) -> Row:
    job = parse_plan(plan_doc(r), path).job
    window = job.arch.window_size if r["window"] else None
    seq, batch = int(r["seq"]), int(r["batch"])
    width = f"{r['head_dim_qk']}/{r['head_dim_vo']}"
    shape = f"d{width:7s} w{r['window'] or '-':4s} s{seq}"
    label = f"{r['gpu']:15s} {r['dtype']:4s} {r['direction']} {shape}"
    return Row(
        job,
        gpu_of(job),
        float(seq * batch),
        seq,
        window,
        r["direction"],
        float(r["time_ms"]),
        label,
    )


def predicted_ms(row: Row) -> float:
    """planner's kernel time for the row at ATTENTION_EFFICIENCY 1."""
    core = attention_time.core_attention(row.job, row.gpu, row.tokens, row.seq, 1, 1.0, row.window)
    return 1e3 * (core.fwd if row.direction == "fwd" else core.bwd)


def group(row: Row) -> str:
    r = row.job
    kind = "window" if row.window is not None else "full"
    return (
        f"{r.cluster.gpu.name:15s} {'fp8 ' if r.fp8_attention else 'bf16'} {row.direction} {kind}"
    )


def report(rows: list[Row], show_rows: bool) -> None:
    errs = [predicted_ms(r) / r.ms - 1 for r in rows]
    if show_rows:
        for r, e in zip(rows, errs, strict=True):
            print(f"{r.label}  measured {r.ms:9.3f} ms  predicted {(1 + e) * r.ms:9.3f}  {e:+6.1%}")
    by: dict[str, list[float]] = {}
    for r, e in zip(rows, errs, strict=True):
        by.setdefault(group(r), []).append(e)
    print(f"{'GPU, precision, direction, attention':38s}   n  median |error|  worst  signed median")
    for k in sorted(by):
        es = by[k]
        worst = max(es, key=abs)
        print(
            f"{k:38s} {len(es):3d}  {_med(es):13.1%}  {worst:+6.1%}  {statistics.median(es):+6.1%}"
        )
    print(f"all: median |error| {_med(errs):.1%}, worst {max(errs, key=abs):+.1%} (n={len(errs)})")


def deterministic_ratios() -> dict[str, list[float]]:
    """cuDNN's deterministic backward time over its default one, per GPU, precision and shape
    (the causal rows timed both ways)."""
    pairs: dict[tuple[str, ...], dict[str, float]] = {}
    for name in FILES:
        with (DATA / name).open(newline="") as fh:
            for r in csv.DictReader(fh):
                if r["direction"] != "bwd" or r["mask"] != "causal" or not r["deterministic"]:
                    continue
                fields = ("gpu", "dtype", "q_heads", "kv_heads", "head_dim_qk", "window", "seq")
                key = tuple(r[f] for f in (*fields, "batch"))
                pairs.setdefault(key, {})[r["deterministic"]] = float(r["time_ms"])
    out: dict[str, list[float]] = {}
    for key, both in pairs.items():
        if "true" in both and "false" in both:
            gpu, dtype, q, kv, d, window = key[:6]
            shape = f"{q}/{kv} heads d{d}" + (f" window {window}" if window else "")
            out.setdefault(f"{gpu:15s} {dtype:5s} {shape}", []).append(both["true"] / both["false"])
    return out


def report_deterministic() -> None:
    model = determinism.DETERMINISTIC_ATTENTION_BWD
    print(f"\ndeterministic / default backward (cuDNN; the model: {model:.3f} in bf16 and FP8)")
    for k, v in sorted(deterministic_ratios().items()):
        print(
            f"  {k:48s} n {len(v):2d}  median {statistics.median(v):.3f}  {min(v):.3f}-{max(v):.3f}"
        )


def _med(errs: list[float]) -> float:
    return statistics.median(abs(e) for e in errs)


# --- the fit ---------------------------------------------------------------------------------

PER_KERNEL = ("fwd", "bwd", "fp8_fwd", "fp8_bwd")
SHARED = ("half_seq", "half_head_dim", "exp", "alu")


def _entries() -> Iterator[tuple[int, str]]:
    for i, (prefixes, _) in enumerate(attention.FUSED_KERNELS):
        if prefixes[0] in GENERATIONS:
            yield i, prefixes[0]


def get_params() -> list[float]:
    table = attention.FUSED_KERNELS
    out = [float(getattr(table[i][1], f)) for i, _ in _entries() for f in PER_KERNEL]
    first = table[next(_entries())[0]][1]
    return out + [float(getattr(first, f)) for f in SHARED]


def set_params(x: list[float]) -> None:
    table = list(attention.FUSED_KERNELS)
    shared = dict(zip(SHARED, x[-len(SHARED) :], strict=True))
    for n, (i, _) in enumerate(_entries()):
        own = dict(zip(PER_KERNEL, x[4 * n : 4 * n + 4], strict=True))
        table[i] = (table[i][0], table[i][1]._replace(**own, **shared))
    attention.FUSED_KERNELS = tuple(table)


def fit(rows: list[Row]) -> list[float]:
    """Fit the cuDNN entries (GB200's FP8 forward matmul tied to GB300's: it waits on its
    exponentials at every measured shape, module docstring of planner.model.attention; each FP8
    rate at most twice its bf16 one, the tensor cores' FP8 / bf16 ratio)."""
    names = [(g, f) for _, g in _entries() for f in PER_KERNEL]
    tie = (names.index(("b200", "fp8_fwd")), names.index(("b300", "fp8_fwd")))

    def unpack(logx: np.ndarray) -> list[float]:
        x = np.exp(logx).tolist()
        x[tie[0]] = x[tie[1]]
        for n in range(len(x) // 4):  # FP8 matmuls at most twice bf16's (the tensor cores' ratio)
            x[4 * n + 2] = min(x[4 * n + 2], 2 * x[4 * n])
            x[4 * n + 3] = min(x[4 * n + 3], 2 * x[4 * n + 1])
        return x

    def objective(logx: np.ndarray) -> float:
        set_params(unpack(logx))
        return float(sum(loss(math.log(predicted_ms(r) / r.ms)) for r in rows))

    best = nelder_mead(objective, np.log(get_params()), iters=3000)
    best = nelder_mead(objective, best, step=0.05, iters=3000)
    x = unpack(best)
    set_params(x)
    return x


def main() -> None:
    rows = load()
    if "--fit" in sys.argv:
        print("before:")
        report(rows, False)
        x = fit(rows)
        print("\nfitted (paste into planner/model/attention.py):")
        for n, (_, g) in enumerate(_entries()):
            vals = ", ".join(
                f"{f} {v:.4f}" for f, v in zip(PER_KERNEL, x[4 * n : 4 * n + 4], strict=True)
            )
            print(f"  {g}: {vals}")
        shared = zip(SHARED, x[-len(SHARED) :], strict=True)
        print("  shared: " + ", ".join(f"{f} {v:.4g}" for f, v in shared))
        print("\nafter:")
    report(rows, "--rows" in sys.argv)
    report_deterministic()


if __name__ == "__main__":
    main()
