"""torchtitan's V schedules (ZBVZeroBubble, DualPipeV) in `planner explain --timeline`: each
rank's two chunks (stages r and 2 pp - 1 - r) in the order torch runs them
(`planner.model.v_schedule`), timed from the cost model's per-rank times, as blocks that
`planner.cli.timeline` draws.

What is drawn as the cost model takes it, not as measured: each chunk takes half its rank's
forward and backward (`Performance.stages`; the chunks' layers differ by one at most, but rank 0's
chunk 1 also runs the output layer and its chunk 0 the embedding); a backward's weight-gradient
part W is WGRAD_SHARE of it less its recompute (`schedule.schedule_bubble`'s W), the input part I
the rest; DualPipeV's overlapped forward and backward (one OVERLAP_F_B action) is drawn as the
forward then the backward, F + B, as the cost model prices it (the overlap hides communication).
"""

from __future__ import annotations

from typing import NamedTuple

from planner.cli.plot import BLUE, GREEN
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model.performance import Performance
from planner.model.rank_mix import mix_sums, rank_mix
from planner.model.schedule import WGRAD_SHARE, weight_grads
from planner.model.stage_time import layout_times
from planner.model.v_schedule import VOp, simulate_v, stage

LIGHT_BLUE, LIGHT_GREEN = "#6baed6", "#74c476"
"""The second chunk of a rank (and the odd chunks of an interleaved schedule)."""
TEAL, LIGHT_TEAL = "#1b7f7a", "#66c2bd"
"""A backward's input-gradient part (torch's BACKWARD_INPUT, I)."""
PURPLE, LIGHT_PURPLE = "#6a51a3", "#9e9ac8"
"""A backward's weight-gradient part (torch's BACKWARD_WEIGHT, W)."""

COLORS = {
    "F": (BLUE, LIGHT_BLUE),
    "B": (GREEN, LIGHT_GREEN),
    "I": (TEAL, LIGHT_TEAL),
    "W": (PURPLE, LIGHT_PURPLE),
}
NAMES = {
    "F": "forward",
    "B": "backward",
    "I": "backward (input gradients)",
    "W": "weight gradients",
}


class Block(NamedTuple):
    """One drawn block of a rank's row."""

    start: float
    end: float
    color: str
    title: str
    label: str


def rank_recompute(job: Job, layout: Layout) -> list[float]:
    """Each rank's recompute seconds per micro-batch (the part of its backward that is no
    weight gradient), as `cost.estimate` counts it."""
    t = layout_times(job, layout)
    ranks = layout.chunk_layers(job.arch.num_layers)
    return [mix_sums(rank_mix(job, layout, r, c, t)[0])[3] for r, c in enumerate(ranks)]


def v_ops(job: Job, layout: Layout, perf: Performance, m: int, name: str) -> list[list[VOp]]:
    """One step of V schedule `name` over m micro-batches, timed (`simulate_v`) from `perf`'s
    per-rank times (module docstring)."""
    fwd = [f for f, _ in perf.stages]
    bwd = [b for _, b in perf.stages]
    rec = rank_recompute(job, layout)
    wgt = weight_grads(bwd, rec)
    return simulate_v(name, layout.pp, m, fwd, bwd, wgt, perf.p2p_hop)


def v_blocks(job: Job, layout: Layout, perf: Performance, m: int, name: str) -> list[list[Block]]:
    """The blocks of each rank's row: one per action, the second chunk lighter."""
    pp = layout.pp
    rows: list[list[Block]] = []
    for r, ops in enumerate(v_ops(job, layout, perf, m, name)):
        row = []
        for op in ops:
            s = stage(pp, r, op.chunk)
            with_ = ""
            if op.paired is not None:
                p = op.paired
                with_ = (
                    f" (one overlapped action with the {NAMES[p.kind]} of micro-batch "
                    f"{p.micro}, chunk {p.chunk})"
                )
            title = (
                f"{NAMES[op.kind]} of micro-batch {op.micro}, chunk {op.chunk} (stage {s})"
                f"{with_}: {op.start:.4f}-{op.end:.4f} s"
            )
            color = COLORS[op.kind][op.chunk]
            row.append(Block(op.start, op.end, color, title, f"{op.kind}{op.micro}"))
        rows.append(row)
    return rows


def v_legend(name: str, recompute: bool) -> list[tuple[str, str]]:
    """The V schedule's block colours: forward, whole backward (DualPipeV), its input and weight
    parts (each rank's chunk 1 in lighter shades); the recompute runs in the first two."""
    rec = ", with recompute" if recompute else ""
    whole = [(GREEN, f"backward{rec}")] if name == "DualPipeV" else []
    return [
        (BLUE, "forward"),
        *whole,
        (TEAL, f"input grads (I{rec})"),
        (PURPLE, "weight grads (W)"),
    ]


def v_note(name: str) -> str:
    """The chart's line on what it simplifies (module docstring)."""
    pair = "; an overlapped F+B drawn as F then B" if name == "DualPipeV" else ""
    return (
        f"torch's {name} action order; each chunk half its rank's times, W = "
        f"{WGRAD_SHARE:.0%} of a backward less its recompute{pair}"
    )
