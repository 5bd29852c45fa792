"""NCCL's collectives inside one NVLink domain: planner's model against nccl-tests.

    python benchmarks/nccl_nvlink.py [--fit]

Data: benchmarks/data/nccl_nvlink/nccl_tests.csv (nccl-tests all-gather, reduce-scatter,
all-reduce and all-to-all on 2, 4 and 8 GPUs of A100, H100, H200, B200, B300, GB200 and GB300
nodes, 512 B to 512 MiB; NVIDIA's AI Configurator tables, see its README).

Prints, per GPU, NCCL version, collective and group size, planner's time over the measured one
(`planner.model.comms`: all_gather, reduce_scatter, all_reduce, all_to_all on a group of that many
ranks in one node) at 1 MiB and at 4-512 MiB (median and worst), and the same with NCCL's measured
shares switched off (the model before them: every collective at SCALEUP_BUS_EFFICIENCY of the
line rate plus the catalog's per-step latency).

`--fit` refits planner/model/nccl_shares.py's NCCL_NVLINK_SHARE and NCCL_CALL_S (ring and
all-reduce; the all-to-all's fit is printed, not used) and prints them to paste: on each system's
newest NCCL (A100 2.27.3, the others 2.29.2), each collective and group size is fitted over the
sizes of 4 MiB and more (TP, CP, EP and DP messages of training; below, NCCL's low-latency
protocols take over and the affine form over-states the time) as

    t = a + W / (eta x line),    W the bytes each GPU sends: (n-1)/n S (2(n-1)/n S all-reduce),

by least squares on t's relative error; eta's median over the systems of a family (Blackwell:
B200, B300, GB200, GB300; Hopper: H100, H200; Ampere: A100; all-gather and reduce-scatter pooled
as the ring) divided by SCALEUP_BUS_EFFICIENCY is the share, and a less the ring's catalog latency
(n-1 steps, 2(n-1) for the all-reduce, `comms.ring_latency`) is the call's fixed cost, whose median
over all systems and group sizes is NCCL_CALL_S.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planner.inputs import catalog
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.plan_resolve import resolve_cluster
from planner.model import comms, nccl_shares

DATA = Path(__file__).resolve().parent / "data" / "nccl_nvlink" / "nccl_tests.csv"
NEWEST = {"a100-sxm-80gb": "2.27.3"}
"""The NCCL version fitted on per GPU (default 2.29.2)."""
FIT_FROM = 4 * 2**20
OPS: dict[str, tuple[str, Callable[[int], float]]] = {
    "all_gather": ("ring", lambda n: (n - 1) / n),
    "reduce_scatter": ("ring", lambda n: (n - 1) / n),
    "all_reduce": ("all_reduce", lambda n: 2 * (n - 1) / n),
    "alltoall": ("all_to_all", lambda n: (n - 1) / n),
}
"""nccl-tests' operation -> (collective class, the bytes each GPU sends over S). The all-to-all is
fitted and printed but not in comms' tables (nccl_shares.NCCL_NVLINK_SHARE says why)."""
MODEL: dict[str, Callable[[float, comms.Group], float]] = {
    "all_gather": comms.all_gather,
    "reduce_scatter": comms.reduce_scatter,
    "all_reduce": comms.all_reduce,
    "alltoall": comms.all_to_all,
}

Key = tuple[str, str, str, int]
"""(gpu, NCCL version, operation, ranks)."""


def load() -> dict[Key, list[tuple[float, float]]]:
    """(bytes, seconds) rows per GPU, NCCL version, operation and ranks."""
    rows: dict[Key, list[tuple[float, float]]] = defaultdict(list)
    with DATA.open() as fh:
        for r in csv.DictReader(fh):
            key = (r["gpu"], r["nccl_dir"], r["op"], int(r["ranks"]))
            rows[key].append((float(r["bytes"]), float(r["time_us"]) * 1e-6))
    return rows


def line_rate(gpu: str) -> float:
    """The catalog's NVLink bandwidth per GPU and direction, bytes/s."""
    return catalog.get_gpu(gpu).tiers[0].bandwidth_bytes_per_s


def affine(points: list[tuple[float, float]], op: str, n: int, line: float) -> tuple[float, float]:
    """(a seconds, eta) of t = a + W / (eta x line) over the points of FIT_FROM bytes or more,
    least squares on the relative error."""
    big = [(s, t) for s, t in points if s >= FIT_FROM]
    wire = np.array([OPS[op][1](n) * s for s, _ in big])
    t = np.array([t for _, t in big])
    design = np.stack([np.ones_like(wire), wire], axis=1) / t[:, None]
    a, b = np.linalg.lstsq(design, np.ones_like(t), rcond=None)[0]
    return float(a), float(1.0 / (b * line))


def family(gpu: str) -> str:
    family = nccl_shares.family(resolve_cluster(ClusterSection(gpu=gpu, num_gpus=8), None))
    assert family is not None, gpu
    return family


def steps(cls: str, n: int) -> int:
    """Ring steps whose catalog latency the model charges (`comms.ring_latency` and kin)."""
    return 2 * (n - 1) if cls == "all_reduce" else n - 1


FAMILIES = ("blackwell", "hopper", "ampere")
CLASSES = ("ring", "all_reduce", "all_to_all")


