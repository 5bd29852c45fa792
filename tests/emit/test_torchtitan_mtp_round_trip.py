"""DeepSeek-V3's MTP layers through the torchtitan launch targets: the module target (pytorch/
torchtitan b5bcd76c) writes model_registry(..., num_mtp_layers=N) and MTPLoss (models/deepseek_v3/
__init__.py:616-628, mtp.py:321-406; config_registry.py:76-82 sets them so), and reads back as its
plan; the TOML target (e347b1e5, no MTP module) refuses it, naming the field.

Oracles: the plan itself (the same MTP depths, loss weight, step time and peak memory read back),
and tests/data/torchtitan_config_schema.json (benchmarks/torchtitan_schema.py, mtp.py among its
files) for every name and keyword the module uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_emit_torchtitan_module import check_module

from planner.emit.launch import render
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

PLAN = """[model]
name = "deepseek-v3"
[cluster]
gpu = "h200-sxm-141gb"
num_gpus = 512
[training]
framework = "torchtitan"
seq_length = 4096
global_batch_size = 512
precision = "bf16"
[parallel]
ep = 64
zero_stage = 3
recompute = "full"
[torchtitan]
num_mtp_layers = 1
{scale}"""


@pytest.mark.parametrize("scale", ["", "mtp_scale = 0.5\n"])
def test_the_module_keeps_the_mtp_layers(tmp_path: Path, scale: str) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(scale=scale))
    plan = check_plan(load_plan(path))
    _, module = render(plan, "torchtitan-module", "job")
    assert "model_registry('671B', num_mtp_layers=1)" in module
    assert "from torchtitan.models.deepseek_v3.mtp import MTPLoss" in module
    weight = "mtp_scale=0.5, " if scale else ""
    want = f"config.loss = MTPLoss.Config({weight}global_vocab_size=decoder_vocab_size("
    assert want in module
    assert "ChunkedLossWrapper" not in module and "CrossEntropyLoss" not in module
    check_module(module)  # every import, attribute and keyword as b5bcd76c defines it
    back_path = tmp_path / "planner_job.py"
    back_path.write_text(module)
    back = check_plan(torchtitan_config.load(back_path, None, None))
    job, again = plan.job, back.job
    assert again.titan.num_mtp_layers == 1 and again.arch.mtp_num_layers == 1
    assert again.titan.mtp_scale == job.titan.mtp_scale
    lay, got = plan.require_layout(), back.require_layout()
    assert cost.estimate(again, got).step_time_s == cost.estimate(job, lay).step_time_s
    assert memory.estimate(again, got).peak == memory.estimate(job, lay).peak


def test_the_toml_target_refuses_mtp(tmp_path: Path) -> None:
    """e347b1e5's models/deepseek_v3 has no MTP module: the TOML cannot ask for it."""
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(scale=""))
    plan = check_plan(load_plan(path))
    with pytest.raises(InputError, match=r"torchtitan.num_mtp_layers: 1: torchtitan e347b1e5 has"):
        render(plan, "torchtitan", "job")
