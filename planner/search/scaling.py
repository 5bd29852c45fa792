"""Scaling curve: the best layout at each GPU count, and where adding GPUs stops paying.

`scale(job, sizes, best_layout, ...)` plans the job at each size with `best_layout` (by default
`planner suggest`'s own search, `planner.search.suggest.search_rows`, its fastest row: for a
torchtitan job over the `[torchtitan]` settings too) and reports, per size: tokens/s, effective
tokens/s (x goodput, `planner.ops`), per-GPU efficiency against the smallest size that has a
layout, cost per million tokens and days to the token budget. A size at which the job makes no
progress (failures far more often than its restarts and checkpoints take,
`planner.ops.resilience.NoProgress`) is a point with a note, as a size where no layout fits is
and one where no layout runs the job's settings (`scale`: a setting its GPU count does not
divide, say); only where no size makes progress is that an error.

The global batch (sequences per step) is held fixed, as in the plan: more GPUs mean fewer
micro-batches per pipeline or smaller micro-batches, so the pipeline bubble and the exposed
communication grow. Failures grow with the GPU count too (MTBF = 1 / (rate x N)).

Definitions (effective = with checkpoints and failures, `planner.ops.resilience`):
    efficiency(N)          = effective tokens/s/GPU at N / that at the smallest size N0
    marginal efficiency(N) = (effective tokens/s(N) - effective tokens/s(N')) / (N - N')
                             / effective tokens/s/GPU at N0, N' the previous size
Adding GPUs "stops paying" at the first size whose marginal efficiency is below `threshold`
(default 0.5: each added GPU buys less than half of what a GPU did at N0). Where efficiency rises
with more GPUs the note names the layout change that causes it (the search switched, e.g.,
pp 8->4 or mbs 1->2, because the larger size made another layout possible or better).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pydantic import ValidationError

from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.torchtitan import TorchtitanSection
from planner.model.performance import Performance
from planner.model.stage_activations import ACTIVATION_PARTS
from planner.model.stage_time import LAYER_TIMES
from planner.ops import operations as ops
from planner.ops.assumptions import OpsParams
from planner.ops.resilience import NoProgress
from planner.search import rules, suggest
from planner.search.job_checks import sized_note
from planner.search.space import Space
from planner.search.titan_variants import candidate_job, changed
from planner.search.top_k import Candidate

Found = tuple[Layout, Performance] | Candidate
"""A layout and its performance, or a search's candidate (a torchtitan one with the
`[torchtitan]` settings it runs under)."""

BestLayout = Callable[[Job], Found | None]
"""Plans one job: what it found best, or None when nothing fits."""

NO_FIT = "no layout fits"
"""The note of a size where layouts run the job's settings but none fits memory."""

STOPS_PAYING_THRESHOLD = 0.5
"""Marginal efficiency below which added GPUs are said to stop paying."""

RISE_TOLERANCE = 0.005
"""Efficiency must rise by more than this (relative) for the note to explain the rise."""


def check_threshold(threshold: float, name: str = "threshold") -> None:
    """The stops-paying threshold is a marginal efficiency: in (0, 1]."""
    if not 0 < threshold <= 1:
        raise InputError(f"{name}: must be in (0, 1] (got {threshold})")


def job_at(job: Job, num_gpus: int) -> Job:
    """The same job on `num_gpus` GPUs of the same kind (the cluster re-validated)."""
    try:
        cluster = ClusterSpec.model_validate({**dict(job.cluster), "num_gpus": num_gpus})
    except (ValidationError, ValueError) as e:
        raise InputError(f"num_gpus: {num_gpus} GPUs: {e}") from None
    out = replace(job, cluster=cluster)
    if not job.pools:
        # a rank's activations but what reads its micro-batches or expert parallelism read the
        # model and the training code, never the cluster (`stage_activations.remembered_parts`):
        # every size shares them, as the layouts of its size's dp alike
        ACTIVATION_PARTS.share(out, job)
    if not job.pools and same_placement(job.cluster, cluster):
        # one layer's time reads the cluster's GPU, clocks, HBM, link tiers and where its groups
        # lie (`planner.model.placement`), never the number of GPUs otherwise: sizes that place
        # alike share the layer-time memo (tests/search/test_scaling_memo.py)
        LAYER_TIMES.share(out, job)
    return out


