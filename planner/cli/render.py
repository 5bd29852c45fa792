"""Human output with rich: the per-stage memory and time breakdowns of check and explain (the
catalog's tables: `planner.cli.render_catalog`).

The consoles (`planner.cli.common`) do not read rich markup, so names and paths a user gave print
as they are ("x[bold]y" stays "x[bold]y"); the few styled lines pass markup=True and escape what
they interpolate."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from planner.cli import explain_notes, switch_notes
from planner.cli.advice_input import Said, suffix, verified
from planner.emit.prediction import cost_text
from planner.inputs import units
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.units import against, over
from planner.model import titan_accumulation
from planner.model.memory import MemoryReport
from planner.model.performance import BOTTLENECK_MIN_SHARE, COMPUTE_BOUND, Performance
from planner.model.schedule import bubble_text, schedule_name, shown_microbatches, timeline_text
from planner.model.torch_schedules import microbatch_group, schedule_microbatches
from planner.ops.operations import Operations
from planner.ops.resilience import Resilience
from planner.search.advice import Change

MIN_TIMELINE_WIDTH = 20
"""Characters of the text schedule at least (a rank's label takes 10 of the terminal's width;
below this the terminal wraps the lines rather than the drawing losing its ops)."""


def gib(nbytes: float) -> str:
    return units.gib_text(nbytes)


def capacity_text(rep: MemoryReport, usable: str | None = None) -> str:
    """'77.3 GiB (79.6 less 3% headroom)': the usable memory and where it comes from; `usable`,
    the usable GiB as written beside a peak (`units.against`), else to one place."""
    usable = usable or gib(rep.capacity)
    return f"{usable} GiB ({gib(rep.physical)} less {rep.headroom_pct:g}% headroom)"


def memory_table(rep: MemoryReport, perf: Performance | None = None) -> Table:
    """Per-stage memory; with `perf` (explain) also each stage's time per micro-batch. Each
    stage's total and its capacity (the title's, or with pools its row's) are written with
    `units.against`, as the verdict writes the peak: a stage 10 MiB over never reads as its
    capacity (61.90 of 61.89 GiB, not 61.9 of 61.9)."""
    cap = against(rep.peak, rep.capacity)[1]
    title = f"Memory per GPU (GiB), capacity {capacity_text(rep, cap)}"
    timed = perf is not None and len(perf.stages) == len(rep.stages)
    t = Table(title=title + ("; time per micro-batch (ms)" if timed else ""))
    cols = ["stage", "layers", "weights", "grads", "optimizer", "activations", "other", "total"]
    copies = any(st.grad_copy for st in rep.stages)  # what the optimizer step holds
    if copies:
        cols.insert(6, "step copy")
        t.caption = (
            "step copy: what the optimizer step holds after the activations are freed (fp32 "
            "copies of 16-bit gradients, Muon's Newton-Schulz working set, the fp32 copies of "
            "16-bit optimizer states); total holds the larger of the two (* the step)"
        )
    validated = any(st.validation for st in rep.stages)  # torchtitan's validation forward
    if validated:
        cols.insert(len(cols) - 2, "validation")
        said = (
            "validation: what torchtitan's validation forward holds beside the states after a "
            "step (one layer's working set, the loss over all its logits); total holds the "
            "largest (+ the validation)"
        )
        t.caption = f"{t.caption}; {said}" if t.caption else said
    pooled = any(st.pool for st in rep.stages)  # heterogeneous pools: each stage's pool and GPU
    if pooled:
        t.title = title.replace(capacity_text(rep, cap), "per stage's GPU, less headroom") + (
            "; time per micro-batch (ms)" if timed else ""
        )
        cols[1:1] = ["pool", "gpu", "capacity"]
    for col in cols + (["fwd ms", "bwd ms"] if timed else []):
        t.add_column(col, justify="right")
    worst = rep.worst.stage
    for st in rep.stages:
        mark = " <- worst" if st.stage == worst else ""
        style = "bold red" if st.stage == worst and not rep.fits else None
        cells = [f"{st.stage}{mark}", str(st.layers)]
        total, room = against(st.total, rep.room(st))
        if pooled:
            cells[1:1] = [st.pool, st.gpu, room]
        parts = [st.weights, st.grads, st.optimizer, st.activations]
        parts += [st.grad_copy] if copies else []
        parts += [st.validation] if validated else []
        cells += [gib(v) for v in [*parts, st.other]]
        cells.append(total + ("*" if st.at_step else "+" if st.at_validation else ""))
        if timed and perf is not None:
            fwd, bwd = perf.stages[st.stage]
            cells += [f"{1e3 * fwd:,.1f}", f"{1e3 * bwd:,.1f}"]
        t.add_row(*cells, style=style)
    return t


def cluster_text(job: Job) -> str:
    """'8 x h100-sxm-80gb', with the plan's power cap and HBM override where set."""
    c = job.cluster
    if job.pools:
        return " + ".join(
            f"{p.cluster.num_gpus} x {p.cluster.gpu.name} ({p.name})" for p in job.pools
        )
    extra = []
    if c.power_limit_w is not None:
        extra.append(f"{c.power_limit_w:g} W cap")
    if c.hbm_bandwidth_tb_per_s is not None:
        extra.append(f"HBM {c.hbm_bandwidth_tb_per_s:g} TB/s")
    return f"{c.num_gpus} x {c.gpu.name}" + (f" ({', '.join(extra)})" if extra else "")


