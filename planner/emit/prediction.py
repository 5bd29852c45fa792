"""The prediction a launch file's header states, and the operations figures in sentences.

`predict` runs planner.model.cost, planner.model.memory and planner.ops on a plan once; `header`
turns it into the lines every launch file starts with (the plan's predicted step time,
tokens/s/GPU and peak memory against its GPUs' usable memory, and the planner version; where the
target launches the plan otherwise than written, the plan's own figures too: `planned_figures`);
`summary_lines` says the operations figures (cost, checkpoints, goodput) in sentences, for
headers and `explain`. Each emitter of `planner.emit` calls `predict` once in its `render`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from planner import __version__
from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.job import Job
from planner.inputs.layout import Layout
from planner.inputs.plan import Plan
from planner.inputs.pools import node_tiers
from planner.inputs.units import (
    GIB,
    against,
    format_amount,
    format_bytes,
    format_duration,
    format_money,
    format_si,
    format_tokens,
)
from planner.model import cost, memory
from planner.ops.assumptions import AssumptionError
from planner.ops.operations import Operations, operations

HEADROOM = memory.DEFAULT_HEADROOM_PCT
"""The headroom (percent) a launch judges its plan at where none is given: `check`'s default."""


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    mfu_text: str
    """`Performance.mfu_text`: against the bf16 peak, and the FP8 / FP4 one for such a job."""
    peak_gib: float
    capacity_gib: float
    worst_stage: int
    fits: bool
    """Whether the peak is within `capacity_gib`, the GPU's memory less `headroom_pct`."""
    operations: list[str]
    """planner.ops figures in sentences (checkpoint size and interval, goodput) for this plan."""
    checkpoint_interval_steps: int
    """Daly's optimum checkpoint interval in steps (the default --save-interval)."""
    expandable_peak_gib: float | None = None
    """The peak under the expandable segments `environment` exports for a plan that does not
    count them (`exports_expandable`): what reading the script back predicts; None otherwise."""
    headroom_pct: float = HEADROOM
    """The headroom `capacity_gib` and `fits` are judged at: the one `launch --headroom` got."""


def exports_expandable(plan: Plan) -> bool:
    """Whether `environment` exports PyTorch's expandable segments for a plan whose memory is
    counted without them (training.expandable_segments false): NVIDIA, below ZeRO 2, Megatron
    (torchtitan's scripts export them only where the plan counts them: `torchtitan_run`)."""
    job = plan.job
    exports = job.cluster.gpu.vendor == "nvidia" and job.framework == "megatron"
    return exports and plan.require_layout().zero_stage < 2 and not job.expandable_segments


def predict(plan: Plan, headroom_pct: float = HEADROOM) -> Prediction:
    """planner.model.cost, planner.model.memory and planner.ops on the plan, as the header
    reports them, its memory judged at `headroom_pct` (the headroom the plan is launched with,
    as `launch`'s stderr warning judges it). Each emitter's `render` calls this once and hands
    the result to `header` and to whatever else needs it (the default checkpoint interval)."""
    lay = plan.require_layout()
    perf = cost.estimate(plan.job, lay)
    rep = memory.estimate(plan.job, lay, headroom_pct)
    try:
        o = operations(plan.job, perf, None, zero_stage=lay.zero_stage)
    except AssumptionError as e:  # the header's checkpoint interval and goodput need them
        where = str(plan.path) if plan.path else "<plan>"
        raise InputError(
            f"{where}: {e} (under planner's default operations assumptions, which set the "
            "launch file's checkpoint interval; `planner explain PLAN --tokens N` shows them)"
        ) from None
    return Prediction(
        step_time_s=perf.step_time_s,
        tokens_per_s_per_gpu=perf.tokens_per_s_per_gpu,
        mfu=perf.mfu,
        mfu_text=perf.mfu_text(),
        peak_gib=rep.peak / GIB,
        capacity_gib=rep.capacity / GIB,
        worst_stage=rep.worst.stage,
        fits=rep.fits,
        operations=summary_lines(o),
        checkpoint_interval_steps=o.resilience.interval_steps,
        expandable_peak_gib=(
            memory.estimate(replace(plan.job, expandable_segments=True), lay).peak / GIB
            if exports_expandable(plan)
            else None
        ),
        headroom_pct=headroom_pct,
    )


