"""Measured step times from MLPerf Training result logs (the numbers in runs.yaml).

    python benchmarks/data/mlperf/extract_logs.py MIRROR_DIR [MIRROR_DIR ...] > log_stats.json
    python benchmarks/data/mlperf/extract_logs.py --files LOG_TEXT [LOG_TEXT ...]

Each MIRROR_DIR is a bare git mirror of mlcommons/training_results_v<round> (the `fetch` tool puts
them under /work/.mirror/mlcommons+training_results_v*/repo). Not run by the benchmarks or tests:
it documents how runs.yaml's `measured` blocks were derived, and prints them as JSON. With
--files, each argument is a text file holding (part of) one result log, read the same way (the v6.0
entries, the NVFP4 Llama 3.1 ones included: no mirror of that round could be fetched; the ends of
its logs were read through the search tool's file reader, and only the `train_step_time` values of
those windows are used, with SKIP 0 since a window starts late in the run).

Per result file (`<submitter>/results/<system>/<benchmark>/result_*.txt`, benchmark gpt3,
llama31_405b, llama31_8b, deepseekv3_671b or gpt_oss_20b), from its `:::MLLOG` lines:
  global_batch_size, gradient_accumulation_steps, max_sequence_length, submission_platform;
  step_time_s      median of the `tracked_stats` train_step_timing / train_step_time values (the
                   training callback's wall time per optimizer step), skipping each file's first
                   SKIP of them (warm-up: the first step after init is slower);
  block_s_per_step (sum of block_stop - block_start over the file's training blocks) / (steps in
                   them, counted from the samples_count / epoch_count of the block events divided by
                   the global batch): the time between evaluations per step, which includes
                   the callbacks' own overhead and the data loader between steps.
Per system: median, min and max of the files' step_time_s, and the median block_s_per_step.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from typing import Any

BENCHMARKS = ("gpt3", "llama31_405b", "llama31_8b", "deepseekv3_671b", "gpt_oss_20b")
SKIP = 1
STEP_KEYS = ("train_step_timing", "train_step_time")


def git(mirror: str, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={mirror}", *args], check=True, capture_output=True, text=True
    ).stdout


def events(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        _, sep, tail = line.partition(":::MLLOG ")
        if sep:
            try:
                out.append(json.loads(tail))
            except json.JSONDecodeError:
                continue
    return out


def file_stats(evs: list[dict[str, Any]], skip: int = SKIP) -> dict[str, Any]:
    point = {e["key"]: e["value"] for e in evs if e["event_type"] == "POINT_IN_TIME"}
    gbs = point.get("global_batch_size")
    seq = point.get("max_sequence_length") or 1
    steps: list[float] = []
    gaps: list[float] = []
    last: tuple[float, float] | None = None
    spans, count = 0.0, 0.0
    start: dict[str, Any] | None = None
    for e in evs:
        md = e.get("metadata", {})
        if e["key"] in ("block_start", "eval_start", "eval_stop", "block_stop"):
            last = None  # intervals never span an evaluation
        if e["key"] == "block_start":
            start = e
        elif e["key"] == "block_stop" and start and gbs and "epoch_count" in md:
            spans += (e["time_ms"] - start["time_ms"]) / 1000
            count += float(md["epoch_count"]) / (gbs * seq)
        if e["key"] != "tracked_stats" or not isinstance(e["value"], dict):
            continue
        value = next((e["value"][k] for k in STEP_KEYS if k in e["value"]), None)
        if value is None:
            continue
        steps.append(float(value))
        progress = float(md.get("samples_count", md.get("step", 0)))
        if last and gbs:
            unit = gbs * seq if progress % (gbs * seq) == 0 else gbs
            n = (progress - last[1]) / unit
            if n > 0:
                gaps.append((e["time_ms"] - last[0]) / 1000 / n)
        last = (e["time_ms"], progress)
    timed = steps[skip:]
    return {
        "global_batch_size": gbs,
        "gradient_accumulation_steps": point.get("gradient_accumulation_steps"),
        "max_sequence_length": point.get("max_sequence_length"),
        "platform": point.get("submission_platform"),
        "status": next((e["metadata"].get("status") for e in evs if e["key"] == "run_stop"), None),
        "steps_timed": len(timed),
        "step_time_s": statistics.median(timed) if timed else None,
        "interval_s_per_step": statistics.median(gaps) if gaps else None,
        "block_s_per_step": spans / count if count else None,
    }


def main() -> None:
    out: dict[str, Any] = {}
    if sys.argv[1:2] == ["--files"]:
        for path in sys.argv[2:]:
            with open(path) as f:
                out[path] = file_stats(events(f.read()), skip=0)
        json.dump(out, sys.stdout, indent=1)
        return
    for mirror in sys.argv[1:]:
        commit = git(mirror, "rev-parse", "HEAD").strip()
        names = git(mirror, "ls-tree", "-r", "--name-only", "HEAD").splitlines()
        systems: dict[str, list[str]] = defaultdict(list)
        for n in names:
            parts = n.split("/")
            is_log = len(parts) == 5 and parts[4].startswith("result_") and n.endswith(".txt")
            if is_log and parts[1] == "results" and parts[3] in BENCHMARKS:
                systems["/".join(parts[:4])].append(n)
        for sysdir, files in sorted(systems.items()):
            per = [file_stats(events(git(mirror, "show", f"HEAD:{f}"))) for f in sorted(files)]
            times = [p["step_time_s"] for p in per if p["step_time_s"]]
            blocks = [p["block_s_per_step"] for p in per if p["block_s_per_step"]]
            gaps = [p["interval_s_per_step"] for p in per if p["interval_s_per_step"]]
            out[f"{mirror}::{sysdir}"] = {
                "commit": commit,
                "logs": sorted(files),
                "files": per,
                "step_time_s": {
                    "median": statistics.median(times) if times else None,
                    "min": min(times, default=None),
                    "max": max(times, default=None),
                    "n_logs": len(times),
                },
                "interval_s_per_step_median": statistics.median(gaps) if gaps else None,
                "block_s_per_step": {
                    "median": statistics.median(blocks) if blocks else None,
                    "min": min(blocks, default=None),
                    "max": max(blocks, default=None),
                    "n_logs": len(blocks),
                },
            }
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