def print_check(
    console: Console,
    job: Job,
    layout: Layout,
    rep: MemoryReport,
    changes: list[Change],
    host: tuple[str | None, bool] = (None, True),
    said: dict[int, Said] | None = None,
) -> None:
    """check's table and verdict; `host`, the host-memory line (`host_text.host_line`) and
    whether the host's fits, printed after the GPU's verdict (which then names the GPU);
    `said`, the changes in the checked input's terms (`print_changes`)."""
    line, host_fits = host
    console.print(
        f"[bold]{escape(job.arch.name)}[/] on {escape(cluster_text(job))}, "
        f"seq {job.seq_length}, global batch {job.global_batch_size}: {layout.describe()}",
        markup=True,
    )
    console.print(memory_table(rep))
    peak, cap = against(rep.peak, rep.capacity)
    if rep.fits:
        verdict = "[green]fits[/]" if host_fits else "[green]fits in GPU memory[/]"
        console.print(
            f"{verdict}: peak {peak} GiB of {cap} GiB (stage {rep.worst.stage})", markup=True
        )
        if line is not None:
            console.print(line, markup=True, highlight=False)
        print_changes(console, changes, host_fits, said)
        return
    on = f"stage {rep.worst.stage}"
    if rep.worst.pool:  # the binding stage, its pool and GPU
        on += f" (pool {escape(repr(rep.worst.pool))}, {rep.worst.gpu})"
    console.print(
        f"[red]does not fit[/]: peak {peak} GiB of {cap} GiB on {on}, {over(rep.shortfall)} over",
        markup=True,
    )
    if line is not None:
        console.print(line, markup=True, highlight=False)
    print_changes(console, changes, False, said)


