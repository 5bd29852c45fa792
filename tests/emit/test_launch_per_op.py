"""PyTorch's per-op recompute policy (`training.selective_recompute = "per_op"`) in a Megatron-LM
plan (QA Q3 #1): Megatron-LM has none. Its selective recompute runs --recompute-modules, default
core_attn (transformer_config.py:1940-1960 @d98e8a64), so a plan timed with per_op launched a job
that kept 27.5 GiB more than its header said (tp2 pp4 mbs2: 61.2 vs 88.7 GiB). The rule refuses
it (`rules.selective_policy`), suggest offers no per-op rung to a Megatron job, and every launch
path asks the rules first, so none launches such a plan (exit 2).

Oracles: the source line above, and the rule's condition written out in the plan text.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from megatron_plans import make_plan

from planner.emit import launch
from planner.inputs.plan import load_plan
from planner.search import rungs

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 16
[training]
seq_length = 16384
global_batch_size = 256
selective_recompute = "{policy}"
[parallel]
tp = 2
pp = 4
micro_batch_size = 2
recompute = "{recompute}"
"""


def _write(tmp_path: Path, policy: str, recompute: str = "selective") -> Path:
    path = tmp_path / f"{policy}-{recompute}.toml"
    path.write_text(PLAN.format(policy=policy, recompute=recompute), encoding="utf-8")
    return path


def test_check_refuses_per_op_under_megatron_selective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # before: exit 0, "fits: peak 64.9 GiB", for a plan whose file reads back at 88.7 GiB
    code, _, err = run(["check", str(_write(tmp_path, "per_op"))], capsys)
    assert code == 2
    assert "training.selective_recompute" in err and '"per_op"' in err
    assert "transformer_config.py:1940-1960" in err
    # with recompute none the policy is read nowhere: a warning, no refusal (inert)
    code, _, err = run(["check", str(_write(tmp_path, "per_op", "none"))], capsys)
    assert code in (0, 1) and "selective_recompute" in err and "has no effect" in err
    # every launch target of the plan refuses it too (launch checks the rules first)
    code, _, err = run(["launch", str(_write(tmp_path, "per_op")), "--target", "torchrun"], capsys)
    assert code == 2 and "training.selective_recompute" in err


def test_suggest_offers_no_per_op_rung_to_a_megatron_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_plan("llama3.1-8b", 16, {"tp": 2}).job
    assert rungs.selective(replace(job, selective_recompute="per_op")) == []  # before: one rung
    titan = replace(job, selective_recompute="per_op", framework="torchtitan")
    assert [r.recompute for r in rungs.selective(titan)] == ["selective"]  # torchtitan's policy
    # the QA's suggest: its #1 was per_op selective (74.3 GiB), read back at 119.3 GiB
    path = tmp_path / "job.toml"
    path.write_text(PLAN.split("[parallel]")[0].format(policy="per_op"), encoding="utf-8")
    code, _, err = run(["suggest", str(path), "--recompute", "selective", "--cp", "1"], capsys)
    assert code == 2
    assert err.startswith("planner: error: --recompute selective: training.selective_recompute")


def test_every_launch_path_refuses_a_per_op_plan_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launch paths of a plan file (`planner launch`, every Megatron target, and the
    refusals `check` and `suggest --write-plan` report through `launch.refusals`) ask the rules
    first, so none reaches a per-op plan's pricing: the rule's message, exit 2. Oracle: the
    rule's condition (`selective_policy.per_op`: framework megatron, recompute selective,
    selective_recompute per_op) holds for this plan, written out in its PLAN text."""
    path = _write(tmp_path, "per_op")
    for target in ("megatron-args", "torchrun", "slurm", "k8s", "megatron-bridge"):
        code, _, err = run(["launch", str(path), "--target", target], capsys)
        assert code == 2, target
        assert "training.selective_recompute" in err and "no per-op recompute policy" in err
    refused = launch.refusals(load_plan(path))
    assert len(refused) == 1
    ((message, targets),) = refused.items()
    assert "training.selective_recompute" in message
    assert set(targets) == {t for t in launch.TARGETS if launch.FRAMEWORK.get(t) is None}
