"""A launch file's header names the plan's `[cluster]` overrides of its catalog GPU, which its
prediction rests on and the file itself cannot carry (QA: mem40.toml's torchrun header said "of
38.8 GiB usable" on "8 x h100-sxm-80gb" while `check --megatron-args ... --gpu h100-sxm-80gb`
reads the catalog's 77.3).

Oracles: the plan text (its overrides) and the catalog file hardware_catalog/gpus/
h100-sxm-80gb.toml (memory_gib = 79.64, gpus_per_node = 8, host_memory_gib_per_node = 2048); a
plan without overrides names none (the golden files, none of whose plans overrides, are
unchanged)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import write

from planner.emit.launch import TARGETS, render
from planner.inputs.plan import load_plan
from planner.search.rules import check_plan

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
{cluster}
[training]
seq_length = 8192
global_batch_size = 32
{training}
[parallel]
tp = 2
pp = 1
micro_batch_size = 1
zero_stage = {zero}
recompute = "selective"
"""

MEGATRON = [t for t in TARGETS if not t.startswith("torchtitan")]
LEAD = "cluster overrides the prediction rests on"


def _text(tmp_path: Path, target: str, cluster: str, titan: bool = False) -> str:
    training = 'framework = "torchtitan"' if titan else ""
    text = PLAN.format(cluster=cluster, training=training, zero=3 if titan else 1)
    plan = check_plan(load_plan(write(tmp_path, text)))
    return render(plan, target)[1]


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if LEAD in line]


@pytest.mark.parametrize("target", MEGATRON)
def test_memory_override_is_named(tmp_path: Path, target: str) -> None:
    (line,) = _lines(_text(tmp_path, target, "memory_gib = 40.0"))
    assert "memory_gib = 40 (catalog 79.64)" in line
    assert "--gpu h100-sxm-80gb takes the catalog's figures" in line


def test_every_override_is_named_and_torchtitan_too(tmp_path: Path) -> None:
    cluster = "gpus_per_node = 4\nhost_memory_gib_per_node = 512\npower_limit_w = 500"
    for target, titan in (("torchrun", False), ("torchtitan", True), ("torchtitan-module", True)):
        (line,) = _lines(_text(tmp_path, target, cluster, titan))
        assert "gpus_per_node = 4 (catalog 8)" in line
        assert "host_memory_gib_per_node = 512 (catalog 2048)" in line
        assert "power_limit_w = 500 (catalog TDP" in line
        assert "tiers" not in line  # narrowed from the catalog's by the node size alone


@pytest.mark.parametrize("target", MEGATRON)
def test_no_override_no_line(tmp_path: Path, target: str) -> None:
    assert _lines(_text(tmp_path, target, "")) == []
