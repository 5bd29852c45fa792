"""One step's pipeline schedule as a self-contained SVG (`planner explain PLAN --timeline F.svg`).

Each pipeline rank is a row; its forwards and backwards are drawn to scale from the cost model's
per-stage times (`Performance.stages`: one micro-batch's forward and backward on that stage,
exposed TP/CP/EP traffic included, and 1F1B's blocking PP sends), scheduled by
planner.schedule.simulate in Megatron-LM's order (1F1B, or interleaved 1F1B with each chunk 1/vpp
of its rank's time, the odd chunks in a lighter shade, each overlapped send delaying its receiver
by `Performance.p2p_hop`, or without the p2p overlap each rank's blocking exchanges in its ops,
`Performance.p2p_blocking`), so uneven stages and the fill and drain show as they run. Gaps are
idle time (the bubble). After the last backward every rank pays the step's exposed DP traffic,
optimizer and fixed costs, with what the stage times leave out (`Performance.unscheduled_s`:
FP8 weight casts once a step, the deferred output-layer gradients' flush). Under Megatron's EP
all-to-all overlap each rank runs one more warm-up forward (`schedule.warmup`). A long step is
drawn as a step of fewer micro-batches, said so: at most MAX_OPS forwards per rank, or when
interleaved whole groups (of pp micro-batches, or the plan's microbatch_group_size_per_vp_stage),
at least two (a steady state between the fill and the drain; the full step repeats it).
A step of torchtitan's k pipeline schedules (`[torchtitan] gradient_accumulation_steps`) is drawn
as its last, with its share of the DP traffic and the step's optimizer after it. torchtitan's V
schedules (ZBVZeroBubble, DualPipeV) are drawn in the order torch runs them
(`planner.cli.timeline_v`: forwards, whole and split backwards, stages r and 2 pp - 1 - r on rank
r), at most MAX_OPS // 2 micro-batches and at least their 2 pp. torchtitan's other schedules
(GPipe, LoopedBFS, InterleavedZeroBubble) run another order, which `pipeline_svg` refuses to draw
as theirs.
"""

from __future__ import annotations

from html import escape

from planner.cli.plot import BLUE, FONT, GREEN, GREY, ORANGE, nice_linear_ticks
from planner.cli.timeline_v import LIGHT_BLUE, LIGHT_GREEN, Block, v_blocks, v_legend, v_note
from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import titan_accumulation
from planner.model.in_flight import V_SCHEDULES
from planner.model.performance import Performance
from planner.model.schedule import schedule_name, shown_microbatches, simulate
from planner.model.torch_schedules import microbatch_group, schedule_microbatches

MAX_OPS = 32
"""Forwards drawn per rank at most (micro-batches x chunks): enough for the fill, a steady state
and the drain."""

WIDTH = 920
LEFT, RIGHT, TOP = 70, 24, 64
ROW, GAP = 22, 6

DRAWN = ("1F1B", "Interleaved1F1B", *V_SCHEDULES)
"""The schedules `pipeline_svg` draws."""


def drawable(job: Job, layout: Layout) -> None:
    """Raises (exit 2, naming --timeline) where the plan's schedule is not one `pipeline_svg`
    draws: torchtitan's GPipe, LoopedBFS and InterleavedZeroBubble."""
    name = schedule_name(job, layout)
    if name not in DRAWN:
        raise InputError(
            f"--timeline: draws Megatron's 1F1B and interleaved 1F1B schedules and torchtitan's "
            f"V schedules (ZBVZeroBubble, DualPipeV); this plan runs torchtitan's {name} (its "
            "bubble is in explain's table)"
        )


