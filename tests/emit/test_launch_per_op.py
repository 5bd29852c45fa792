"""PyTorch's per-op recompute policy (`training.selective_recompute = "per_op"`) in a Megatron-LM
plan (QA Q3 #1): Megatron-LM has none. Its selective recompute runs --recompute-modules, default
core_attn (transformer_config.py:1940-1960 @d98e8a64), so a plan timed with per_op launched a job
that kept 27.5 GiB more than its header said (tp2 pp4 mbs2: 61.2 vs 88.7 GiB). The rule refuses
it (`rules.selective_policy`), suggest offers no per-op rung to a Megatron job, and a launch that
reaches such a plan unchecked reprices it as Megatron runs it.

Oracles: the source line above; the round trip (the launched file read back by `check
--megatron-args`: its peak and step must be the header's); and planner's own pricing of the
same plan with selective_recompute = "core_attn", which is what the file runs.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from megatron_plans import make_plan

from planner.emit import launch, launch_pricing
from planner.model import memory
from planner.search import rungs
from planner.search.rules import violations

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


def _header(text: str) -> tuple[float, float]:
    """(step s, peak GiB with the expandable segments the script exports) of a header."""
    step = re.search(r"# predicted: step ([0-9.]+) s", text)
    peak = re.search(r"; ([0-9.]+) GiB with the expandable segments", text)
    assert step is not None and peak is not None, text[:800]
    return float(step.group(1)), float(peak.group(1))


def test_an_unchecked_per_op_plan_launches_repriced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`launch.render` of a plan built in Python (no rules asked): the header predicts the job
    the file starts, as the megatron-args read back price it."""
    par = {"tp": 2, "pp": 4, "micro_batch_size": 2, "recompute": "selective"}
    train = {"seq_length": 16384, "global_batch_size": 256}
    plan = make_plan("llama3.1-8b", 16, par, selective_recompute="per_op", **train)
    assert [v.field for v in violations(plan.job, plan.require_layout())] == [
        "training.selective_recompute"
    ]
    _, text = launch.render(plan, "megatron-args")
    assert "selective_recompute = 'per_op' has no Megatron flag: this job recomputes" in text
    args = tmp_path / "args.txt"
    args.write_text(text, encoding="utf-8")
    cmd = ["check", "--megatron-args", str(args), "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
    _, out, _ = run([*cmd, "--json"], capsys)
    back = json.loads(out)
    step, peak = _header(text)
    # before: the header said 61.2 GiB (per_op's), the file read back at 88.7
    assert peak == pytest.approx(back["memory"]["peak_gib"], abs=0.05)
    assert step == pytest.approx(back["performance"]["step_time_s"], abs=5e-4)
    # and it is the plan with Megatron's own selective recompute (core_attn), as check prices it
    core = make_plan("llama3.1-8b", 16, par, selective_recompute="core_attn", **train)
    ran = launch_pricing.launched(plan, "megatron-args")
    lay = plan.require_layout()
    assert memory.estimate(ran.job, lay).peak == memory.estimate(core.job, lay).peak
    assert memory.estimate(plan.job, lay).peak < memory.estimate(core.job, lay).peak - 20 * 2**30