def header(plan: Plan, target: str, job_name: str, p: Prediction) -> list[str]:
    """The lines (without '# '; `comment_block` makes them safe comments) every launch file
    starts with; `p` is `predict(plan, headroom_pct)`, whose headroom the memory line names
    where it is not `HEADROOM` (check's default)."""
    lay = plan.require_layout()
    job = plan.job
    peak, cap = against(p.peak_gib * GIB, p.capacity_gib * GIB)
    source = plan.path.name if plan.path is not None else "<inline plan>"
    gpus = f"{job.cluster.num_gpus} x {job.cluster.gpu.name}"
    if job.pools:  # heterogeneous pools, in pipeline order
        gpus = " + ".join(
            f"{p.cluster.num_gpus} x {p.cluster.gpu.name} ({p.name})" for p in job.pools
        )
    return [
        f"planner {__version__}: {target} launch file for job {job_name!r} from {source}",
        f"model {job.arch.name} on {gpus}, "
        f"seq {job.seq_length}, global batch {job.global_batch_size}, {job.precision_text}",
        f"layout: {lay.describe()}",
        f"predicted: step {p.step_time_s:.3f} s, {p.tokens_per_s_per_gpu:.1f} tokens/s/GPU, "
        f"{p.mfu_text}, peak memory {peak} GiB of {cap} GiB "
        f"usable{_headroom_text(p)} ({_verdict(p.fits, p.worst_stage)}){_expandable_text(p)}",
        *(f"plan as written: {own}{PLANNED}" for _, own in planned_figures(plan, p.headroom_pct)),
        *(f"operations: {line}" for line in p.operations),
        *overrides_lines(plan),
    ]


OVERRIDES = (
    "cluster overrides the prediction rests on (the plan's [cluster]; this file does not carry "
    "them, and reading it back with --gpu {gpu} takes the catalog's figures)"
)
"""The header's lead-in to the plan's overrides of its catalog GPU (`overrides_lines`)."""


def cluster_overrides(cluster: ClusterSpec) -> list[str]:
    """The plan's `[cluster]` settings that differ from the catalog GPU's (each with the
    catalog's figure): what `planner.inputs.pools.one_kind` applied to it."""
    gpu = cluster.gpu
    out = []
    if cluster.gpus_per_node != gpu.gpus_per_node:
        out.append(f"gpus_per_node = {cluster.gpus_per_node} (catalog {gpu.gpus_per_node})")
    if cluster.memory_gib != gpu.memory_gib:
        out.append(f"memory_gib = {cluster.memory_gib:g} (catalog {gpu.memory_gib:g})")
    if cluster.power_limit_w is not None:
        out.append(f"power_limit_w = {cluster.power_limit_w:g} (catalog TDP {gpu.tdp_w:g})")
    if cluster.hbm_bandwidth_tb_per_s is not None:
        out.append(
            f"hbm_bandwidth_tb_per_s = {cluster.hbm_bandwidth_tb_per_s:g} (catalog "
            f"{gpu.hbm_bandwidth_tb_per_s:g})"
        )
    if cluster.tiers != node_tiers(gpu.tiers, gpu.gpus_per_node, cluster.gpus_per_node):
        tiers = ", ".join(
            f"{t.name} {t.bandwidth_gb_per_s_per_gpu:g} GB/s"
            + (f" over {t.span_gpus}" if t.span_gpus else "")
            for t in cluster.tiers
        )
        out.append(f"tiers = {tiers} (not the catalog's)")
    if cluster.host_memory_gib_per_node is not None:
        catalog = gpu.host_memory_gib_per_node
        out.append(
            f"host_memory_gib_per_node = {cluster.host_memory_gib_per_node:g} (catalog "
            f"{'none' if catalog is None else format(catalog, 'g')})"
        )
    if cluster.gpus_per_domain_used is not None:
        out.append(f"gpus_per_domain_used = {cluster.gpus_per_domain_used}")
    return out


def overrides_lines(plan: Plan) -> list[str]:
    """The header lines naming the plan's cluster overrides (`cluster_overrides`), per pool for
    a plan over pools; none where the plan takes its catalog GPUs as they are."""
    job = plan.job
    clusters = [(f"pool {p.name!r}: ", p.cluster) for p in job.pools] or [("", job.cluster)]
    lines = []
    for prefix, cluster in clusters:
        found = cluster_overrides(cluster)
        if found:
            lead = OVERRIDES.format(gpu=cluster.gpu.name)
            lines.append(f"{prefix}{lead}: {'; '.join(found)}")
    return lines


