"""The scaling curve as a self-contained SVG, written by hand (no plotting dependency).

`scaling_svg(curve)` draws three panels sharing a log2 GPU axis:
1. effective tokens/s (log scale) against ideal linear scaling from the smallest size;
2. per-GPU efficiency and marginal efficiency (%), with the "stops paying" threshold;
3. days to the token budget (log scale), with $ per million tokens printed at each point
   (or $ per million tokens alone when there is no budget).
A red dashed line marks where adding GPUs stops paying; triangles mark sizes where efficiency rose
because the layout changed, explained in the footnotes; sizes with no layout, or none that makes
progress, are crossed out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from planner.cli.render_scale import usd_text
from planner.inputs.errors import InputError
from planner.inputs.units import format_si, format_tokens
from planner.ops.operations import Operations
from planner.search.scaling import NO_FIT, ScaleCurve, ScalePoint

WIDTH = 920
PANEL_H = 190
LEFT, RIGHT, TOP = 90, 30, 56
GAP = 46
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"
BLUE, GREY, RED, GREEN, ORANGE = "#1f5fa8", "#8a8a8a", "#c0392b", "#2e8b57", "#d35400"


def _nice_log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks at 1, 2, 5 x 10^k inside [lo, hi] (at most ~8)."""
    ticks: list[float] = []
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for k in range(k0, k1 + 1):
        for m in (1, 2, 5):
            t = m * 10.0**k
            if lo <= t <= hi:
                ticks.append(t)
    if len(ticks) > 8:
        ticks = [t for t in ticks if round(t / 10 ** math.floor(math.log10(t))) == 1]
    return ticks or [lo, hi]


def nice_linear_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    raw = (hi - lo) / n or 1.0
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks = []
    t = start
    while t <= hi + 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks


def _fmt(x: float) -> str:
    return format_si(x, "g")


