"""--tp-comm-overlap with its overlaps turned off: Megatron-LM d98e8a64 still initialises
Transformer Engine's TP communicators, their userbuffers, at start-up whenever --tp-comm-overlap
is given (megatron/training/initialize.py:164 `_initialize_tp_communicators`), whatever the four
fields that say which GEMMs use them (megatron/core/model_parallel_config.py:271-289). So the
peak is the overlapped run's (the same buffers and workspaces), while no GEMM overlaps: the step
is the one without --tp-comm-overlap (planner times every overlap or none; partly off reads off).

Oracle: planner's own memory and step models on the three lines, by that source reading."""

from __future__ import annotations

import tomllib

from test_megatron_startup import DENSE, TP2

from planner.inputs import megatron_args
from planner.inputs.plan import Plan, parse_plan
from planner.inputs.plan_writer import render
from planner.model import cost, memory

OFF = (
    "--tp-comm-overlap --disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs "
    "--disable-tp-comm-bulk-dgrad --disable-tp-comm-bulk-wgrad"
)


def _plan(extra: str) -> Plan:
    doc = megatron_args.read(DENSE + TP2 + extra, "h100-sxm-80gb", None, where="t.sh").doc
    return parse_plan(doc)


def test_userbuffers_counted_with_every_overlap_off() -> None:
    on, off, none = _plan("--tp-comm-overlap"), _plan(OFF), _plan("")
    peak = {k: memory.estimate(p.job, p.require_layout()).peak for k, p in locals().items()}
    step = {
        k: cost.estimate(p.job, p.require_layout()).step_time_s
        for k, p in (("on", on), ("off", off), ("none", none))
    }
    assert off.job.tp_userbuffers and not off.require_layout().tp_comm_overlap
    assert peak["off"] == peak["on"] > peak["none"]  # the buffers: before, off's was none's
    assert step["off"] == step["none"] > step["on"]


def test_the_plan_file_keeps_it() -> None:
    off = _plan(OFF)
    doc = megatron_args.read(DENSE + TP2 + OFF, "h100-sxm-80gb", None, where="t.sh").doc
    text = render(off.job, off.require_layout(), doc["model"], [])
    assert "tp_userbuffers = true" in text
    assert tomllib.loads(text)["training"]["tp_userbuffers"] is True
    assert parse_plan(tomllib.loads(text)).job.tp_userbuffers
