"""explain's and check's claims that a QA pass found wrong: the CUDA-graphs switch the host-bound
note names is one `planner check` accepts; the host's eager kernel issue is named the top cost
where it is the largest cost besides compute; host advice names expert TP's value, not None; a
feature that saves nothing says so, not "save -0.000 s".

Oracles: `rules.violations` (what `planner check` refuses, `rules.check_plan`) on the plan with
the named setting applied; the step less the same layout's graphed step (two estimates, their
difference by hand); the plan's own `Layout.expert_tp`."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
from cli_run import run

from planner.cli import explain_notes, render, report, switch_notes
from planner.inputs.plan import parse_plan
from planner.inputs.units import GIB
from planner.model import cost, host_memory
from planner.model.performance import (
    BOTTLENECK_MIN_SHARE,
    COST_NAMES,
    HOST_ISSUE,
    Performance,
    StepBreakdown,
)
from planner.search import host_advice, rules

V2_LITE: dict[str, Any] = {
    "model": {"name": "deepseek-v2-lite"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {"seq_length": 4096, "global_batch_size": 64, "precision": "bf16"},
    "parallel": {
        "tp": 1, "pp": 1, "ep": 8, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none",
        "offload_modules": ["core_attn"],
    },
}  # fmt: skip
"""DeepSeek-V2-Lite on 8 H100 with core attention offloaded (QA's p1.toml): eager, host-bound."""

L8_TP8: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 8},
    "training": {"seq_length": 2048, "global_batch_size": 64, "precision": "bf16"},
    "parallel": {"tp": 8, "pp": 1, "micro_batch_size": 1, "zero_stage": 1, "recompute": "none"},
}
"""Llama 3.1 8B at tp 8 on 2,048 tokens (QA's p4.toml, tp=8): small GEMMs, the host's issue
takes about half the step."""


def test_the_graphs_switch_named_is_one_check_accepts() -> None:
    # Megatron's local graphs refuse offloading core_attn (features._graph_conflict: only
    # expert_fc1, moe_act, fused_group_mlp; TransformerConfig d98e8a64); Transformer Engine's
    # run it. The note used to advise `training.cuda_graphs = true`, which check refuses.
    p = parse_plan(V2_LITE)
    job, lay = p.job, p.require_layout()
    assert not rules.violations(job, lay)
    local = replace(job, cuda_graphs=True)
    assert "offload_graphs" in {v.rule for v in rules.violations(local, lay)}
    te = replace(job, cuda_graphs=True, cuda_graph_impl="transformer_engine")
    assert not rules.violations(te, lay)  # what the note now names, check accepts
    perf = cost.estimate(job, lay)
    text = explain_notes.host_text(job, lay, perf)
    assert text is not None
    assert "(training.cuda_graphs = true) would remove it" not in text
    assert 'training.cuda_graph_impl = "transformer_engine" runs it' in text
    # its seconds are the eager step less the step under the graphs it names
    extra = perf.step_time_s - cost.estimate(te, lay).step_time_s
    assert f"adds {extra:.3f} s" in text


def test_a_plan_no_graphs_run_is_advised_none() -> None:
    # graphed recompute of core attention with attention dropout: every implementation refuses
    # it (rules.graphs: "attention dropout is not supported with graphed attention
    # recomputation"); the note may say why, but names no implementation that "runs it"
    d = {
        **L8_TP8,
        "training": {**L8_TP8["training"], "attention_dropout": True},
        "parallel": {
            **L8_TP8["parallel"], "recompute": "selective", "recompute_modules": ["core_attn"],
        },
    }  # fmt: skip
    p = parse_plan(d)
    job, lay = p.job, p.require_layout()
    for impl in (None, "transformer_engine", "full_iteration"):
        graphed = replace(job, cuda_graphs=True, cuda_graph_impl=impl)
        assert rules.violations(graphed, lay)
    text = explain_notes.host_text(job, lay, cost.estimate(job, lay))
    assert text is None or ("runs it" not in text and "would remove it, for" not in text)


