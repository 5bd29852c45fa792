"""The host's cost of Megatron-LM's weight-hash check, measured and fitted.

    python benchmarks/host_hash.py            # fit the constants on the stored measurements
    python benchmarks/host_hash.py --measure  # measure this machine (needs torch), store, fit

What is measured: Megatron-LM's per-parameter loop of
--check-weight-hash-across-dp-replicas-interval (d98e8a64 megatron/core/utils.py
`check_param_hashes_across_dp_replicas`), as written there:
`torch.frombuffer(array.array("B", hashlib.sha1(param.data.to("cpu").float().numpy(force=True))
.digest()), dtype=torch.uint8)`, over bf16 tensors already on the host (the device-to-host copy
is the host link's, `planner.model.weight_hash`), with one torch thread (torchrun sets
OMP_NUM_THREADS=1 for its workers). Each set of tensors is timed REPEATS times and the median kept.

The fit: seconds = HASH_S_PER_PARAM x parameters + HASH_S_PER_TENSOR x tensors, least squares
over the stored sets but IN_CACHE, relative error weighted (each set counts alike whatever its
size); the table prints each set's measured and fitted seconds and the constants planner ships.

Data: benchmarks/data/host_hash.json (the sets, their medians, the machine and the command).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.model import weight_hash

DATA = Path(__file__).resolve().parent / "data" / "host_hash.json"
REPEATS = 5

NORM = [(512,), (512,)]
LAYER = [*NORM, (1536, 512), (512, 512), *NORM, (8, 512), (1024, 512), (512, 1024)]
"""One decoder layer: the attention's norm, QKV and projection, the MoE's norm, the router and
its one local expert's fc1 and fc2 (LayerNorm weights and biases)."""
GPT_12L = [(50304, 512), (1024, 512), *(LAYER * 12), *NORM]
"""One rank of the 12-layer, 512-wide GPT of Megatron-LM's MoE functional tests (hidden 512,
8 experts of 1,024 over ep 8: one local expert a layer, a tied 50,304-token embedding, learned
positions)."""

SETS: dict[str, list[tuple[int, ...]]] = {
    "12-layer GPT, 512 wide": GPT_12L,
    "16 x 4096 x 4096": [(4096, 4096)] * 16,
    "4 x 8192 x 8192": [(8192, 8192)] * 4,
    "2,000 norms of 512": [(512,)] * 2000,
    "200 x 1024 x 1024": [(1024, 1024)] * 200,
}
"""The measured sets: a small model's rank as the functional tests run it, large matrices (the
per-parameter rate of a real model's weights, whose fp32 copies do not fit in a CPU's cache),
many tiny tensors (the per-tensor cost), and 4 MiB matrices whose fp32 copies stay in the cache."""
IN_CACHE = "200 x 1024 x 1024"
"""Left out of the fit: its casts write to and SHA-1 reads from the CPU's cache, about 60% of
the per-parameter time of the rest (printed for the record). A model's weights are mostly larger."""


def _measure() -> dict[str, Any]:
    import array
    import hashlib
    import importlib

    torch = importlib.import_module("torch")  # not a dependency of planner: --measure only
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    for name, shapes in SETS.items():
        ps = [torch.randn(*s, dtype=torch.bfloat16) for s in shapes]
        times = []
        for _ in range(REPEATS):
            t = time.perf_counter()
            for p in ps:
                digest = hashlib.sha1(p.data.to("cpu").float().numpy(force=True)).digest()
                torch.frombuffer(array.array("B", digest), dtype=torch.uint8)
            times.append(time.perf_counter() - t)
        params = sum(p.numel() for p in ps)
        seconds = statistics.median(times)
        rows.append({"set": name, "tensors": len(ps), "params": params, "seconds": seconds})
    return {
        "source": "measured by benchmarks/host_hash.py on this project's build machine",
        "command": "python benchmarks/host_hash.py --measure",
        "date": time.strftime("%Y-%m-%d"),
        "machine": {
            "cpu": _cpu_model(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
        },
        "repeats": REPEATS,
        "rows": rows,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fit(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds per parameter, seconds per tensor): least squares on the relative error."""
    a = np.array([[r["params"], r["tensors"]] for r in rows], dtype=float)
    y = np.array([r["seconds"] for r in rows], dtype=float)
    w = 1.0 / y
    coef, *_ = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)
    return float(coef[0]), float(coef[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", action="store_true", help="measure this machine (needs torch)")
    args = ap.parse_args()
    if args.measure:
        try:
            doc = _measure()
        except ImportError:
            sys.exit("--measure needs torch (a CPU wheel will do): pip install torch")
        DATA.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    doc = json.loads(DATA.read_text(encoding="utf-8"))
    rows = doc["rows"]
    per_param, per_tensor = fit([r for r in rows if r["set"] != IN_CACHE])
    print(f"machine: {doc['machine']}")
    print(
        f"{'set':26s} {'tensors':>8s} {'params':>12s} {'measured s':>11s} {'fitted s':>9s} "
        f"{'shipped s':>9s}"
    )
    for r in rows:
        fitted = per_param * r["params"] + per_tensor * r["tensors"]
        shipped = weight_hash.host_seconds(r["params"], r["tensors"])
        print(
            f"{r['set']:26s} {r['tensors']:8d} {r['params']:12,d} {r['seconds']:11.4f} "
            f"{fitted:9.4f} {shipped:9.4f}"
        )
    print(
        f"fit: {per_param * 1e9:.2f} ns per parameter, {per_tensor * 1e6:.1f} us per tensor; "
        f"shipped: {weight_hash.HASH_S_PER_PARAM * 1e9:.2f} ns, "
        f"{weight_hash.HASH_S_PER_TENSOR * 1e6:.1f} us"
    )


if __name__ == "__main__":
    main()