class _Panel:
    """One plot area: maps data to pixels and collects SVG elements."""

    def __init__(self, top: float, xs: Sequence[int], title: str) -> None:
        self.top, self.bottom = top, top + PANEL_H
        self.x0, self.x1 = LEFT, WIDTH - RIGHT
        self.lx0, self.lx1 = math.log2(min(xs)), math.log2(max(xs))
        if self.lx1 == self.lx0:
            self.lx0, self.lx1 = self.lx0 - 1, self.lx1 + 1
        self.items: list[str] = [
            f"<text x='{LEFT}' y='{top - 10}' {FONT} font-size='14' font-weight='bold'>"
            f"{escape(title)}</text>",
            f"<rect x='{self.x0}' y='{top}' width='{self.x1 - self.x0}' height='{PANEL_H}' "
            "fill='white' stroke='#bbbbbb'/>",
        ]
        self.ymap: Callable[[float], float] = lambda v: self.bottom

    def x(self, n: float) -> float:
        frac = (math.log2(n) - self.lx0) / (self.lx1 - self.lx0)
        return self.x0 + 12 + frac * (self.x1 - self.x0 - 24)

    def set_y(
        self, lo: float, hi: float, log: bool, unit: str = "", fmt: Callable[[float], str] = _fmt
    ) -> None:
        pad_top, pad_bottom = 10, 10
        span = self.bottom - self.top - pad_top - pad_bottom
        if log:
            lo, hi = max(lo, 1e-12), max(hi, lo * 1.0001)
            llo, lhi = math.log10(lo), math.log10(hi)
            if lhi - llo < 0.3:
                llo, lhi = llo - 0.15, lhi + 0.15
            self.ymap = lambda v: (
                self.bottom - pad_bottom - ((math.log10(max(v, 1e-12)) - llo) / (lhi - llo)) * span
            )
            ticks = _nice_log_ticks(10**llo, 10**lhi)
        else:
            scale = max(abs(lo), abs(hi), 1.0)
            if hi - lo <= 1e-9 * scale:  # one value (one GPU count): 5% of it either side
                lo, hi = lo - 0.05 * scale, hi + 0.05 * scale
            self.ymap = lambda v: self.bottom - pad_bottom - (v - lo) / (hi - lo) * span
            ticks = nice_linear_ticks(lo, hi)
        for t in ticks:
            y = self.ymap(t)
            self.items.append(
                f"<line x1='{self.x0}' x2='{self.x1}' y1='{y:.1f}' y2='{y:.1f}' stroke='#eeeeee'/>"
            )
            self.items.append(
                f"<text x='{self.x0 - 6}' y='{y + 4:.1f}' {FONT} font-size='11' "
                f"text-anchor='end' fill='#444'>{escape(fmt(t))}{unit}</text>"
            )

    def line(
        self, pts: list[tuple[float, float]], color: str, dash: str = "", w: float = 2
    ) -> None:
        if len(pts) < 2:
            return
        d = " ".join(f"{self.x(n):.1f},{self.ymap(v):.1f}" for n, v in pts)
        dash_attr = f" stroke-dasharray='{dash}'" if dash else ""
        self.items.append(
            f"<polyline points='{d}' fill='none' stroke='{color}' stroke-width='{w}'{dash_attr}/>"
        )

    def dots(
        self, pts: list[tuple[float, float]], color: str, labels: list[str] | None = None
    ) -> None:
        for i, (n, v) in enumerate(pts):
            x, y = self.x(n), self.ymap(v)
            self.items.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='3.5' fill='{color}'/>")
            if labels and labels[i]:
                self.items.append(
                    f"<text x='{x:.1f}' y='{y - 8:.1f}' {FONT} font-size='10' "
                    f"text-anchor='middle' fill='{color}'>{escape(labels[i])}</text>"
                )

    def legend(self, entries: list[tuple[str, str, str]], where: str = "top right") -> None:
        x = self.x0 + 170 if "left" in where else self.x1 - 10
        box_h = 15 * len(entries) + 6
        top = self.bottom - box_h - 4 if "bottom" in where else self.top + 4
        self.items.append(
            f"<rect x='{x - 156}' y='{top}' width='152' height='{box_h}' "
            "fill='white' fill-opacity='0.85' stroke='#dddddd'/>"
        )
        for i, (label, color, dash) in enumerate(entries):
            y = top + 12 + 15 * i
            dash_attr = f" stroke-dasharray='{dash}'" if dash else ""
            self.items.append(
                f"<line x1='{x - 150}' x2='{x - 128}' y1='{y - 4}' y2='{y - 4}' stroke='{color}' "
                f"stroke-width='2'{dash_attr}/>"
            )
            self.items.append(
                f"<text x='{x - 124}' y='{y}' {FONT} font-size='11' fill='#333'>"
                f"{escape(label)}</text>"
            )

    def vline(self, n: float, color: str, label: str = "") -> None:
        x = self.x(n)
        self.items.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{self.top}' y2='{self.bottom}' stroke='{color}' "
            "stroke-width='1.5' stroke-dasharray='6,4'/>"
        )
        if label:
            right_half = x > (self.x0 + self.x1) / 2
            tx, anchor = (x - 4, "end") if right_half else (x + 4, "start")
            self.items.append(
                f"<text x='{tx:.1f}' y='{self.top + 14}' {FONT} font-size='11' fill='{color}' "
                f"text-anchor='{anchor}'>{escape(label)}</text>"
            )

    def marker(self, n: float, v: float, text: str, color: str) -> None:
        x, y = self.x(n), self.ymap(v)
        self.items.append(
            f"<path d='M {x:.1f} {y + 8:.1f} l -5 9 l 10 0 z' fill='{color}'/>"
            f"<text x='{x + 8:.1f}' y='{y + 17:.1f}' {FONT} font-size='10' "
            f"fill='{color}'>{escape(text)}</text>"
        )

    def svg(self) -> str:
        return "\n".join(self.items)


def _x_axis(panel: _Panel, sizes: Sequence[int], infeasible: set[int]) -> list[str]:
    out = []
    for n in sizes:
        x = panel.x(n)
        color = GREY if n in infeasible else "#333"
        out.append(
            f"<text x='{x:.1f}' y='{panel.bottom + 16}' {FONT} font-size='11' "
            f"text-anchor='middle' fill='{color}'>{n:,}</text>"
        )
    out.append(
        f"<text x='{(panel.x0 + panel.x1) / 2}' y='{panel.bottom + 34}' {FONT} font-size='12' "
        "text-anchor='middle' fill='#333'>GPUs (log scale)</text>"
    )
    return out


def _ops(p: ScalePoint) -> Operations:
    assert p.operations is not None
    return p.operations