def derive(
    rows: dict[Key, list[tuple[float, float]]], verbose: bool = False
) -> tuple[dict[tuple[str, str, int], float], dict[str, float]]:
    """The fit's results: eta's median per (family, class, ranks) and the call cost's median per
    class (seconds), on each GPU's newest NCCL; `verbose` prints each series' fit."""
    etas: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    calls: dict[str, list[float]] = defaultdict(list)
    for (gpu, version, op, n), points in sorted(rows.items()):
        if version != NEWEST.get(gpu, "2.29.2"):
            continue
        a, eta = affine(points, op, n, line_rate(gpu))
        cls = OPS[op][0]
        alpha = catalog.get_gpu(gpu).tiers[0].latency_us * 1e-6
        etas[(family(gpu), cls, n)].append(eta)
        calls[cls].append(a - steps(cls, n) * alpha)
        if verbose:
            print(f"  {gpu:16s} {op:15s} {n}  eta {eta:.3f}  a {a * 1e6:5.1f}")
    return (
        {key: statistics.median(v) for key, v in etas.items()},
        {cls: statistics.median(v) for cls, v in calls.items()},
    )


def fit(rows: dict[Key, list[tuple[float, float]]]) -> None:
    print("per system (newest NCCL), sizes >= 4 MiB: eta / a (us)")
    etas, calls = derive(rows, verbose=True)
    print(
        "\nNCCL_NVLINK_SHARE (eta median / SCALEUP_BUS_EFFICIENCY "
        f"{comms.SCALEUP_BUS_EFFICIENCY}), ranks 2, 4, 8:"
    )
    for fam in FAMILIES:
        for cls in CLASSES:
            med = ", ".join(f"{etas[(fam, cls, n)]:.3f}" for n in nccl_shares.NCCL_NVLINK_RANKS)
            if cls == "all_to_all":
                print(f"  {fam:9s} {cls:10s} (not used)  eta {med}")
                continue
            shares = ", ".join(
                f"{etas[(fam, cls, n)] / comms.SCALEUP_BUS_EFFICIENCY:.3f}"
                for n in nccl_shares.NCCL_NVLINK_RANKS
            )
            print(f"  {fam:9s} {cls:10s} ({shares})   eta {med}")
    print("\nNCCL_CALL_S (median of a - steps x catalog latency):")
    for cls in CLASSES:
        unused = " (not used)" if cls == "all_to_all" else ""
        print(f"  {cls:10s} {calls[cls] * 1e6:.1f} us{unused}")


@contextmanager
def without_shares() -> Iterator[None]:
    """comms as it was before NCCL's measured shares: every share 1, no call cost."""
    shares, call = nccl_shares.NCCL_NVLINK_SHARE, nccl_shares.NCCL_CALL_S
    nccl_shares.NCCL_NVLINK_SHARE = {
        fam: {cls: (1.0, 1.0, 1.0) for cls in table} for fam, table in shares.items()
    }
    nccl_shares.NCCL_CALL_S = dict.fromkeys(call, 0.0)
    try:
        yield
    finally:
        nccl_shares.NCCL_NVLINK_SHARE, nccl_shares.NCCL_CALL_S = shares, call


def ratios(gpu: str, op: str, n: int, points: list[tuple[float, float]]) -> list[float]:
    """Model over measured time per point."""
    grp = comms.place(resolve_cluster(ClusterSection(gpu=gpu, num_gpus=8), None), 1, n)
    return [MODEL[op](s, grp) / t for s, t in points]


def stats(r: list[float], big: list[int], one: list[int], into: list[float]) -> str:
    """Model over measured at 1 MiB, and its median / worst at the `big` points, whose
    |log ratio|s go `into` the list."""
    into.extend(abs(np.log(r[i])) for i in big)
    worst = max(big, key=lambda i: abs(np.log(r[i])))
    at1 = f"{r[one[0]]:5.2f}" if one else "    -"
    return f"{at1}  {statistics.median(r[i] for i in big):5.2f} / {r[worst]:5.2f}"


def report(rows: dict[Key, list[tuple[float, float]]]) -> dict[str, list[float]]:
    """Print the model against every (gpu, version, op, ranks) series; the |log ratio|s at
    4 MiB and more by collective (reduce-scatter, all-gather and all-reduce together), now and
    without the shares."""
    print(
        f"{'gpu':16s} {'nccl':7s} {'op':15s} n   1 MiB  >=4 MiB median / worst   "
        "(without NCCL's shares: 1 MiB, median / worst)"
    )
    errs: dict[str, list[float]] = defaultdict(list)
    for (gpu, version, op, n), points in sorted(rows.items()):
        kind = "all-to-all" if op == "alltoall" else "ring and all-reduce"
        errs_now, errs_before = errs[f"{kind}, now"], errs[f"{kind}, without NCCL's shares"]
        pts = sorted(points)
        now = ratios(gpu, op, n, pts)
        with without_shares():
            before = ratios(gpu, op, n, pts)
        big = [i for i, (s, _) in enumerate(pts) if s >= FIT_FROM]
        one = [i for i, (s, _) in enumerate(pts) if s == 2**20]
        print(
            f"{gpu:16s} {version:7s} {op:15s} {n}   {stats(now, big, one, errs_now)}   "
            f"({stats(before, big, one, errs_before)})"
        )
    print()
    for name, logs in errs.items():
        pct = sorted(abs(np.expm1(e)) * 100 for e in logs)
        print(
            f"{name}: >= 4 MiB, {len(pct)} points: median |error| {statistics.median(pct):.1f}%,"
            f" 90th percentile {pct[int(0.9 * len(pct))]:.1f}%, worst {pct[-1]:.1f}%"
        )
    return errs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fit", action="store_true", help="refit the shares and call costs")
    args = parser.parse_args()
    rows = load()
    if args.fit:
        fit(rows)
        return
    report(rows)


if __name__ == "__main__":
    main()