def _megatron_blocks(
    job: Job, layout: Layout, perf: Performance, shown: int, group: int | None
) -> list[list[Block]]:
    """1F1B or interleaved 1F1B in Megatron-LM's order (`schedule.simulate`)."""
    vpp = layout.vpp
    fwd = [f for f, _ in perf.stages]
    bwd = [b for _, b in perf.stages]
    hop = perf.p2p_hop
    if perf.p2p_blocking:  # the overlap off: each exchange in its rank's ops, no hop after them
        pairs = zip(perf.p2p_blocking, fwd, bwd, strict=True)
        grow = [1 + x / (f + b) if f + b else 1.0 for x, f, b in pairs]
        fwd = [f * k for f, k in zip(fwd, grow, strict=True)]
        bwd, hop = [b * k for b, k in zip(bwd, grow, strict=True)], 0.0
    sched = simulate(layout.pp, shown, fwd, bwd, vpp, hop, group, layout.ep_comm_overlap)
    rows = []
    for ops in sched:
        row = []
        for op in ops:
            odd = op.chunk % 2 == 1
            if op.kind == "F":
                color, name = (LIGHT_BLUE if odd else BLUE), "forward"
            else:
                color, name = (LIGHT_GREEN if odd else GREEN), "backward"
            chunk = f", chunk {op.chunk}" if vpp > 1 else ""
            title = f"{name} of micro-batch {op.micro}{chunk}: {op.start:.4f}-{op.end:.4f} s"
            row.append(Block(op.start, op.end, color, title, f"{op.kind}{op.micro}"))
        rows.append(row)
    return rows


