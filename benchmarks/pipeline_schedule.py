"""How far the cost model's closed-form pipeline time is from the schedule Megatron-LM runs.

    python benchmarks/pipeline_schedule.py [--verbose]

planner.model.cost prices a step's pipeline as m x max(t) + (sum(t) - max(t)) / vpp
(planner.model.schedule, the search's hot path), plus, when interleaved, the exposed point-to-point
hops (schedule.interleaved_p2p_exposed). planner.model.schedule.simulate times Megatron-LM's own op
order (1F1B or interleaved, each op when its rank is free and its input is ready, an interleaved
send delaying its receiver by Performance.p2p_hop) with the same per-stage forward and backward
times (Performance.stages). The two agree exactly for equal stages (tested); this measures them on
uneven ones: every row with pp > 1 of published_runs.yaml (with a throughput figure), of the
Hagemann et al. sweep (outcome ok), and the top TOP_K layouts `planner suggest` picks for the
SUGGEST jobs (its uneven splits can leave a middle rank slowest), as the difference in step time.
Positive: the closed form is slower than the schedule (pessimistic)."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.runs import Case, cluster, load_hagemann, load_published
from planner.inputs import catalog
from planner.inputs.plan import Job
from planner.model import cost, schedule
from planner.search import top_k as search

TOP_K = 10
SUGGEST = (
    ("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 128),
    ("llama3.1-70b", "h100-sxm-80gb", 256, 8192, 512),
    ("llama3.1-405b", "h100-sxm-80gb", 16384, 8192, 2048),
    ("deepseek-v3", "h800-sxm-80gb", 2048, 4096, 15360),
    ("mixtral-8x7b", "a100-sxm-80gb", 64, 4096, 1024),
)
"""(model, gpu, GPUs, sequence, global batch): the search-speed jobs and two more."""


def suggested() -> list[Case]:
    """The top TOP_K layouts of each SUGGEST job, as cases (no measurement)."""
    out = []
    for model, gpu, n, seq, gbs in SUGGEST:
        job = Job(
            arch=catalog.get_model(model),
            cluster=cluster(gpu, n),
            seq_length=seq,
            global_batch_size=gbs,
        )
        for k, cand in enumerate(search.search(job, top_k=TOP_K).candidates):
            out.append(Case(f"{model}-{n}-#{k + 1}", job, cand.layout, float("nan")))
    return out


def difference(c: Case) -> tuple[float, int]:
    """(closed form - simulated) / modelled step, and the slowest stage's rank."""
    perf = cost.estimate(c.job, c.layout)
    lay = c.layout
    m = lay.num_microbatches(c.job.global_batch_size)
    fwd = [f for f, _ in perf.stages]
    bwd = [b for _, b in perf.stages]
    per_mb = [f + b for f, b in perf.stages]
    closed = sum(schedule.pipeline_time(per_mb, m, lay.vpp))
    if lay.vpp > 1:  # the sends the interleaved schedule overlaps: in the sim, on its edges
        closed += perf.breakdown.pp_comm_exposed
    sched = schedule.simulate(lay.pp, m, fwd, bwd, lay.vpp, perf.p2p_hop)
    simulated = max(op.end for rank in sched for op in rank)
    return (closed - simulated) / perf.step_time_s, per_mb.index(max(per_mb))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--verbose", action="store_true", help="one line per row")
    args = ap.parse_args()
    sets = {"published": load_published(), "hagemann": load_hagemann(), "suggest": suggested()}
    print(f"{'rows':10s} {'n':>4s} {'median':>8s} {'worst +':>8s} {'worst -':>8s}  slowest stage")
    for name, cases in sets.items():
        diffs = []
        for c in cases:
            if c.layout.pp == 1:
                continue
            d, slowest = difference(c)
            where = "last" if slowest == c.layout.pp - 1 else f"rank {slowest}"
            diffs.append((d, where))
            if args.verbose:
                print(f"  {c.id:40s} {c.layout.describe():50s} {d:+.2%}  slowest: {where}")
        if not diffs:
            print(f"{name:10s}    0")
            continue
        values = [d for d, _ in diffs]
        last = sum(1 for _, w in diffs if w == "last")
        print(
            f"{name:10s} {len(values):4d} {statistics.median(values):+8.2%} "
            f"{max(values):+8.2%} {min(values):+8.2%}  last in {last} of {len(values)}"
        )


if __name__ == "__main__":
    main()