PLANNED = (
    " (the plan file's own figures, which `planner check` gives; the predicted ones above are "
    "the job this file launches, as its target runs the plan)"
)
"""What the header's 'plan as written' line says after the plan's own figures (`header`)."""


def figures(job: Job, layout: Layout, headroom_pct: float) -> str:
    """'step 13.387 s, 9791.4 tokens/s/GPU, peak memory 61.90 GiB of 61.89 GiB usable (DOES NOT
    FIT (worst: stage 0))': a job's step, throughput and peak against its usable memory at
    `headroom_pct`, as the header's 'predicted' line writes them."""
    perf = cost.estimate(job, layout)
    rep = memory.estimate(job, layout, headroom_pct)
    peak, cap = against(rep.peak, rep.capacity)
    return (
        f"step {perf.step_time_s:.3f} s, {perf.tokens_per_s_per_gpu:.1f} tokens/s/GPU, peak "
        f"memory {peak} GiB of {cap} GiB usable ({_verdict(rep.fits, rep.worst.stage)})"
    )


def planned_figures(plan: Plan, headroom_pct: float) -> list[tuple[str, str]]:
    """[(the launched job's `figures`, the plan's own)] for a plan a target launches otherwise
    than written (`Plan.planned`: the loss Megatron-LM runs, say) where the two print otherwise;
    [] where they print alike, or the plan is launched as written."""
    if plan.planned is None:
        return []
    lay = plan.require_layout()
    ran, own = figures(plan.job, lay, headroom_pct), figures(plan.planned, lay, headroom_pct)
    return [] if ran == own else [(ran, own)]


def _verdict(fits: bool, worst_stage: int) -> str:
    return "fits" if fits else f"DOES NOT FIT (worst: stage {worst_stage})"


def _headroom_text(p: Prediction) -> str:
    """' at 10% headroom' where the prediction's headroom is not check's default (the default's
    header reads as it always has), else ''."""
    return "" if p.headroom_pct == HEADROOM else f" at {p.headroom_pct:g}% headroom"


def _expandable_text(p: Prediction) -> str:
    """The header's second peak, where the environment exports expandable segments the plan's
    memory does not count (the script read back predicts it)."""
    if p.expandable_peak_gib is None:
        return ""
    peak, _ = against(p.expandable_peak_gib * GIB, p.capacity_gib * GIB)
    return (
        f"; {peak} GiB with the expandable segments its environment sets "
        "(PYTORCH_CUDA_ALLOC_CONF: a script read back with it predicts that)"
    )


def cost_text(o: Operations) -> str | None:
    """'$71M at $2/GPU-hour', or None without a price (or a budget)."""
    if o.cost_usd is None or o.price_usd_per_gpu_hour is None:
        return None
    return f"{format_money(o.cost_usd)} at ${o.price_usd_per_gpu_hour:g}/GPU-hour"


def summary_lines(o: Operations) -> list[str]:
    """Plain sentences (no comment marker) describing an Operations, for headers and logs."""
    r = o.resilience
    lines: list[str] = []
    b = o.budget()
    if b is not None:
        cost = f"{cost_text(o) or 'cost unknown'} ({o.price_source})"
        lines.append(
            f"{format_tokens(b.tokens)} tokens in {b.steps:,} steps: {format_amount(b.days)} days "
            f"wall-clock ({format_amount(b.days_no_failures)} without failures), "
            f"{format_si(b.gpu_hours)} GPU-hours, {cost}"
        )
        lines.append(
            f"energy {format_amount(b.energy_mwh, 0)} MWh: {o.facility_power_w / 1e6:.2f} MW "
            f"facility ({o.gpu_power_w:g} W/GPU + {o.node_overhead_w:g} W/node overhead, "
            f"PUE {o.pue:g})"
        )
    mode = "async" if r.async_checkpoint else "sync"
    lines.append(
        f"checkpoint {format_bytes(r.checkpoint_bytes)} ({mode}, write "
        f"{format_duration(r.checkpoint_write_s)}, blocks "
        f"{format_duration(r.checkpoint_blocking_s)}) every {r.interval_steps:,} steps = "
        f"{format_duration(r.interval_s)}; MTBF {format_duration(r.mtbf_s)} at "
        f"{o.params.failure_rate_per_gpu_day:.3g} failures/GPU-day"
    )
    lines.append(
        f"goodput {r.goodput:.1%} (checkpoints {r.lost_checkpoint:.1%}, failures "
        f"{r.lost_failures:.1%}); effective {o.effective_tokens_per_s:,.0f} tokens/s"
    )
    return lines