def same_placement(a: ClusterSpec, b: ClusterSpec) -> bool:
    """Whether every group of a layout lies alike on both clusters: the same spans in ranks
    (`ClusterSpec.placement_spans`, which reads the GPU count: `domain_used`) and both GPU
    counts multiples of the largest finite one. `placement.every_split` places one period,
    lcm(block, largest span), of a job's groups; a group's block divides the GPU count, so with
    the span dividing it too the period is the same whole one on both sizes."""
    spans = a.placement_spans
    if spans != b.placement_spans:
        return False
    finite = [s for s in spans if s is not None]
    return not finite or (a.num_gpus % finite[-1] == 0 and b.num_gpus % finite[-1] == 0)


def search_best_layout(space: Space | None = None) -> BestLayout:
    """`planner suggest`'s first row (`planner.search.suggest.search_rows`, by step time: for a
    torchtitan job over its `[torchtitan]` settings too), or None when nothing fits. Without a
    `space`, suggest's own without options: `Space(framework=job.framework)`."""

    def best(job: Job) -> Candidate | None:
        res, _ = suggest.search_rows(job, space or Space(framework=job.framework), 1)
        return res.candidates[0] if res.candidates else None

    return best


def resolved(job: Job, found: Found) -> tuple[Job, Layout, Performance]:
    """The job the layout runs (a torchtitan candidate's own settings: `candidate_job`), the
    layout and its performance."""
    if isinstance(found, Candidate):
        return candidate_job(job, found), found.layout, found.performance
    return job, *found


# ----------------------------------------------------------------------------- the curve


@dataclass(frozen=True)
class ScalePoint:
    num_gpus: int
    layout: Layout | None
    performance: Performance | None
    operations: ops.Operations | None
    efficiency: float | None = None
    """Effective tokens/s/GPU relative to the smallest size with a layout."""
    marginal_efficiency: float | None = None
    """Effective tokens/s gained per added GPU, relative to a GPU's at the smallest size."""
    note: str = ""
    titan: TorchtitanSection | None = None
    """The `[torchtitan]` settings the search chose for the layout (None: not torchtitan)."""

    @property
    def feasible(self) -> bool:
        return self.layout is not None and self.operations is not None


@dataclass(frozen=True)
class ScaleCurve:
    job: Job
    points: tuple[ScalePoint, ...]
    tokens: int | None
    threshold: float
    stops_paying_at: int | None
    """The first GPU count whose marginal efficiency is below threshold (None: never)."""

    @property
    def baseline(self) -> ScalePoint | None:
        return next((p for p in self.points if p.feasible), None)


_CHANGE_FIELDS: tuple[tuple[str, str], ...] = (
    ("tp", "tp"),
    ("pp", "pp"),
    ("cp", "cp"),
    ("ep", "ep"),
    ("etp", "etp"),
    ("vpp", "vpp"),
    ("micro_batch_size", "mbs"),
    ("zero_stage", "zero"),
    ("recompute", "recompute"),
    ("recompute_modules", "recompute modules"),
    ("recompute_method", "recompute method"),
    ("recompute_num_layers", "recompute layers"),
    ("recompute_every", "recompute every"),
    ("cpu_offloading_num_layers", "offload"),
    ("offload_modules", "offload modules"),
    ("activation_offload_fraction", "offload fraction"),
    ("moe_token_dispatcher_type", "dispatcher"),
    ("moe_flex_dispatcher_backend", "flex backend"),
    ("moe_flex_dispatcher_num_sms", "dispatcher SMs"),
    ("cp_comm_type", "cp-comm-type"),
    ("microbatch_group_size_per_vp_stage", "vp group"),
    ("overlap_p2p_comm", "p2p-overlap"),
    ("dp_pools", "dp pools"),
    ("sequence_parallel", "sp"),
    ("tp_comm_overlap", "tp-comm-overlap"),
    ("ep_comm_overlap", "ep-comm-overlap"),
    ("moe_shared_expert_overlap", "shared-expert-overlap"),
    ("overlap_grad_reduce", "overlap-grad-reduce"),
    ("overlap_param_gather", "overlap-param-gather"),
    ("ddp_bucket_size", "ddp-bucket-size"),
    ("ddp_num_buckets", "ddp-num-buckets"),
    ("fsdp_double_buffer", "fsdp-double-buffer"),
    ("fsdp_max_pool", "fsdp-max-pool"),
    ("suggested_communication_unit_size", "fsdp-unit-size"),
    ("defer_embedding_wgrad_compute", "defer-embedding-wgrad"),
    ("wgrad_deferral_limit", "wgrad-deferral-limit"),
    ("use_tp_pp_dp_mapping", "tp-pp-dp order"),
    ("use_torch_fsdp2", "torch-fsdp2"),
    ("torch_fsdp2_reshard_after_forward", "torch-fsdp2-reshard"),
    ("pipeline_layers", "pipeline split"),
)
"""Every Layout field but dp, by the name `layout_change` gives it (pipeline_layers stands for the
whole split: its layout string and embedding / loss accounting too)."""

