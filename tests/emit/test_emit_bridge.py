"""planner launch --target megatron-bridge: a Megatron-Bridge ConfigContainer override.

Oracle: tests/data/megatron_bridge_config_schema.json, the fields (with annotations) of the
dataclasses each ConfigContainer section holds in Megatron-Bridge and the Megatron-LM commit it
pins, and the mixed-precision presets Bridge registers, all derived from those files with
Python's ast; every emitted field must be one, with a value its annotation takes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from paths import TESTS

from planner.emit.launch import render
from planner.inputs.plan import load_plan

SCHEMA = json.loads((TESTS / "data" / "megatron_bridge_config_schema.json").read_text())
PLANS = sorted((TESTS / "data" / "plans").glob("launch-*.toml"))


def _fits(annotation: str, value: Any) -> bool:
    """Whether a YAML value fits an annotation as written (Optional / Union / Literal / List)."""
    a = annotation.replace(" ", "")
    if value is None:
        return "Optional[" in a or "None" in a
    if isinstance(value, bool):
        return "bool" in a
    if isinstance(value, int):
        return bool(re.search(r"\bint\b|\bfloat\b", a))
    if isinstance(value, float):
        return "float" in a
    if isinstance(value, str):
        literals = re.findall(r"Literal\[([^\]]*)\]", a)
        if literals and not re.search(r"\bstr\b", a):
            return any(repr(value) in lit.replace('"', "'") for lit in literals)
        return bool(re.search(r"\bstr\b", a)) or any(repr(value) in x for x in literals)
    if isinstance(value, list):
        return "List[str]" in a or "list[str]" in a
    return False


@pytest.mark.parametrize("plan_path", PLANS, ids=lambda p: p.stem)
def test_bridge_accepts_the_override(plan_path: Path) -> None:
    doc = yaml.safe_load(render(load_plan(plan_path), "megatron-bridge")[1])
    assert doc["mixed_precision"] in SCHEMA["mixed_precision_presets"]
    for section, fields in doc.items():
        if section == "mixed_precision":
            continue
        known = SCHEMA["sections"][section]
        for name, value in fields.items():
            assert name in known, f"{section}.{name}"
            assert _fits(known[name], value), f"{section}.{name} = {value!r} ({known[name]})"


def test_the_override_carries_the_layout() -> None:
    # oracle: the plan file tests/data/plans/launch-llama3.1-70b.toml (tp 8, pp 4, vpp 5, mbs 1)
    plan = load_plan(TESTS / "data" / "plans" / "launch-llama3.1-70b.toml")
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    lay = plan.require_layout()
    m = doc["model"]
    assert (m["tensor_model_parallel_size"], m["pipeline_model_parallel_size"]) == (lay.tp, lay.pp)
    assert m["virtual_pipeline_model_parallel_size"] == lay.vpp
    assert doc["train"]["micro_batch_size"] == lay.micro_batch_size
    assert doc["ddp"]["use_distributed_optimizer"] is (lay.zero_stage >= 1)
    assert doc["comm_overlap"]["tp_comm_overlap"] is lay.tp_comm_overlap
