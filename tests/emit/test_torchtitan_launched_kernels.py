"""The torchtitan targets launch a plan's kernels and dropout as torchtitan runs them
(`emit.torchtitan_kernels.torchtitan_launched`), so the launch file's header predicts the job it
starts (QA: fused_rope = false with compile on, header step +3.1% over the file read back).

Oracles: the read-back equality (the written TOML or module, read by `check --torchtitan-config`,
predicts the header's step and peak, and has the launched job's fields); and the source lines of
`emit.torchtitan_kernels`: RoPE, RMSNorm and SwiGLU are eager ops (e347b1e5 llama3 model.py
:141-168, :382-383, :343; b5bcd76c models common rope.py:140, nn_modules.py:134,
feed_forward.py:54) fused by inductor exactly where each transformer block is compiled (e347b1e5
llama3/infra/parallelize.py:256-270, b5bcd76c distributed/compile.py:39-73); torchtitan's models
have no dropout (plan.TITAN_DROPOUT); DTensor's sequence parallelism saves the gathered input
(e347b1e5 llama3/infra/parallelize.py:181-233).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plan_text import write

from planner.emit.launch import render
from planner.emit.launch_pricing import launched
from planner.inputs import torchtitan_config
from planner.inputs.plan import Plan, load_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

PLAN = """[model]
name = "{model}"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16
[training]
framework = "torchtitan"
seq_length = 4096
global_batch_size = 64
{training}
[parallel]
tp = {tp}
pp = 1
ep = {ep}
micro_batch_size = 1
zero_stage = 3
recompute = "full"
[torchtitan]
compile = {compile}
"""

PREDICTED = re.compile(r"^# predicted: .*$", re.M)
NAMES = {"torchtitan": "job.toml", "torchtitan-module": "planner_job.py"}


def _plan(tmp_path: Path, training: str, compile_on: bool, tp: int = 1) -> Plan:
    model, ep = ("qwen3-30b-a3b", 8) if tp == 1 else ("llama3.1-8b", 1)
    text = PLAN.format(
        model=model, training=training, tp=tp, ep=ep, compile=str(compile_on).lower()
    )
    return check_plan(load_plan(write(tmp_path, text, f"plan{len(training)}.toml")))


CASES = [
    # (the plan's setting, compile, tp, the field, the value torchtitan runs)
    ("fused_rope = false", True, 1, "fused_rope", True),  # QA's case
    ("fused_norm = false", True, 1, "fused_norm", True),
    ("fused_swiglu = true", False, 1, "fused_swiglu", False),
    ("fused_norm = true\nfused_rope = true", False, 1, "fused_norm", False),
    ("hidden_dropout = true", True, 1, "hidden_dropout", False),
    ("sp_keeps_gathered_input = false", True, 2, "sp_keeps_gathered_input", True),
]


@pytest.mark.parametrize("target", sorted(NAMES))
@pytest.mark.parametrize(("training", "compile_on", "tp", "field", "runs"), CASES)
def test_header_predicts_the_file_read_back(
    tmp_path: Path, target: str, training: str, compile_on: bool, tp: int, field: str, runs: bool
) -> None:
    plan = _plan(tmp_path, training, compile_on, tp)
    assert getattr(plan.job, field) is not runs  # the plan says otherwise than torchtitan runs
    _, text = render(plan, target)
    path = tmp_path / NAMES[target]
    path.write_text(text, encoding="utf-8")
    back = check_plan(torchtitan_config.load(path, None, 16))
    assert getattr(back.job, field) is runs
    run = launched(plan, target)
    lay = plan.require_layout()
    assert cost.estimate(run.job, lay).step_time_s == cost.estimate(back.job, lay).step_time_s
    assert memory.estimate(run.job, lay).peak == memory.estimate(back.job, lay).peak
    # the header is the launched job's, as the plan without the setting predicts it
    plain = _plan(tmp_path, "", compile_on, tp)
    _, plain_text = render(plain, target)
    assert PREDICTED.findall(text) == PREDICTED.findall(plain_text)
    assert f"training.{field} = {str(not runs).lower()} has no torchtitan setting" in " ".join(
        line.removeprefix("# ") for line in text.splitlines()
    )


def test_a_plan_as_torchtitan_runs_it_launches_unchanged(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "", True)
    assert launched(plan, "torchtitan") is plan
    assert launched(plan, "torchtitan-module") is plan