_DETAIL_OF = {
    "recompute_modules": "recompute",
    "recompute_method": "recompute",
    "recompute_num_layers": "recompute",
    "recompute_every": "recompute",
    "moe_flex_dispatcher_backend": "moe_token_dispatcher_type",
    "moe_flex_dispatcher_num_sms": "moe_token_dispatcher_type",
}
"""Fields not named where the field they detail changed too ('recompute none->full' says it)."""


def layout_change(prev: Layout, cur: Layout, moe: bool = True) -> str:
    """The fields that differ besides dp, e.g. 'pp 8->4, mbs 1->2'; 'dp only (dp 8->16)' when
    nothing else changed. Expert degrees are compared only for MoE models (`moe`)."""
    parts = []
    for attr, name in _CHANGE_FIELDS:
        a, b = getattr(prev, attr), getattr(cur, attr)
        if attr == "pipeline_layers":  # the whole split: layers, layout string, accounting
            a, b = prev.split_key()[2:], cur.split_key()[2:]
        if a == b or (not moe and attr in ("ep", "etp")):
            continue
        parent = _DETAIL_OF.get(attr)
        if parent is not None and getattr(prev, parent) != getattr(cur, parent):
            continue
        if attr == "pipeline_layers":
            shape = {True: "even", False: "uneven"}
            was, now = shape[prev.even_split], shape[cur.even_split]
            parts.append(f"{name} {was}->{now}" if was != now else f"{name} changed")
        elif isinstance(a, bool):
            parts.append(f"{name} {'on' if b else 'off'}")
        elif isinstance(a, tuple) or isinstance(b, tuple):
            parts.append(f"{name} {_listed(a)}->{_listed(b)}")
        else:
            parts.append(f"{name} {a}->{b}")
    if not parts:
        return f"dp only (dp {prev.dp}->{cur.dp})"
    return ", ".join(parts)


