"""Does `planner suggest` find layouts at least as good as the ones published runs used?

    python benchmarks/plan_quality.py

For each run of benchmarks/data/published_runs.yaml with a throughput figure (mapped to planner
inputs by benchmarks/runs.py): search that run's model, GPU, GPU count, sequence length and global
batch with every dimension open, in a space that admits the published layout (its context-parallel
degree and micro-batch within the bounds, TP across nodes if it went there, and TP communication
overlap as the run had it: the framework features are the run's, the layout is the planner's).
Three conditions per run:

  in space   the published layout is one the search enumerates: its degrees pass the structural
             rules, its (micro-batch, vpp, split) is an option of its structure, its ZeRO stage
             and recompute are searched. Two settings count through a twin the search keeps
             instead, when the twin is checked here to predict no slower and no bigger: ZeRO 0
             (Megatron DDP) through ZeRO 1 (same traffic, sharded optimizer), and sequence
             parallelism off with tp > 1 (2021-22 Megatron) through SP on (the search turns it on
             whenever tp > 1: same TP bytes, the replicated activations and their elementwise
             work split by tp). Marked "twin" in the table.
  feasible   planner.search.rules accepts it and planner.model.memory says it fits
  top >= pub the top pick's predicted tokens/s/GPU is at least the published layout's prediction

The table also prints what the run measured (the cost model's fidelity against it is
benchmarks/fidelity.py's business, not this one's). Exit 0 regardless; the summary line and the
notes say which rows fail which condition and why.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.runs import Case, load_published
from planner.inputs import units
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.search import rules
from planner.search import space as space_mod
from planner.search import top_k as search
from planner.search.space import Bound, Space, Structure, options

TOLERANCE = 1e-9
"""Relative slack on 'top pick predicts at least the published layout' (float round-off)."""


def space_for(job: Job, lay: Layout) -> Space:
    """The default space, widened where the published layout needs it."""
    domain = job.cluster.tiers[0].span_gpus or job.cluster.num_gpus
    return Space(
        cp=Bound(1, max(space_mod.MAX_CP, lay.cp)),
        mbs=Bound(1, max(space_mod.MAX_MICRO_BATCH, lay.micro_batch_size)),
        tp_across_nodes=lay.tp > domain,
        tp_comm_overlap=lay.tp_comm_overlap,
    )


def twin(space: Space, lay: Layout) -> Layout:
    """The layout the search keeps in place of this one: ZeRO 1 for ZeRO 0 (when both are
    allowed) and sequence parallelism (with the space's TP overlap) whenever tp > 1."""
    sp = lay.tp > 1
    zero = 1 if lay.zero_stage == 0 and 1 in space.zero_stages else lay.zero_stage
    return lay.with_(
        zero_stage=zero, sequence_parallel=sp, tp_comm_overlap=sp and space.tp_comm_overlap
    )


def twin_dominates(job: Job, space: Space, lay: Layout, tw: Layout) -> list[str]:
    """Why the twin is not a stand-in (empty: it predicts no slower and needs no more memory)."""
    why = []
    if cost.estimate(job, tw).step_time_s > cost.estimate(job, lay).step_time_s:
        why.append("twin predicts slower")
    if (
        memory.estimate(job, tw, space.headroom_pct).peak
        > memory.estimate(job, lay, space.headroom_pct).peak
    ):
        why.append("twin needs more memory")
    return why


def not_in_space(job: Job, space: Space, lay: Layout) -> list[str]:
    """Why the search does not enumerate this layout (empty: it does)."""
    why = []
    s = Structure(lay.tp, lay.cp, lay.pp, lay.dp, lay.ep, lay.expert_tp, lay.cp_comm_type)
    rejected: Counter[str] = Counter()
    if s not in space_mod.structures(job, space, rejected):
        rule = space_mod._structure_rule(job, space, s)
        why.append(f"structure rejected ({rule or 'not enumerated'})")
    elif (lay.micro_batch_size, lay.vpp, lay.pipeline_layers) not in options(job, space, s):
        why.append(f"mbs{lay.micro_batch_size}/vpp{lay.vpp}/split not an option")
    if lay.zero_stage not in space.zero_stages:
        why.append(f"zero {lay.zero_stage} not searched")
    if lay.recompute not in space.recompute:
        why.append(f"recompute {lay.recompute} not searched")
    if lay.sequence_parallel != (lay.tp > 1):
        why.append(f"sequence_parallel {'on' if lay.sequence_parallel else 'off'} with tp{lay.tp}")
    elif lay.tp_comm_overlap != (lay.sequence_parallel and space.tp_comm_overlap):
        why.append("tp_comm_overlap differs")
    return why


def not_feasible(job: Job, lay: Layout, space: Space) -> list[str]:
    why = [f"rule {v.rule}" for v in rules.violations(job, lay)]
    if not why:
        rep = memory.estimate(job, lay, space.headroom_pct)
        if not rep.fits:
            why.append(
                f"memory {units.gib(rep.peak):.1f} GiB > {units.gib(rep.capacity):.1f} GiB "
                f"(stage {rep.worst.stage})"
            )
    return why


@dataclass
class Row:
    case: Case
    in_space: list[str]
    twin: str
    """What the twin changes ('' when the published layout itself is in the space)."""
    feasible: list[str]
    published_pred: float
    top: search.Candidate | None
    seconds: float

    @property
    def top_pred(self) -> float:
        return self.top.performance.tokens_per_s_per_gpu if self.top else 0.0

    @property
    def ratio(self) -> float:
        return self.top_pred / self.published_pred

    @property
    def top_ok(self) -> bool:
        return self.top is not None and self.ratio >= 1 - TOLERANCE


def evaluate(case: Case) -> Row:
    job, lay = case.job, case.layout
    space = space_for(job, lay)
    t0 = time.perf_counter()
    res = search.search(job, space, top_k=1)
    seconds = time.perf_counter() - t0
    tw = twin(space, lay)
    changes = []
    if tw.zero_stage != lay.zero_stage:
        changes.append("zero 0->1")
    if tw.sequence_parallel != lay.sequence_parallel:
        changes.append("sp off->on")
    why = not_in_space(job, space, tw)
    if changes and not why:
        why = twin_dominates(job, space, lay, tw)
    return Row(
        case=case,
        in_space=why,
        twin=", ".join(changes),
        feasible=not_feasible(job, lay, space),
        published_pred=cost.estimate(job, lay).tokens_per_s_per_gpu,
        top=res.candidates[0] if res.candidates else None,
        seconds=seconds,
    )


def _short(lay: Layout) -> str:
    parts = [f"tp{lay.tp}", f"pp{lay.pp}", f"dp{lay.dp}"]
    parts += [f"{k}{getattr(lay, k)}" for k in ("cp", "ep", "vpp") if getattr(lay, k) > 1]
    if lay.expert_tp != lay.tp:
        parts.append(f"etp{lay.expert_tp}")
    parts.append(f"mbs{lay.micro_batch_size}")
    parts.append(f"z{lay.zero_stage}")
    parts.append({"none": "-", "selective": "sel", "full": "full"}[lay.recompute])
    if lay.sequence_parallel:
        parts.append("sp")
    if lay.pipeline_layers:
        pl = lay.pipeline_layers
        parts.append(f"split{pl[0]}/{pl[1]}/{pl[-1]}" if len(pl) > 2 else f"split{pl}")
    return " ".join(parts)


def _space_mark(r: Row) -> str:
    if r.in_space:
        return "NO"
    return "twin" if r.twin else "yes"


def main() -> None:
    cases = load_published(with_throughput=True)
    rows = []
    head = (
        f"{'run':40s} {'published layout':36s} {'space':5s} {'feas':4s} {'top pick':40s} "
        f"{'top tok/s':>9s} {'pub tok/s':>9s} {'ratio':>6s} {'measured':>8s} {'search':>6s}"
    )
    print(head)
    print("-" * len(head))
    for case in cases:
        r = evaluate(case)
        rows.append(r)
        print(
            f"{case.id:40s} {_short(case.layout):36s} {_space_mark(r):5s} "
            f"{'yes' if not r.feasible else 'NO':4s} "
            f"{_short(r.top.layout) if r.top else '(nothing fits)':40s} "
            f"{r.top_pred:9,.0f} {r.published_pred:9,.0f} "
            f"{r.ratio:6.2f}{'' if r.top_ok else '!'} {case.tokens_per_s_per_gpu:8,.0f} "
            f"{r.seconds:5.2f}s"
        )
    n = len(rows)
    in_space = sum(not r.in_space for r in rows)
    feasible = sum(not r.feasible for r in rows)
    top_ok = sum(r.top_ok for r in rows)
    all_three = sum(not r.in_space and not r.feasible and r.top_ok for r in rows)
    ratios = sorted(r.ratio for r in rows if r.top)
    print(
        f"\n{n} published runs: published layout in the search space {in_space}/{n}, judged "
        f"feasible {feasible}/{n}, top pick predicts >= the published layout {top_ok}/{n}; "
        f"all three {all_three}/{n}. Top / published prediction: median "
        f"{ratios[len(ratios) // 2]:.2f}, min {ratios[0]:.2f}, max {ratios[-1]:.2f}. "
        f"Search {sum(r.seconds for r in rows):.1f} s in all, slowest "
        f"{max(r.seconds for r in rows):.2f} s."
    )
    failing = [r for r in rows if r.in_space or r.feasible or not r.top_ok]
    if failing:
        print("\nRows failing a condition:")
        for r in failing:
            why = []
            if r.in_space:
                why.append("not in space: " + "; ".join(r.in_space))
            if r.feasible:
                why.append("not feasible: " + "; ".join(r.feasible))
            if not r.top_ok:
                why.append(f"top pick predicts {r.ratio:.3f} x the published layout")
            print(f"  {r.case.id}: " + " | ".join(why))
    twins = Counter(r.twin for r in rows if r.twin and not r.in_space)
    if twins:
        counts = ", ".join(f"{k}: {v}" for k, v in twins.most_common())
        print(
            f"\nIn the space through a twin that predicts no slower and no bigger ({counts}): "
            f"{sum(twins.values())} runs."
        )


if __name__ == "__main__":
    main()