def print_changes(
    console: Console, changes: list[Change], fits: bool, said: dict[int, Said] | None = None
) -> None:
    """The changes that make the layout fit, cheapest first (GPU memory's single changes from
    `advice.memory_changes`; host memory's from `host_advice.host_changes`, which may pair one
    with offloading less); else the largest saving; where the layout does not fit (`fits`
    False) and no change is found, that no single change makes it fit. `said`: for a checked
    line or config, each change in its terms (`advice_input`): one that does not read back
    is listed apart, as plan file only."""
    said = said or {}
    fitting = [c for c in changes if c.fits and verified(said, c)]
    only = [c for c in changes if c.fits and not verified(said, c)]
    if fitting:  # host memory's may pair offloading less with a GPU change (`Change.also`)
        kind = "Changes" if any(c.memory == "host" for c in fitting) else "Single changes"
        console.print(f"{kind} that make it fit (cheapest first):")
        for c in fitting[:5]:
            console.print(f"  {c.describe()} saves {_saving(c)}{suffix(said, c)}")
    elif only:
        console.print("No single change verified on this input makes it fit.")
    elif changes:
        best = max(changes, key=lambda c: c.saves)
        console.print(
            f"No single change makes it fit; the largest saving is {best.describe()} "
            f"({_saving(best)}){suffix(said, best)}."
        )
    elif not fits:
        console.print("No single change makes it fit.")
    if only:
        console.print("Fitting as a plan file only (not said by this input as planner reads it):")
        for c in only[:5]:
            console.print(f"  {c.describe()} saves {_saving(c)}{suffix(said, c)}")


def _saving(c: Change) -> str:
    """What a change saves: GiB to one place, MiB below 0.05 GiB (`units.over`: never "0.0")."""
    return over(c.saves) + (" of host memory" if c.memory == "host" else "")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}"


def time_table(perf: Performance) -> Table:
    b = perf.breakdown
    t = Table(title=f"Step time {perf.step_time_s:.3f} s (slowest pipeline stage)")
    t.add_column("where the time goes")
    t.add_column("exposed ms", justify="right")
    t.add_column("hidden ms", justify="right")
    t.add_column("share", justify="right")
    rows = [
        ("compute (GEMMs, attention, elementwise)", b.compute, None),
        ("recompute", b.recompute, None),
        ("TP communication", b.tp_comm_exposed, b.tp_comm_hidden),
        ("CP communication", b.cp_comm_exposed, b.cp_comm_hidden),
        ("EP all-to-all", b.ep_comm_exposed, b.ep_comm_hidden),
        ("PP send/receive", b.pp_comm_exposed, None),
        ("DP gradient / parameter traffic", b.dp_comm_exposed, b.dp_comm_hidden),
        ("pipeline bubble", b.bubble, None),
        ("CPU offloading host transfers", b.offload_exposed, None),
        ("waiting on the one PCIe link all traffic shares", b.link_shared, None),
        ("optimizer step", b.optimizer, None),
        ("other per-step costs", b.other, None),
    ]
    for name, exposed, hidden in rows:
        if exposed == 0 and not hidden:
            continue
        share = f"{exposed / perf.step_time_s:.0%}"
        t.add_row(name, _ms(exposed), "" if hidden is None else _ms(hidden), share)
    return t