def _listed(value: object) -> str:
    """A tuple field as 'a,b' ('none' when empty)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def titan_change(prev: TorchtitanSection | None, cur: TorchtitanSection | None) -> str:
    """', reshard default->never, hsdp 1->2': the searched `[torchtitan]` settings that changed
    (`titan_variants.changed`), '' where none did."""
    if prev is None or cur is None:
        return ""
    return "".join(f", {name} {old}->{new}" for name, old, new in changed(prev, cur))


def scale(
    job: Job,
    sizes: list[int],
    best_layout: BestLayout | None = None,
    tokens: int | None = None,
    ops_params: OpsParams | None = None,
    threshold: float = STOPS_PAYING_THRESHOLD,
) -> ScaleCurve:
    """Plan `job` at each size in `sizes` (ascending) and compare them. A size no layout of
    which runs the job's settings is a point with a note saying why, searched for none: a rule
    the job breaks on its own (`rules.job_violations`, every size alike: the `scale` command
    refuses such a job first, `job_checks.check_job`), or a setting that must divide a
    data-parallel size and does not divide the size's GPU count (`job_checks.sized_note`:
    Megatron's optimizer_instances, torchtitan's dp_replicate); a size where none fits memory
    says "no layout fits" (`NO_FIT`)."""
    if not sizes:
        raise InputError("num_gpus: no GPU counts given")
    check_threshold(threshold)
    best_layout = best_layout or search_best_layout()
    ops_params = ops_params or OpsParams()
    if tokens is not None:
        ops.training_steps(job, tokens)  # a budget below one step is bad input at every size
    # a rule the job itself breaks refuses every size alike: say which, and search none
    broken = "; ".join(f"{v.field}: {v.message}" for v in rules.job_violations(job))
    raw: list[ScalePoint] = []
    stalled: list[NoProgress] = []
    for n in sorted(set(sizes)):
        j = job_at(job, n)
        refused = f"no layout runs: {broken}" if broken else sized_note(j)
        found = None if refused else best_layout(j)
        if found is None:
            raw.append(ScalePoint(n, None, None, None, note=refused or NO_FIT))
            continue
        runs, lay, perf = resolved(j, found)
        titan = runs.titan if runs.framework == "torchtitan" else None
        try:
            o = ops.operations(runs, perf, tokens, ops_params, lay.zero_stage)
        except NoProgress as e:  # this size only: more GPUs, more interruptions
            stalled.append(e)
            raw.append(ScalePoint(n, lay, perf, None, note=e.problem, titan=titan))
            continue
        raw.append(ScalePoint(n, lay, perf, o, titan=titan))
    if stalled and not any(p.feasible for p in raw):
        raise stalled[0]  # no size makes progress: the settings are the problem
    points, stops_at = _compare(raw, threshold, job.arch.is_moe)
    return ScaleCurve(
        job=job, points=tuple(points), tokens=tokens, threshold=threshold, stops_paying_at=stops_at
    )


def _compare(
    raw: list[ScalePoint], threshold: float, moe: bool
) -> tuple[list[ScalePoint], int | None]:
    """Each feasible point's efficiency and marginal efficiency against the first feasible one,
    its notes, and the first size whose marginal efficiency is below `threshold`."""
    points: list[ScalePoint] = []
    base_n, per_gpu0 = 0, 0.0  # the baseline's GPUs and effective tokens/s/GPU
    prev: ScalePoint | None = None  # the previous feasible point, compared
    stops_at: int | None = None
    for p in raw:
        if p.operations is None or p.layout is None:
            points.append(p)
            continue
        tps = p.operations.effective_tokens_per_s
        if prev is None:
            base_n, per_gpu0 = p.num_gpus, tps / p.num_gpus
            prev = replace(p, efficiency=1.0)
            points.append(prev)
            continue
        assert prev.operations is not None and prev.layout is not None
        assert prev.efficiency is not None
        eff = tps / p.num_gpus / per_gpu0
        gained = tps - prev.operations.effective_tokens_per_s
        marginal = gained / (p.num_gpus - prev.num_gpus) / per_gpu0
        notes = []
        if eff > prev.efficiency * (1 + RISE_TOLERANCE):
            change = layout_change(prev.layout, p.layout, moe) + titan_change(prev.titan, p.titan)
            notes.append(f"efficiency up {prev.efficiency:.0%}->{eff:.0%}: {change}")
        if stops_at is None and marginal < threshold:
            stops_at = p.num_gpus
            what = (
                f"buys {marginal:.0%} of a GPU at {base_n}"
                if marginal >= 0
                else f"loses {-marginal:.0%} of a GPU at {base_n} (throughput falls)"
            )
            notes.append(f"stops paying: each GPU added since {prev.num_gpus} {what}")
        elif gained < 0:  # past where it stopped paying, a size that is slower outright
            notes.append(f"throughput falls: fewer tokens/s than at {prev.num_gpus:,} GPUs")
        prev = replace(p, efficiency=eff, marginal_efficiency=marginal, note="; ".join(notes))
        points.append(prev)
    return points, stops_at
