"""`planner scale`'s table (one row per GPU count of a scaling curve, `planner.search.scaling`)
and its `--json` object (`curve_dict`)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from planner.cli import report
from planner.inputs import units
from planner.ops import figures
from planner.search import scaling

SCALE_COLUMNS = (  # the tokens/s are effective (with failures), in a second line: no wider
    "GPUs",
    "layout",
    "tokens/s\n(eff.)",
    "tokens/s/GPU\n(eff.)",
    "efficiency",
    "marginal",
    "goodput",
    "$/M tokens",
    "days",
    "note",
)


def scale_rows(curve: scaling.ScaleCurve) -> list[tuple[str, ...]]:
    """One row of strings per size, in SCALE_COLUMNS order. The tokens/s are effective: with
    failures (failure-free x goodput), as `--json`'s `operations.effective_tokens_per_s` and
    `operations.effective_tokens_per_s_per_gpu` (`operations.tokens_per_s` and
    `performance.tokens_per_s_per_gpu` are failure-free); the efficiency is the per-GPU one
    over the first size's."""
    rows: list[tuple[str, ...]] = []
    for p in curve.points:
        o = p.operations
        if o is None or p.layout is None:  # no layout, or one that makes no progress
            lay = layout_text(curve, p) if p.layout is not None else "-"
            rows.append((f"{p.num_gpus:,}", lay, "-", "-", "-", "-", "-", "-", "-", p.note))
            continue
        usd = o.usd_per_million_tokens
        rows.append(
            (
                f"{p.num_gpus:,}",
                layout_text(curve, p),
                units.format_si(o.effective_tokens_per_s),
                f"{o.effective_tokens_per_s / p.num_gpus:,.0f}",
                f"{p.efficiency:.0%}" if p.efficiency is not None else "-",
                _marginal(p.marginal_efficiency),
                f"{o.resilience.goodput:.1%}",
                usd_text(usd),
                units.format_amount(o.days) if o.days is not None else "-",
                p.note,
            )
        )
    return rows


def scale_table(curve: scaling.ScaleCurve) -> Table:
    """`planner scale`: one row per GPU count (`scale_rows`)."""
    job = curve.job
    budget = f", {units.format_tokens(curve.tokens)} tokens" if curve.tokens else ""
    t = Table(
        title=f"Scaling {job.arch.name} on {job.cluster.gpu.name}, seq {job.seq_length}, "
        f"global batch {job.global_batch_size}{budget} (tokens/s eff.: with failures, "
        "failure-free x goodput)"
    )
    for col in SCALE_COLUMNS:
        t.add_column(col, justify="left" if col in ("layout", "note") else "right", overflow="fold")
    for p, row in zip(curve.points, scale_rows(curve), strict=True):
        style = "red" if p.num_gpus == curve.stops_paying_at else None
        t.add_row(*row, style=style)
    t.caption = scale_caption(curve)
    return t


def scale_caption(curve: scaling.ScaleCurve) -> str:
    """What the days and cost columns assume, or which option fills them."""
    notes = []
    if not curve.tokens:
        notes.append("days: give --tokens (the token budget)")
    o = next((p.operations for p in curve.points if p.operations is not None), None)
    if o is not None and o.price_usd_per_gpu_hour is None:
        notes.append("$/M tokens: give --price ($ per GPU-hour)")
    elif o is not None:
        notes.append(f"$/M tokens at ${o.price_usd_per_gpu_hour:g}/GPU-hour ({o.price_source})")
    return "; ".join(notes)


def _marginal(value: float | None) -> str:
    """A marginal efficiency as a percentage; one that rounds to 0% keeps a decimal, so that a
    loss does not print as "-0%" and a small gain shows."""
    if value is None:
        return "-"
    return f"{value:.0%}" if abs(value) >= 0.005 else f"{value:.1%}"


def layout_text(curve: scaling.ScaleCurve, p: scaling.ScalePoint) -> str:
    """The layout, and the `[torchtitan]` settings the search chose where they are not the job's
    ('... (reshard default->never)')."""
    assert p.layout is not None
    changed = scaling.titan_change(curve.job.titan, p.titan) if p.titan is not None else ""
    return p.layout.describe() + (f" ({changed[2:]})" if changed else "")


def usd_text(value: float | None) -> str:
    """Dollars per million tokens: cents from a dollar up, three significant digits below (two
    decimals printed 0.0182 and 0.0188 both as 0.02). The table's and the plot's labels."""
    if value is None:
        return "-"
    return f"{value:,.2f}" if value >= 1 else f"{value:.3g}"


def curve_dict(curve: scaling.ScaleCurve) -> dict[str, Any]:
    """`scale --json`: the points with their layouts, performance (as `suggest --json` prints
    it) and operations (`planner.ops.figures`: significant digits, never 0.0 for a figure that
    is not zero). A point whose layout makes no progress has its layout and performance, no
    operations; a torchtitan point its `[torchtitan]` settings (`torchtitan`) and those the
    search chose that differ from the job's (`torchtitan_assumed`, {} where none)."""
    pts = []
    job = curve.job
    for p in curve.points:
        d: dict[str, Any] = {"num_gpus": p.num_gpus, "feasible": p.feasible, "note": p.note}
        if p.layout is not None and p.performance is not None:
            d["parallel"] = report.layout_dict(p.layout)
            d["layout"] = p.layout.describe()
            d["performance"] = report.performance_dict(p.performance, job.arch.has_dsa)
        if p.titan is not None:
            d["torchtitan"] = p.titan.model_dump()
            own = job.titan.model_dump()
            d["torchtitan_assumed"] = {k: v for k, v in d["torchtitan"].items() if own[k] != v}
        if p.operations is not None:
            d["operations"] = figures.operations_dict(p.operations)
            d["efficiency"] = figures.significant(p.efficiency)
            d["marginal_efficiency"] = figures.significant(p.marginal_efficiency)
        pts.append(d)
    return {
        "model": job.arch.name,
        "gpu": job.cluster.gpu.name,
        "seq_length": job.seq_length,
        "global_batch_size": job.global_batch_size,
        "tokens": curve.tokens,
        "threshold": curve.threshold,
        "stops_paying_at": curve.stops_paying_at,
        "points": pts,
    }