def print_explain(
    console: Console,
    job: Job,
    layout: Layout,
    rep: MemoryReport,
    perf: Performance,
    host: tuple[str | None, bool] = (None, True),
) -> None:
    """explain's tables and lines; `host`, the host-memory line (`host_text.host_line`) and
    whether the host's fits, printed after the GPU memory's verdict (which then names the GPU,
    as check's does)."""
    line, host_fits = host
    console.print(
        f"[bold]{escape(job.arch.name)}[/] on {escape(cluster_text(job))}, "
        f"seq {job.seq_length}, global batch {job.global_batch_size}, {job.precision_text}: "
        f"{layout.describe()}",
        markup=True,
    )
    console.print(memory_table(rep, perf))
    fits = "[green]fits[/]" if host_fits else "[green]fits in GPU memory[/]"
    verdict = fits if rep.fits else f"[red]does not fit[/] ({over(rep.shortfall)} over)"
    peak, cap = against(rep.peak, rep.capacity)
    console.print(f"{verdict}: peak {peak} of {cap} GiB", markup=True)
    if line is not None:
        console.print(line, markup=True, highlight=False)
    console.print(time_table(perf))
    name = schedule_name(job, layout)
    runs = titan_accumulation.schedules_text(job, layout)  # torchtitan's gradient accumulation
    if layout.pp > 1:
        who = "torchtitan's" if job.framework == "torchtitan" else "Megatron-LM's"
        each = f", {runs}, bubble" if runs else ", bubble"
        m = schedule_microbatches(job, layout)  # one schedule's (torchtitan: of k a step)
        each += f" {bubble_text(name, layout.pp, m)}" + (" each" if runs else "")
        console.print(
            f"pipeline schedule: {who} {name}{each} = "
            f"{_ms(perf.breakdown.bubble)} ms per step (F forward, B backward, W its weight "
            "gradients, p stages, v chunks per rank)",
            highlight=False,
        )
    if layout.pp > 1 and name in ("1F1B", "Interleaved1F1B"):
        m = schedule_microbatches(job, layout)  # one schedule's (torchtitan: of k a step)
        group = microbatch_group(job, layout)
        shown = shown_microbatches(m, layout.pp, layout.vpp, 2 * layout.pp, group)
        kind = "1F1B" if layout.vpp == 1 else f"interleaved 1F1B ({layout.vpp} chunks per rank)"
        odd = "" if layout.vpp == 1 else " (f, b: odd chunks)"
        which = f"all {m}" if shown == m else f"a step of {shown} (of the {m} it runs)"
        of = f" of one of the step's {titan_accumulation.steps(job)} schedules" if runs else ""
        console.print(
            f"{kind} schedule drawn with {which} micro-batches{of}, each stage's times "
            f"to scale: F forward, B backward{odd}, . idle"
        )
        fwd = [f for f, _ in perf.stages]
        bwd = [b for _, b in perf.stages]
        width = max(console.width - 10, MIN_TIMELINE_WIDTH)
        lines = timeline_text(
            layout.pp, shown, width, fwd, bwd, layout.vpp, perf.p2p_hop, group,
            layout.ep_comm_overlap,
        )  # fmt: skip
        for line in lines:
            console.print(line, highlight=False)
    mfu = perf.mfu_text()
    console.print(
        f"tokens/s/GPU {perf.tokens_per_s_per_gpu:,.0f}   model TFLOP/s/GPU "
        f"{perf.model_tflops_per_gpu:.0f}   {mfu} (model FLOPs, causal attention not halved)"
    )
    for line in explain_notes.notes(job, layout, perf, rep.headroom_pct):
        console.print(line, highlight=False)
    console.print(top_cost_text(perf, switch_notes.host_seconds(job, layout)))


def top_cost_text(perf: Performance, host_issue_s: float = 0.0) -> str:
    """explain's verdict on the step: its largest cost besides compute with its share, the
    host's eager kernel issue (`host_issue_s`, `Performance.top_cost`) among them, or
    compute-bound when none reaches BOTTLENECK_MIN_SHARE (`Performance.bottleneck`)."""
    if perf.bottleneck(host_issue_s) == COMPUTE_BOUND:
        return (
            f"{COMPUTE_BOUND}: no cost besides compute reaches {BOTTLENECK_MIN_SHARE:.0%} "
            "of the step"
        )
    name, seconds = perf.top_cost(host_issue_s)
    return f"largest cost besides compute: {name} ({seconds / perf.step_time_s:.0%} of the step)"