def test_the_host_issue_is_the_top_cost_where_it_is_the_largest() -> None:
    # the host note says the eager issue adds about half the step: explain's verdict, the
    # JSON's bottleneck and its figure say the same, not "compute-bound"
    p = parse_plan(L8_TP8)
    job, lay = p.job, p.require_layout()
    perf = cost.estimate(job, lay)
    graphed = replace(job, cuda_graphs=True)
    assert not rules.violations(graphed, lay)
    issue = perf.step_time_s - cost.estimate(graphed, lay).step_time_s
    assert switch_notes.host_seconds(job, lay) == pytest.approx(issue)
    b = perf.breakdown
    assert all(issue > float(getattr(b, f)) for f in COST_NAMES)
    assert issue >= BOTTLENECK_MIN_SHARE * perf.step_time_s
    share = issue / perf.step_time_s
    line = render.top_cost_text(perf, issue)
    assert line == f"largest cost besides compute: {HOST_ISSUE} ({share:.0%} of the step)"
    d = report.performance_dict(perf, False, issue)
    assert d["bottleneck"] == HOST_ISSUE and d["host_issue_s"] == round(issue, 4)


def test_explain_and_its_json_name_the_host_issue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 2048\nglobal_batch_size = 64\n"
        '[parallel]\ntp = 8\npp = 1\nmicro_batch_size = 1\nzero_stage = 1\nrecompute = "none"\n'
    )
    code, out, _ = run(["explain", str(path)], capsys)
    assert code == 0 and "host-bound:" in out
    assert "compute-bound" not in out and f"besides compute: {HOST_ISSUE}" in out
    code, out, _ = run(["explain", str(path), "--json"], capsys)
    assert code == 0 and json.loads(out)["performance"]["bottleneck"] == HOST_ISSUE


def test_a_synthetic_host_issue_beats_a_smaller_cost_only() -> None:
    # 18 + 1 + 1 = 20 s: the bubble is 1 / 20 = 5%; a host issue of 1.5 s (7.5%, inside the
    # compute) is the larger and is named; one of 0.5 s is not
    zero = {f.name: 0.0 for f in fields(StepBreakdown)}
    b = StepBreakdown(**(zero | {"compute": 18.0, "bubble": 1.0, "other": 1.0}))
    p = Performance(b, b.step_time, 1.0, 1.0, 1.0, 1.0, 0.5)
    assert p.bottleneck() == "bubble"
    assert p.bottleneck(1.5) == HOST_ISSUE and p.top_cost(1.5) == (HOST_ISSUE, 1.5)
    assert p.bottleneck(0.5) == "bubble"


def test_host_advice_names_expert_tp_not_none(capsys: pytest.CaptureFixture[str]) -> None:
    # Mixtral 8x7B at tp 2, etp unset (it follows tp: Layout.expert_tp = 2), over its host
    # memory: the advice's etp change names 2, as advice.memory_changes does, not None. Nodes
    # of 424 GiB (53 a GPU, 21 usable) for the offloaded groups, and the pinned staging of the
    # rank's checkpoint share (planner.model.host_checkpoint, every ZeRO-1 Megatron plan: the
    # model's own `HostMemory.checkpoint`, x 8 GPUs a node) on top: without it no single change
    # fits the host, and only ZeRO 2, which stages nothing, is offered, paired
    d: dict[str, Any] = {
        "model": {"name": "mixtral-8x7b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16, "host_memory_gib_per_node": 424},
        "training": {"seq_length": 4096, "global_batch_size": 256},
        "parallel": {
            "tp": 2, "pp": 2, "ep": 4, "micro_batch_size": 2, "zero_stage": 1,
            "recompute": "none", "offload_modules": ["expert_fc1", "moe_act"],
        },
    }  # fmt: skip
    p = parse_plan(d)
    staged = host_memory.estimate(p.job, p.require_layout()).checkpoint
    d["cluster"]["host_memory_gib_per_node"] += 8 * staged / GIB
    p = parse_plan(d)
    job, lay = p.job, p.require_layout()
    assert host_memory.estimate(job, lay).activations > 21 * GIB  # over what it may offload
    assert lay.etp is None and lay.expert_tp == 2
    changes = [c.describe() for c in host_advice.host_changes(job, lay)]
    assert not any(" None ->" in c for c in changes), changes
    assert any(c.startswith("etp 2 -> 1") for c in changes), changes


def test_a_feature_that_saves_nothing_says_so() -> None:
    # explain_notes' fused-MLP and FP8-attention notes print the step without the feature less
    # the step with it; a difference under a thousandth of a second printed "save -0.000 s"
    for saved, want in ((0.25, "save 0.250 s of the 10.250 s step"), (-1e-5, "save nothing")):
        line = explain_notes.saving_text(saved, 10.0, "x")
        assert line.startswith(want) and "-0.000" not in line
