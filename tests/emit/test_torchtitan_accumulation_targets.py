"""torchtitan's gradient accumulation under pipelining in its files: `check --torchtitan-config`
reads a TOML or a Python configuration whose step is several pipeline schedules as `[torchtitan]
gradient_accumulation_steps` (it exited 2), and `launch --target torchtitan` /
`torchtitan-module` write what that torchtitan runs as k schedules a step, read back to the plan.

Oracles: torchtitan's source for what a file means (e347b1e5 train.py:195-215,
gradient_accumulation_steps = global_batch_size / (local_batch_size x dp), each one
pp_schedule.step of local_batch_size / pipeline_parallel_microbatch_size micro-batches,
train.py:502-511, :561; b5bcd76c trainer.py:409-428, num_tokens_per_train_step over
num_tokens_per_microbatch_per_dp_rank x num_pp_microbatches x dp, each group one
pp_schedule.step, :827, :856-899), hand arithmetic for the numbers, and the plan itself for the
round trips."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from plan_text import titan_job, write

from planner.emit.launch import render
from planner.inputs import torchtitan_config
from planner.inputs.plan import Plan, load_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

PLAN = (
    titan_job()
    + """\
[parallel]
pp = 2
dp = 4
micro_batch_size = 1
zero_stage = 3
recompute = "selective"
[torchtitan]
gradient_accumulation_steps = {k}
"""
)

TOML = """\
# planner-gpu: h100-sxm-80gb
[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = {local}
global_batch_size = 32
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 4
pipeline_parallel_degree = 2
pipeline_parallel_microbatch_size = 1
[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"
"""


def _plan(tmp_path: Path, k: int) -> Plan:
    return check_plan(load_plan(write(tmp_path, PLAN.format(k=k), f"plan{k}.toml")))


def _same(back: Plan, plan: Plan) -> None:
    """The plan read back is the plan: its job, its layout's fields, its estimates."""
    lay, got = plan.require_layout(), back.require_layout()
    k = plan.job.titan.gradient_accumulation_steps
    assert (back.job.titan.gradient_accumulation_steps, back.job.global_batch_size) == (
        k,
        plan.job.global_batch_size,
    )
    fields = ("tp", "pp", "dp", "cp", "vpp", "micro_batch_size", "recompute", "zero_stage")
    assert {f: getattr(got, f) for f in fields} == {f: getattr(lay, f) for f in fields}
    assert cost.estimate(back.job, got).step_time_s == cost.estimate(plan.job, lay).step_time_s
    assert memory.estimate(back.job, got).peak == memory.estimate(plan.job, lay).peak


def test_a_toml_of_two_schedules_a_step_reads_as_k_2(tmp_path: Path) -> None:
    """global_batch_size 32 = 2 x local_batch_size 4 x dp 4 at pp 2: two pp_schedule.step calls
    of 4 micro-batches a step (it exited 2, 'which planner does not model'); local 8 is one
    schedule of 8, k = 1, the same layout and a shorter step (one fill and drain)."""
    path = tmp_path / "job.toml"
    path.write_text(TOML.format(local=4))
    two = check_plan(torchtitan_config.load(path, None, None))
    assert two.job.titan.gradient_accumulation_steps == 2 and two.job.global_batch_size == 32
    lay = two.require_layout()
    assert (lay.pp, lay.dp, lay.micro_batch_size, lay.num_microbatches(32)) == (2, 4, 1, 8)
    _same(two, _plan(tmp_path, 2))
    path.write_text(TOML.format(local=8))
    one = check_plan(torchtitan_config.load(path, None, None))
    assert one.job.titan.gradient_accumulation_steps == 1 and one.require_layout() == lay
    assert cost.estimate(one.job, lay).step_time_s < cost.estimate(two.job, lay).step_time_s


def test_a_python_configuration_of_two_schedules_reads_as_k_2(tmp_path: Path) -> None:
    """num_tokens_per_train_step 32 x 8192 over num_tokens_per_microbatch_per_dp_rank 8192 x
    num_pp_microbatches 4 x dp 4: two groups of 4 micro-batches a step, each one schedule."""
    path = tmp_path / "planner_job.py"
    path.write_text(
        "from torchtitan.config import ParallelismConfig\n"
        "from torchtitan.distributed.activation_checkpoint import SelectiveAC\n"
        "from torchtitan.models.llama3.config_registry import llama3_8b\n\n\n"
        "def planner_job():\n"
        "    config = llama3_8b()\n"
        "    config.parallelism = ParallelismConfig(data_parallel_shard_degree=4,\n"
        "        pipeline_parallel_degree=2, num_pp_microbatches=4)\n"
        "    config.training.num_tokens_per_microbatch_per_dp_rank = 8192\n"
        "    config.training.num_tokens_per_train_step = 32 * 8192\n"
        "    config.training.max_context_length = 8192\n"
        "    config.training.disable_cuda_graphs = True\n"
        "    config.activation_checkpoint = SelectiveAC.Config()\n"
        "    config.profiler.enable_profiling = False\n"
        "    return config\n"
    )
    two = check_plan(torchtitan_config.load(path, "h100-sxm-80gb", None))
    assert two.job.titan.gradient_accumulation_steps == 2 and two.job.global_batch_size == 32
    lay = two.require_layout()
    assert (lay.pp, lay.dp, lay.micro_batch_size) == (2, 4, 1)


@pytest.mark.parametrize("k", [1, 2])
def test_the_toml_target_writes_one_schedules_batch(tmp_path: Path, k: int) -> None:
    """training.local_batch_size is one schedule's per-rank batch, 32 / (dp 4 x k), beside
    global_batch_size 32: torchtitan runs 32 / (local x 4) = k schedules; read back, the plan."""
    plan = _plan(tmp_path, k)
    text = render(plan, "torchtitan")[1]
    t = tomllib.loads(text)["training"]
    assert (t["local_batch_size"], t["global_batch_size"]) == (8 // k, 32)
    path = tmp_path / "torchtitan.toml"
    path.write_text(text)
    back = check_plan(torchtitan_config.load(path, None, None))
    assert back.job == plan.job
    _same(back, plan)


@pytest.mark.parametrize("k", [1, 2])
def test_the_module_target_writes_one_schedules_micro_batches(tmp_path: Path, k: int) -> None:
    """num_pp_microbatches is one schedule's, 32 / (dp 4 x mbs 1 x k), and
    num_tokens_per_train_step the step's, 32 x 8192: b5bcd76c runs 32 x 8192 / (8192 x
    num_pp_microbatches x 4) = k schedules; read back, the plan."""
    plan = _plan(tmp_path, k)
    text = render(plan, "torchtitan-module", "job")[1]
    assert f"num_pp_microbatches={8 // k}," in text
    assert "config.training.num_tokens_per_train_step = 262144\n" in text
    path = tmp_path / "planner_job.py"
    path.write_text(text)
    _same(check_plan(torchtitan_config.load(path, None, None)), plan)