def _throughput_panel(feasible: list[ScalePoint], sizes: list[int]) -> _Panel:
    """Panel 1: effective and failure-free tokens/s against ideal linear scaling."""
    base = feasible[0]
    eff_tps0 = _ops(base).effective_tokens_per_s / base.num_gpus
    eff_pts = [(float(p.num_gpus), _ops(p).effective_tokens_per_s) for p in feasible]
    raw_pts = [(float(p.num_gpus), _ops(p).tokens_per_s) for p in feasible]
    ideal = [(float(p.num_gpus), eff_tps0 * p.num_gpus) for p in feasible]
    panel = _Panel(TOP, sizes, "Effective tokens/s (with checkpoints and failures) vs ideal")
    values = [v for _, v in eff_pts + raw_pts + ideal]
    panel.set_y(min(values), max(values), log=True)
    panel.line(ideal, GREY, dash="5,4")
    panel.line(raw_pts, "#9bb7dd", w=1.5)
    panel.line(eff_pts, BLUE)
    panel.dots(eff_pts, BLUE)
    panel.legend(
        [
            ("effective tokens/s", BLUE, ""),
            ("before failures", "#9bb7dd", ""),
            (f"ideal linear from {base.num_gpus:,}", GREY, "5,4"),
        ],
        where="top left",
    )
    return panel


def _efficiency_panel(
    curve: ScaleCurve, feasible: list[ScalePoint], sizes: list[int], notes: list[tuple[int, str]]
) -> _Panel:
    """Panel 2: per-GPU and marginal efficiency (%), the threshold, and the numbered notes."""
    base_n = feasible[0].num_gpus
    panel = _Panel(
        TOP + PANEL_H + GAP, sizes, f"Per-GPU efficiency vs {base_n:,} GPUs, and marginal"
    )
    eff = [(float(p.num_gpus), 100 * (p.efficiency or 0.0)) for p in feasible]
    marg = [
        (float(p.num_gpus), 100 * p.marginal_efficiency)
        for p in feasible
        if p.marginal_efficiency is not None
    ]
    vals = [v for _, v in eff + marg] + [100 * curve.threshold, 0.0]
    panel.set_y(min(vals), max(max(vals), 100.0), log=False, unit="%")
    thr = panel.ymap(100 * curve.threshold)
    panel.items.append(
        f"<line x1='{panel.x0}' x2='{panel.x1}' y1='{thr:.1f}' y2='{thr:.1f}' stroke='{RED}' "
        "stroke-width='1' stroke-dasharray='2,3'/>"
    )
    panel.line(eff, GREEN)
    panel.dots(eff, GREEN, [f"{v:.0f}%" for _, v in eff])
    panel.line(marg, ORANGE, w=1.5)
    panel.dots(marg, ORANGE)
    panel.legend(
        [
            ("per-GPU efficiency", GREEN, ""),
            ("marginal (per added GPU)", ORANGE, ""),
            (f"stops paying below {curve.threshold:.0%}", RED, "2,3"),
        ],
        where="bottom left",
    )
    for i, (n, _note) in enumerate(notes, start=1):
        v = next(v for m, v in eff if m == n)
        panel.marker(n, v, f"[{i}]", ORANGE)
    return panel


def _days_or_cost_panel(curve: ScaleCurve, feasible: list[ScalePoint], sizes: list[int]) -> _Panel:
    """Panel 3: days to the budget labelled with $ per million tokens, or $ per million tokens
    alone without a budget."""
    top = TOP + 2 * (PANEL_H + GAP)
    if curve.tokens is None:
        panel = _Panel(top, sizes, "$ per million tokens")
        usd = [(float(p.num_gpus), _ops(p).usd_per_million_tokens or 0.0) for p in feasible]
        panel.set_y(min(v for _, v in usd), max(v for _, v in usd), log=False)
        panel.line(usd, BLUE)
        panel.dots(usd, BLUE, [f"${usd_text(v)}" for _, v in usd])
        return panel
    panel = _Panel(
        top, sizes, f"Days to {format_tokens(curve.tokens)} tokens (labels: $ per million tokens)"
    )
    days = [(float(p.num_gpus), _ops(p).days or 0.0) for p in feasible]
    prices = [_ops(p).usd_per_million_tokens for p in feasible]
    labels = [f"${usd_text(usd)}" if usd is not None else "" for usd in prices]
    panel.set_y(
        min(v for _, v in days),
        max(v for _, v in days),
        log=True,
        unit=" d",
        fmt=lambda t: f"{t:,.4g}",
    )
    panel.line(days, BLUE)
    panel.dots(days, BLUE, labels)
    return panel


