"""Megatron-LM settings a torchtitan plan was priced with but no torchtitan target runs (QA round
trip): refused, exit 2 naming the field (`rules.torchtitan_megatron`); and those the model prices
as nothing under torchtitan and `inputs.inert` warns of, left to that warning.

Oracles, refused:
- test_mode: Megatron-LM's --test-mode real-time checks (planner.model.host.realtime_test_s: QA's
  Qwen3 30B-A3B plan's step +83%); torchtitan has no test mode (e347b1e5 job_config.py:243
  Training, b5bcd76c config/configs.py:36 TrainingConfig: no such field).
- moe_expert_capacity_factor: torchtitan's MoE is dropless (e347b1e5 torchtitan models moe
  moe.py:21-41, MoEArgs: no capacity; b5bcd76c models common moe.py: none either).
- rl_kv_cache_gib, rl_inference_parallel, vision_encoder: Megatron-LM's RL step and LLaVA, which
  `emit.launch` already refuses for the Megatron targets; torchtitan's trainer holds neither.
- masked_softmax_fusion, fsdp_double_buffer, suggested_communication_unit_size: Megatron's local
  attention kernel and Megatron-FSDP's buffers, which `inputs.inert` does not name for torchtitan.
Left, inert and warned: moe_router_padding, moe_grouped_tensor (inert.MEGATRON_TRAINING), their
figures those of the plan without them and of the launched TOML read back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

PLAN = """[model]
name = "{model}"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16
[training]
seq_length = 4096
global_batch_size = 64
framework = "torchtitan"
{training}
[parallel]
tp = 1
pp = 1
ep = {ep}
micro_batch_size = 1
zero_stage = 3
recompute = "full"
{parallel}
[torchtitan]
compile = true
"""

MOE = "qwen3-30b-a3b"


def _plan(tmp_path: Path, training: str = "", parallel: str = "", model: str = MOE) -> Path:
    path = tmp_path / "plan.toml"
    ep = 8 if model == MOE else 1
    text = PLAN.format(model=model, training=training, parallel=parallel, ep=ep)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("training", "parallel", "field"),
    [
        ("test_mode = true", "", "training.test_mode"),
        ("moe_expert_capacity_factor = 1.0", "", "training.moe_expert_capacity_factor"),
        ("rl_kv_cache_gib = 1.0", "", "training.rl_kv_cache_gib"),
        ("rl_inference_parallel = [1, 1, 8, 1]", "", "training.rl_inference_parallel"),
        ("vision_encoder = [24, 576, 14]", "", "training.vision_encoder"),
        ("masked_softmax_fusion = false", "", "training.masked_softmax_fusion"),
        ("", "fsdp_double_buffer = true", "parallel.fsdp_double_buffer"),
        ('fsdp_grad_comm_dtype = "fp32"', "", "training.fsdp_grad_comm_dtype"),
        (
            "",
            "suggested_communication_unit_size = 100000000",
            "parallel.suggested_communication_unit_size",
        ),
    ],
)
def test_megatron_settings_exit_2_on_torchtitan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], training: str, parallel: str, field: str
) -> None:
    plan = _plan(tmp_path, training, parallel)
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 2 and f"{field}: a Megatron-LM setting torchtitan does not run" in err
    for target in ("torchtitan", "torchtitan-module"):
        code, _, err = run(["launch", str(plan), "--target", target], capsys)
        assert code == 2 and field in err
    # the same plan under Megatron-LM (no [torchtitan] table) is taken
    megatron = tmp_path / "m.toml"
    text = plan.read_text().replace('framework = "torchtitan"\n', "")
    megatron.write_text(text.split("[torchtitan]")[0])
    code, _, err = run(["check", str(megatron)], capsys)
    assert code in (0, 1), err


def _figures(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, float]:
    code, out, err = run(["check", *argv, "--json"], capsys)
    assert code in (0, 1), err
    doc = json.loads(out)
    return doc["memory"]["peak_gib"], doc["performance"]["step_time_s"]


@pytest.mark.parametrize("line", ["moe_router_padding = true", "moe_grouped_tensor = true"])
def test_inert_megatron_settings_are_warned_and_priced_as_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    plain = _figures([str(_plan(tmp_path))], capsys)
    plan = _plan(tmp_path, line)
    code, _, err = run(["check", str(plan)], capsys)
    assert code in (0, 1) and "has no effect: a Megatron-LM setting torchtitan does not read" in err
    assert _figures([str(plan)], capsys) == plain
    out = tmp_path / "out"
    code, _, err = run(["launch", str(plan), "--target", "torchtitan", "--out", str(out)], capsys)
    assert code == 0, err
    assert _figures(["--torchtitan-config", str(out / "torchtitan.toml")], capsys) == plain