def pipeline_svg(job: Job, layout: Layout, perf: Performance) -> str:
    """The SVG document (a string) of one step of `layout`, as `perf` (cost.estimate) models it."""
    drawable(job, layout)
    name = schedule_name(job, layout)
    v = name in V_SCHEDULES
    m = schedule_microbatches(job, layout)  # one schedule's: torchtitan runs k a step
    k = titan_accumulation.steps(job)  # the last drawn; the others end in their DP sync alone
    vpp = layout.vpp
    group = microbatch_group(job, layout)
    if v:  # whole V: 2 pp micro-batches at least (DualPipeV's least; ZB-V's is 2 pp - 1)
        shown = min(m, max(MAX_OPS // 2, 2 * layout.pp))
        rows = v_blocks(job, layout, perf, shown, name)
    else:
        shown = shown_microbatches(m, layout.pp, vpp, max(MAX_OPS // vpp, 2 * layout.pp), group)
        rows = _megatron_blocks(job, layout, perf, shown, group)
    pipe_end = max(blk.end for row in rows for blk in row)
    b = perf.breakdown
    tail = (b.dp_comm_exposed + b.link_shared + perf.unscheduled_s) / k + b.optimizer + b.other
    total = pipe_end + tail
    span = WIDTH - LEFT - RIGHT

    def x(t: float) -> float:
        return LEFT + t / total * span

    height = TOP + layout.pp * (ROW + GAP) + 112 + (16 if v else 0)
    which = f"all {m}" if shown == m else f"a step of {shown} (of the {m} it runs)"
    title = f"{job.arch.name}, {layout.describe()}"
    kind = name if v else ("1F1B" if vpp == 1 else "interleaved 1F1B")
    one = f"one step's {kind} schedule" if k == 1 else f"the last of a step's {k} {kind} schedules,"
    sub = f"{one} drawn with {which} micro-batches" + (
        f", {vpp} model chunks per rank" + (" (stages r and 2pp-1-r on rank r)" if v else "")
        if vpp > 1
        else ""
    )
    body = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"viewBox='0 0 {WIDTH} {height}'>",
        f"<rect width='{WIDTH}' height='{height}' fill='#fafafa'/>",
        f"<text x='{LEFT}' y='24' {FONT} font-size='16' font-weight='bold'>{escape(title)}</text>",
        f"<text x='{LEFT}' y='44' {FONT} font-size='12' fill='#444'>{escape(sub)}</text>",
    ]
    for r, row in enumerate(rows):
        y = TOP + r * (ROW + GAP)
        body.append(
            f"<rect x='{LEFT}' y='{y}' width='{span}' height='{ROW}' fill='#eeeeee'>"
            "<title>idle</title></rect>"
        )
        body.append(
            f"<text x='{LEFT - 8}' y='{y + ROW / 2 + 4}' {FONT} font-size='11' "
            f"text-anchor='end'>rank {r}</text>"
        )
        for blk in row:
            w = x(blk.end) - x(blk.start)
            body.append(
                f"<rect x='{x(blk.start):.2f}' y='{y}' width='{w:.2f}' height='{ROW}' "
                f"fill='{blk.color}' stroke='white' stroke-width='0.5'><title>"
                f"{escape(blk.title)}</title></rect>"
            )
            if w >= 14:
                body.append(
                    f"<text x='{x(blk.start) + w / 2:.2f}' y='{y + ROW / 2 + 4}' {FONT} "
                    f"font-size='10' fill='white' text-anchor='middle'>{blk.label}</text>"
                )
        if tail > 0:
            body.append(
                f"<rect x='{x(pipe_end):.2f}' y='{y}' width='{x(total) - x(pipe_end):.2f}' "
                f"height='{ROW}' fill='{ORANGE}'><title>DP traffic, optimizer and fixed costs"
                f"{', FP8 weight casts, deferred wgrad flush' if perf.unscheduled_s else ''}"
                f"{', shared PCIe link' if b.link_shared else ''}: {tail:.4f} s</title></rect>"
            )
    axis_y = TOP + layout.pp * (ROW + GAP) + 4
    for t in nice_linear_ticks(0.0, total):
        body.append(
            f"<line x1='{x(t):.2f}' x2='{x(t):.2f}' y1='{axis_y - 4}' y2='{axis_y + 2}' "
            f"stroke='{GREY}'/><text x='{x(t):.2f}' y='{axis_y + 14}' {FONT} font-size='10' "
            f"text-anchor='middle' fill='#444'>{t:g} s</text>"
        )
    with_recompute = " (with recompute)" if layout.recompute != "none" else ""
    if v:
        legend = v_legend(name, layout.recompute != "none")
    else:
        legend = [(BLUE, "forward"), (GREEN, "backward" + with_recompute)]
    legend += [(ORANGE, "exposed DP traffic, optimizer, fixed"), ("#eeeeee", "idle (bubble)")]
    if vpp > 1:
        legend.append((LIGHT_BLUE, "chunk 1 (lighter)" if v else "odd chunks (lighter)"))
    ly = axis_y + 34
    lx = LEFT
    for color, label in legend:
        body.append(f"<rect x='{lx}' y='{ly - 10}' width='12' height='12' fill='{color}'/>")
        body.append(f"<text x='{lx + 16}' y='{ly}' {FONT} font-size='11'>{escape(label)}</text>")
        lx += 22 + 7 * len(label)
    hop = f"each PP send ({perf.p2p_hop * 1e3:.2f} ms) delays its receiver"
    if perf.p2p_blocking:
        hop = "each rank's blocking PP exchanges (no p2p overlap) in its ops"
    foot = [
        f"whole step {perf.step_time_s:.3f} s over "
        f"{titan_accumulation.schedules_text(job, layout) or f'{m} micro-batches'}, bubble "
        f"{b.bubble:.3f} s ({b.bubble / perf.step_time_s:.1%})",
        "times per micro-batch and stage include the exposed TP, CP, EP and PP traffic"
        if vpp == 1
        else f"times per micro-batch and stage include the exposed TP, CP and EP traffic; {hop}",
    ]
    if v:
        foot.append(v_note(name))
    for i, line in enumerate(foot):
        body.append(
            f"<text x='{LEFT}' y='{ly + 26 + 16 * i}' {FONT} font-size='11' fill='#333'>"
            f"{escape(line)}</text>"
        )
    body.append("</svg>")
    return "\n".join(body) + "\n"