def _footnotes(
    curve: ScaleCurve,
    feasible: list[ScalePoint],
    notes: list[tuple[int, str]],
    infeasible: set[int],
) -> list[str]:
    """Where adding GPUs stops paying, the numbered layout changes, the sizes with no layout and
    those whose layout makes no progress."""
    stop, base_n = curve.stops_paying_at, feasible[0].num_gpus
    if stop is not None:
        foot = [
            f"Adding GPUs stops paying at {stop:,}: each GPU added there buys less than "
            f"{curve.threshold:.0%} of what a GPU did at {base_n:,}."
        ]
    else:
        foot = [
            f"Adding GPUs still pays up to {feasible[-1].num_gpus:,} (marginal efficiency "
            f">= {curve.threshold:.0%} at every step)."
        ]
    foot += [f"[{i}] {n:,} GPUs: {note}" for i, (n, note) in enumerate(notes, start=1)]
    stalled = {p.num_gpus for p in curve.points if p.layout is not None and not p.feasible}
    refused = {p.num_gpus for p in curve.points if p.layout is None and p.note != NO_FIT}
    settings = "no layout runs the job's settings"  # the table's note says which
    whys = ((NO_FIT, infeasible - stalled - refused), (settings, refused), ("no progress", stalled))
    for why, ns in whys:
        if ns:  # no progress: failures outpace the restarts and checkpoints (the table's note)
            foot.append(f"x: {why} at " + ", ".join(f"{n:,}" for n in sorted(ns)) + " GPUs")
    return foot


def scaling_svg(curve: ScaleCurve, title: str | None = None) -> str:
    """The scaling curve as an SVG document (a string)."""
    job = curve.job
    sizes = [p.num_gpus for p in curve.points]
    feasible = [p for p in curve.points if p.feasible]
    infeasible = {p.num_gpus for p in curve.points if not p.feasible}
    title = title or (
        f"{job.arch.name} on {job.cluster.gpu.name}: seq {job.seq_length}, "
        f"global batch {job.global_batch_size}"
        + (f", {format_tokens(curve.tokens)} tokens" if curve.tokens else "")
    )
    with_cost = any(_ops(p).usd_per_million_tokens for p in feasible)
    third = bool(feasible) and (curve.tokens is not None or with_cost)
    panels = 3 if third else 2
    notes = [(p.num_gpus, p.note) for p in feasible if p.note.startswith("efficiency up")]
    foot_h = 24 + 15 * (len(notes) + 2 + 1)
    height = TOP + panels * (PANEL_H + GAP) + 20 + foot_h
    body: list[str] = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"viewBox='0 0 {WIDTH} {height}'>",
        f"<rect width='{WIDTH}' height='{height}' fill='#fafafa'/>",
        f"<text x='{LEFT}' y='26' {FONT} font-size='17' font-weight='bold'>{escape(title)}</text>",
    ]
    if not feasible:
        body.append(
            f"<text x='{LEFT}' y='{TOP + 40}' {FONT} font-size='14' fill='{RED}'>"
            "No GPU count has a layout that fits.</text></svg>"
        )
        return "\n".join(body) + "\n"

    drawn = [_throughput_panel(feasible, sizes), _efficiency_panel(curve, feasible, sizes, notes)]
    if third:
        drawn.append(_days_or_cost_panel(curve, feasible, sizes))
    stop = curve.stops_paying_at
    for panel in drawn:
        if stop is not None:
            panel.vline(stop, RED, "stops paying" if panel is drawn[0] else "")
        for n in infeasible:
            x = panel.x(n)
            y = panel.bottom - 14
            panel.items.append(
                f"<text x='{x:.1f}' y='{y:.1f}' {FONT} font-size='14' text-anchor='middle' "
                f"fill='{GREY}'>&#215;</text>"
            )
        body.append(panel.svg())
    body += _x_axis(drawn[-1], sizes, infeasible)

    y = drawn[-1].bottom + 58
    for i, line in enumerate(_footnotes(curve, feasible, notes, infeasible)):
        body.append(
            f"<text x='{LEFT}' y='{y + 15 * i}' {FONT} font-size='11' fill='#333'>"
            f"{escape(line)}</text>"
        )
    body.append("</svg>")
    return "\n".join(body) + "\n"


def check_svg_path(path: Path, option: str = "--plot") -> None:
    """Only SVG is drawn: any other extension is bad input (checked before any work is done)."""
    if path.suffix.lower() != ".svg":
        raise InputError(f"{option}: only SVG is drawn; give a path ending in .svg (got {path})")


def write_svg(path: Path, svg: str, option: str = "--plot") -> None:
    """Write an SVG file; any other extension is bad input (`check_svg_path`)."""
    check_svg_path(path, option)
    try:
        path.write_text(svg, encoding="utf-8")
    except OSError as e:
        raise InputError(f"{option}: cannot write {path}: {e.strerror or e}") from None