def operations_table(o: Operations) -> Table:
    """`explain --tokens ...`: days, GPU-hours, cost, energy, checkpoints, failures, goodput."""
    r, p = o.resilience, o.params
    nodes = f"{o.nodes:,} node{'s' if o.nodes != 1 else ''}"
    t = Table(title="Operations (defaults and their sources: planner/ops/assumptions.py)")
    t.add_column("what", style="bold")
    t.add_column("estimate", overflow="fold")
    b = o.budget()
    if b is not None:
        t.add_row("token budget", f"{units.format_tokens(b.tokens)} tokens = {b.steps:,} steps")
        days, ideal = units.format_amount(b.days), units.format_amount(b.days_no_failures)
        t.add_row("wall-clock", f"{days} days ({ideal} without failures)")
        t.add_row("GPU-hours", units.format_amount(b.gpu_hours, 0))
        t.add_row("cost", f"{cost_text(o) or 'unknown'} ({o.price_source})")
        t.add_row(
            "energy",
            f"{units.format_amount(b.energy_mwh)} MWh at {o.facility_power_w / 1e6:,.3f} MW "
            f"({o.gpu_power_w:g} W/GPU + {o.node_overhead_w:g} W/node x {nodes}, "
            f"PUE {o.pue:g})",
        )
    else:  # no budget: the rates the operations options set, per million tokens and per hour
        per_m = o.usd_per_million_tokens
        rate = "unknown" if per_m is None else f"${per_m:.3g} per million tokens"
        t.add_row("cost", f"{rate} ({o.price_source}); give --tokens for the total")
        t.add_row(
            "power",
            f"{o.facility_power_w / 1e6:,.3f} MW ({o.gpu_power_w:g} W/GPU + "
            f"{o.node_overhead_w:g} W/node x {nodes}, PUE {o.pue:g}); give --tokens for the energy",
        )
    mode = "asynchronous" if r.async_checkpoint else "synchronous"
    t.add_row(
        "checkpoint",
        f"{units.format_bytes(r.checkpoint_bytes)} {mode}: write "
        f"{units.format_duration(r.checkpoint_write_s)} at {p.storage_gb_per_s_per_node:g} GB/s "
        f"x {nodes}, training blocked {units.format_duration(r.checkpoint_blocking_s)}",
    )
    how = _interval_source(r, p.checkpoint_interval_min)
    young, daly = (
        units.format_duration(r.young_interval_s),
        units.format_duration(r.daly_interval_s),
    )
    t.add_row(
        "checkpoint interval",
        f"every {r.interval_steps:,} step{'s' if r.interval_steps != 1 else ''} = "
        f"{units.format_duration(r.interval_s)} ({how}; Young {young}, Daly {daly})",
    )
    failures = (
        f"; ~{o.expected_failures:,.0f} over the run" if o.expected_failures is not None else ""
    )
    t.add_row(
        "failures",
        f"MTBF {units.format_duration(r.mtbf_s)} ({p.failure_rate_per_gpu_day:.3g} per GPU-day x "
        f"{o.num_gpus:,} GPUs), {units.format_duration(r.restart_s)} lost per restart{failures}",
    )
    t.add_row(
        "goodput",
        f"{r.goodput:.1%} of wall-clock trains; lost: checkpoints {r.lost_checkpoint:.1%}, "
        f"restarts {r.lost_restart:.1%}, re-done work {r.lost_rework:.1%}",
    )
    t.add_row(
        "tokens/s",
        f"{o.effective_tokens_per_s:,.0f} effective ({o.tokens_per_s:,.0f} without failures)",
    )
    return t


def _interval_source(r: Resilience, given_min: float | None) -> str:
    """Where the checkpoint interval comes from: the option (and where less than half a step,
    the one step it became), Daly's optimum, or with asynchronous save the write it may not
    start before (when that is the longer; a whole step under it where that is the better, its
    saves then waiting for the write); a run shorter than that, the run."""
    if r.whole_run:
        return "the whole run, shorter than the interval: one save, at its end"
    if given_min is not None:
        step = r.interval_s / r.interval_steps
        short = r.interval_steps == 1 and given_min * 60.0 < step / 2
        return f"given {given_min:g} min, under a step: one step" if short else "given"
    if r.async_checkpoint and r.checkpoint_write_s > r.daly_interval_s:
        if r.interval_s < r.checkpoint_write_s:  # the best whole step fell under the write
            return "under the write time, each save waiting for the last; past Daly's optimum"
        return "the write time, past Daly's optimum"
    return "Daly optimum"
