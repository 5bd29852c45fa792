"""`[torchtitan] compile_loss`: read from a job config TOML's and a Python configuration's compile
components, and written by both launch targets, which read back as the plan.

Oracles: pytorch/torchtitan e347b1e5 torchtitan/components/loss.py:33-35 (the loss compiled where
compile.enable and "loss" in compile.components, with compile.backend), config/job_config.py:725-727
(components default ["model", "loss"], backend "inductor"), train_configs/deepseek_v3_16b.toml:67-69
(enable = true, components = ["loss"]); b5bcd76c components/loss.py:245-252 (the same test),
config/configs.py:301 (the same default), deepseek_v3/config_registry.py:172
(CompileConfig(enable=True, components=["loss"])). Only inductor fuses (`torchtitan_refusals.
UNFUSED_BACKENDS`): another backend's loss reads as eager."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import write
from titan_module_check import check_module

from planner.emit import torchtitan as emit_toml
from planner.emit import torchtitan_module
from planner.inputs import torchtitan_config
from planner.inputs.plan import Plan, load_plan
from planner.search.rules import check_plan

TOML = """
[model]
name = "deepseek_v3"
flavor = "16B"
[training]
local_batch_size = 4
seq_len = 4096
[parallelism]
data_parallel_shard_degree = -1
expert_parallel_degree = 8
expert_tensor_parallel_degree = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""
"""e347b1e5's deepseek_v3_16b.toml's parallelism, batch and checkpointing; [compile] appended."""


def _toml(tmp_path: Path, compile_: str) -> Plan:
    path = write(tmp_path, TOML + compile_, "job.toml")
    return torchtitan_config.load(path, "h100-sxm-80gb", 8)


@pytest.mark.parametrize(
    ("compile_", "model", "loss"),
    [
        ('[compile]\nenable = true\ncomponents = ["loss"]\n', False, True),  # the 16B's own
        ('[compile]\nenable = true\ncomponents = ["model", "loss"]\n', True, True),
        ('[compile]\nenable = true\ncomponents = ["model"]\n', True, False),
        ("[compile]\nenable = true\n", True, True),  # the default components: both
        ('[compile]\nenable = false\ncomponents = ["loss"]\n', False, False),
        ('[compile]\nenable = true\ncomponents = ["loss"]\nbackend = "aot_eager"\n', False, False),
        ("", False, False),  # compile.enable's default: off
    ],
)
def test_the_toml_compiles_the_loss_where_its_components_say(
    tmp_path: Path, compile_: str, model: bool, loss: bool
) -> None:
    titan = _toml(tmp_path, compile_).job.titan
    assert (titan.compile, titan.compile_loss) == (model, loss)


@pytest.mark.parametrize(("baseline", "loss"), [("deepseek_v3_16b", True), ("llama3_8b", False)])
def test_a_python_configuration_compiles_the_loss_as_its_baseline(
    tmp_path: Path, baseline: str, loss: bool
) -> None:
    """deepseek_v3_16b sets CompileConfig(enable=True, components=["loss"]); llama3_8b leaves
    compile at its default, enable False (b5bcd76c llama3/config_registry.py:194-226)."""
    model = baseline.split("_")[0] + ("_v3" if baseline.startswith("deepseek") else "")
    path = tmp_path / "job.py"
    path.write_text(
        f"from torchtitan.models.{model}.config_registry import {baseline}\n\n\n"
        f"def job():\n    config = {baseline}()\n    return config\n"
    )
    titan = torchtitan_config.load(path, "h100-sxm-80gb", 8).job.titan
    assert (titan.compile, titan.compile_loss) == (False, loss)


PLAN = (
    '[model]\nname = "deepseek-v2-lite"\n'
    '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
    '[training]\nframework = "torchtitan"\nseq_length = 4096\nglobal_batch_size = 8\n'
    '[parallel]\nep = 8\nmicro_batch_size = 1\nzero_stage = 3\nrecompute = "none"\n'
)


@pytest.mark.parametrize(
    ("section", "components"),
    [
        ("compile_loss = true\n", ["loss"]),
        ("compile = true\n", ["model"]),
        ("compile = true\ncompile_loss = true\n", ["model", "loss"]),
    ],
)
def test_both_targets_write_the_components_and_read_them_back(
    tmp_path: Path, section: str, components: list[str]
) -> None:
    plan = check_plan(load_plan(write(tmp_path, PLAN + "[torchtitan]\n" + section)))
    text = emit_toml.render(plan, "d1")
    assert f"components = {components!r}".replace("'", '"') in text
    module = torchtitan_module.render(plan, "d1")
    assert f"CompileConfig(enable=True, components={components!r}, " in module
    check_module(module)
    titan = plan.job.titan
    for name, body in (("back.toml", text), ("planner_job.py", module)):
        back = torchtitan_config.load(write(tmp_path, body, name), "h100-sxm-80gb", 8)
        assert (back.job.titan.compile, back.job.titan.compile_loss) == (
            titan.compile,
            titan.compile_loss,
        )
