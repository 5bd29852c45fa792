"""The allocator each launch target's environment sets is the one the plan's memory is priced
with: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) wherever the plan
counts them (`training.expandable_segments`), and, where a Megatron target sets them for a plan
priced without them, the header's second peak counts them.

Oracles: planner.model.memory prices the smaller fragmentation exactly where
`Job.expandable_segments` is true (memory.py `fragmentation`), so the launched environment must
set the allocator there; Megatron-Bridge 067f987d applies env_vars as process defaults
(training/config.py:1984-1989, `os.environ.setdefault`) and its Megatron-FSDP performance
recipes set env_vars whole without PYTORCH_CUDA_ALLOC_CONF (perf_recipes/llama/b200/llama3.py
:254, :274-285), so only the override can set it there; Megatron-Core d98e8a64 asserts
NCCL_GRAPH_REGISTER=0 beside it for Transformer Engine's CUDA graphs (transformer/cuda_graphs.py
:2193-2199).
torchtitan's scripts export PYTORCH_ALLOC_CONF only where the plan counts it
(planner.emit.torchtitan_run), so their header gives no second peak.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml
from megatron_plans import make_plan

from planner.emit import torchtitan_run
from planner.emit.launch import render
from planner.inputs.plan import Plan

ALLOC = "PYTORCH_CUDA_ALLOC_CONF"
SECOND_PEAK = "with the expandable segments its environment sets"


def _k8s_env(text: str) -> dict[str, str]:
    doc = yaml.safe_load(text)
    out: dict[str, str] = {}
    for replica in doc["spec"]["pytorchReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            out.update({e["name"]: e.get("value") for e in container.get("env", [])})
    return out


def _exported(text: str) -> dict[str, str]:
    """`export NAME=VALUE` lines of a bash script, or the megatron-args file's environment
    line (`# environment the prediction assumes ...: NAME=VALUE ...`)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("export "):
            name, _, value = shlex.split(line, comments=True)[1].partition("=")
            out[name] = value
        elif line.startswith("# environment the prediction assumes"):
            for word in line.split(": ", 1)[1].split():
                name, _, value = word.partition("=")
                out[name] = value
    return out


def _bridge_env(text: str) -> dict[str, str]:
    """The override's env_vars table; its `++env_vars.NAME=value` Hydra lines must say the
    same."""
    table = {k: str(v) for k, v in (yaml.safe_load(text).get("env_vars") or {}).items()}
    hydra = dict(re.findall(r"^# \+\+env_vars\.(\w+)=(\S+)$", text, flags=re.M))
    assert hydra == table
    return table


READERS = {
    "megatron-args": _exported,
    "torchrun": _exported,
    "slurm": _exported,
    "k8s": _k8s_env,
    "megatron-bridge": _bridge_env,
}


def _plan(zero: int, expandable: bool, **training: Any) -> Plan:
    return make_plan(
        "llama3.1-8b",
        16,
        {"tp": 1, "zero_stage": zero},
        global_batch_size=16,
        expandable_segments=expandable,
        **training,
    )


@pytest.mark.parametrize("target", list(READERS))
@pytest.mark.parametrize(("zero", "expandable"), [(3, True), (3, False), (1, True), (1, False)])
def test_every_target_sets_the_allocator_the_plan_is_priced_with(
    target: str, zero: int, expandable: bool
) -> None:
    # before: --target megatron-bridge wrote no PYTORCH_CUDA_ALLOC_CONF for a Megatron-FSDP plan
    # priced with expandable segments (zero 3, True), which its FSDP recipes leave unset
    plan = _plan(zero, expandable)
    _, text = render(plan, target)
    env = READERS[target](text)
    if expandable:  # priced with them: the launched environment must give them
        assert env.get(ALLOC) == "expandable_segments:True"
    elif zero >= 2:  # Megatron-FSDP priced without them: no target sets them, no second peak
        assert ALLOC not in env and SECOND_PEAK not in text
    # priced without them below ZeRO 2: the Megatron-LM scripts export them (the Bridge recipes'
    # env_vars hold them), and the header's second peak is the job with them
    assert (SECOND_PEAK in text) == (zero < 2 and not expandable)
    if target != "megatron-bridge" and zero < 2:
        assert env.get(ALLOC) == "expandable_segments:True"


def test_bridge_sets_nccl_graph_register_beside_them_for_te_graphs() -> None:
    # Megatron-Core asserts NCCL_GRAPH_REGISTER=0 beside expandable segments for TE's graphs
    # (cuda_graphs.py:2193-2199): the override that sets the one sets the other
    graphs = {"cuda_graphs": True, "cuda_graph_impl": "transformer_engine"}
    env = _bridge_env(render(_plan(3, True, **graphs), "megatron-bridge")[1])
    assert env[ALLOC] == "expandable_segments:True" and env["NCCL_GRAPH_REGISTER"] == "0"
    env = _bridge_env(render(_plan(3, False, **graphs), "megatron-bridge")[1])
    assert ALLOC not in env and "NCCL_GRAPH_REGISTER" not in env


@pytest.mark.parametrize("expandable", [True, False])
def test_torchtitan_headers_claim_no_allocator_their_scripts_do_not_export(
    expandable: bool,
) -> None:
    # before: a torchtitan plan below ZeRO 2 priced without expandable segments got the header's
    # second peak "with the expandable segments its environment sets (PYTORCH_CUDA_ALLOC_CONF
    # ...)" from scripts that export no allocator setting
    plan = make_plan(
        "llama3.1-8b",
        8,
        {"tp": 1, "zero_stage": 0},
        framework="torchtitan",
        expandable_segments=expandable,
    )
    for renderer in (torchtitan_run.render_torchrun, torchtitan_run.render_slurm):
        text = renderer(plan, "job")
        exported = "export PYTORCH_ALLOC_CONF=expandable_segments:True" in text
        assert exported == expandable
        assert SECOND_PEAK not in text
