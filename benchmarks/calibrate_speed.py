"""How long `planner calibrate` takes on ten logs of 1,000 iterations each (target: under 2 s).

    python benchmarks/calibrate_speed.py [--repeat 3]

The logs: the ten first functional-test runs on H100 of benchmarks/calibration_loo.py (real
arguments blocks and memory lines), each stretched to 1,000 iteration lines (log interval 1:
the golden step times repeated in order), written to a temporary folder. Timed: the whole
process (`python -m planner calibrate LOG... --gpu h100-sxm-80gb --out FILE`, best of
`--repeat`), and the same for `python -m planner --version` (the whole command line's start-up),
so that a slow machine shows as a ratio; then, in this process, reading and fitting apart.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.calibration_loo import _golden, log_of
from benchmarks.functional_steps import load_functional_steps
from benchmarks.functional_tests import load_cases
from planner.calibration.fit import fit
from planner.calibration.measured import read_runs

GPU = "h100-sxm-80gb"
LOGS = 10
ITERATIONS = 1000


def stretched(text: str) -> str:
    """The log with its iteration lines repeated up to ITERATIONS lines."""
    lines = text.splitlines()
    its = [i for i, line in enumerate(lines) if " iteration " in line and "elapsed" in line]
    body = [lines[i] for i in its]
    out = lines[: its[0]]
    for k in range(ITERATIONS):
        line = body[k % len(body)]
        head, _, rest = line.partition(" iteration ")
        out.append(f"{head} iteration {k + 1:8d}/{ITERATIONS:8d} |{rest.partition('|')[2]}")
    out += lines[its[-1] + 1 :]
    return "\n".join(out) + "\n"


def best_of(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    golden, commands = _golden(), {c["name"]: c for c in load_cases()}
    cases = [c for c in load_functional_steps() if c.raw["gpu"] == GPU][:LOGS]
    folder = Path(tempfile.mkdtemp(prefix="calibrate-speed-"))
    paths = []
    for i, case in enumerate(cases):
        path = folder / f"run{i}.log"
        path.write_text(stretched(log_of(case, golden, commands)))
        paths.append(path)
    size = sum(p.stat().st_size for p in paths) / 2**20
    argv = [sys.executable, "-m", "planner", "calibrate", *map(str, paths), "--gpu", GPU]
    whole = best_of([*argv, "--out", str(folder / "p.toml")], args.repeat)
    imports = best_of([sys.executable, "-m", "planner", "--version"], args.repeat)
    start = time.perf_counter()
    runs = read_runs(paths, GPU)
    read = time.perf_counter() - start
    start = time.perf_counter()
    fit(runs)
    fitted = time.perf_counter() - start
    print(f"{len(paths)} logs x {ITERATIONS} iteration lines ({size:.1f} MiB) in {folder}")
    print(f"{'whole process (planner calibrate)':40s} {whole:6.2f} s   target < 2.0 s")
    print(f"{'planner --version (start-up)':40s} {imports:6.2f} s   ratio {whole / imports:.1f}")
    print(f"{'  reading the logs (in process)':40s} {read:6.2f} s")
    print(f"{'  fitting (in process)':40s} {fitted:6.2f} s")


if __name__ == "__main__":
    main()
