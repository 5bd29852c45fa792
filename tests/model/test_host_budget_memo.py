"""`host_memory.activation_budget` remembered per job under `host_memory.budget_key`: layouts
that share the key get the budget of a fresh computation (a brute force over layouts that differ
in every field the key leaves out, each budget computed with every memo forgotten: the oracle),
and the search's repeated questions of one key walk the ranks once."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import host_memory
from planner.model.job_memo import JobMemo


def _moe_job(offload: float) -> Job:
    """An MoE job that offloads part of its optimizer and stages its checkpoints, so that the
    budget reads the ZeRO stage, the degrees and the split."""
    base = job("qwen3-30b-a3b", "h100-sxm-80gb", 32, 4096, 256)
    return replace(base, optimizer_offload_fraction=offload)


SHAPES = [
    Layout(tp=1, pp=2, dp=16, ep=8, zero_stage=1),
    Layout(tp=2, pp=2, dp=8, ep=4, zero_stage=1, vpp=2),
    Layout(tp=2, pp=4, dp=4, ep=2, etp=1, zero_stage=1),
    Layout(tp=4, pp=1, dp=8, cp=1, ep=8, zero_stage=0),
]
"""Structures whose budgets differ (the key's fields)."""

OUTSIDE: list[dict[str, Any]] = [
    {},
    {"micro_batch_size": 2},
    {"moe_token_dispatcher_type": "flex"},
    {"tp_comm_overlap": True},
    {"ep_comm_overlap": True},
    {"recompute": "full"},
    {"microbatch_group_size_per_vp_stage": 2},
]
"""Fields `budget_key` leaves out, as the search's bases of one structure vary them."""


@pytest.mark.parametrize("offload", [0.0, 0.5])
def test_layouts_of_one_key_get_a_fresh_budget(offload: float) -> None:
    j = _moe_job(offload)
    for shape, zero in itertools.product(SHAPES, (0, 1, 2)):
        lay0 = shape.with_(zero_stage=zero)
        fresh = []
        for change in OUTSIDE:
            lay = lay0.with_(**change)
            assert host_memory.budget_key(lay) == host_memory.budget_key(lay0)
            JobMemo.forget_all()  # the oracle: computed from nothing remembered
            fresh.append(host_memory.activation_budget(j, lay))
        # every field outside the key leaves the budget as it is, bit for bit
        assert len(set(fresh)) == 1, (lay0.describe(), fresh)
        # and the remembered answer, asked after another layout of the key, is that one
        JobMemo.forget_all()
        host_memory.activation_budget(j, lay0.with_(micro_batch_size=4))
        assert host_memory.activation_budget(j, lay0) == fresh[0]


def test_budgets_of_other_keys_differ_where_their_fields_do() -> None:
    """The key is not too coarse for this test to mean anything: the shapes' budgets differ."""
    j = _moe_job(0.5)
    JobMemo.forget_all()
    budgets = {host_memory.activation_budget(j, s) for s in SHAPES}
    assert len(budgets) == len(SHAPES)


def test_one_key_walks_the_ranks_once(monkeypatch: pytest.MonkeyPatch) -> None:
    j = _moe_job(0.5)
    JobMemo.forget_all()
    walks = 0
    real = host_memory.fixed_bytes

    def counted(*args: object, **kw: object) -> float:
        nonlocal walks
        walks += 1
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(host_memory, "fixed_bytes", counted)
    lay = SHAPES[1]
    for change in OUTSIDE:
        host_memory.activation_budget(j, lay.with_(**change))
    # one walk for all seven layouts of the key (each rounding is its own question)
    assert walks == 1
    host_memory.activation_budget(j, lay, "ceiling")
    assert walks == 2
