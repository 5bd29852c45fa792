"""What the torchtitan launch targets write where torchtitan runs otherwise than the plan says.

Oracles: e347b1e5 components/quantization/float8.py:87-90 (enable_fsdp_float8_all_gather only
where parallel_dims.dp_shard_enabled, dp_shard > 1, parallel_dims.py:322-323); b5bcd76c
components/optimizer/optimizer.py:109-123 (the "fused_opt_states_bf16" implementation) and
e347b1e5 components/optimizer.py:300 (for-loop, foreach, fused only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plan_text import write

from planner.emit import torchtitan, torchtitan_module
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.search.rules import check_plan

PLAN = """[model]
name = "llama3.1-70b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 64
[training]
seq_length = 16384
global_batch_size = 8
precision = "fp8"
fp8_recipe = "tensorwise"
framework = "torchtitan"
{training}
[parallel]
tp = 8
pp = 4
dp = 1
cp = 2
micro_batch_size = 1
zero_stage = 3
recompute = "full"
sequence_parallel = true
[torchtitan]
float8_all_gather = true
"""

PEAK = re.compile(r"peak memory ([0-9.]+) GiB")


def test_no_float8_all_gather_written_at_shard_degree_1(tmp_path: Path) -> None:
    """dp 1 (shard degree 1, cp 2): the file writes it off and its header predicts the bf16
    copies, as the file reads back."""
    plan = check_plan(load_plan(write(tmp_path, PLAN.format(training=""))))
    text = torchtitan.render(plan, "job")
    assert "enable_fsdp_float8_all_gather = false" in text
    (tmp_path / "job.toml").write_text(text)
    back = torchtitan_config.load(tmp_path / "job.toml", None, 64)
    assert not back.job.titan.float8_all_gather
    off = PLAN.format(training="").replace("float8_all_gather = true", "")
    header = PEAK.search(text)
    plain = PEAK.search(torchtitan.render(check_plan(load_plan(write(tmp_path, off))), "job"))
    assert header is not None and plain is not None and header.group(1) == plain.group(1)


def test_bf16_moments_by_target(tmp_path: Path) -> None:
    text = PLAN.format(training='optimizer_state_dtype = "bf16"').replace(
        "float8_all_gather = true", ""
    )
    text = text.replace('precision = "fp8"\nfp8_recipe = "tensorwise"\n', "")
    plan = check_plan(load_plan(write(tmp_path, text)))
    with pytest.raises(InputError, match=r"optimizer_state_dtype: bf16: .*optimizer.py:300"):
        torchtitan.render(plan, "job")
    module = torchtitan_module.render(plan, "job")
    assert 'config.optimizer.implementation = "fused_opt_states_bf16"' in module
    (tmp_path / "planner_job.py").write_text(module)
    back = torchtitan_config.load(tmp_path / "planner_job.py", "h100-sxm-80gb", 64)
    assert back.job.optimizer_state_dtype == "bf16"
