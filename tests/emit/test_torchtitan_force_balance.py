"""Forced-balance routing under torchtitan (QA Q3 #3): a plan's moe_router_force_load_balancing
was priced but neither written nor read back, so the launched job routed as learned (qwen3 30B
at seq 4608: header 75.5 GiB, read back 78.4). torchtitan has the switch: debug.
moe_force_load_balance (e347b1e5 job_config.py:995, read by models/qwen3/model/args.py:58-60;
b5bcd76c config/configs.py:368, copied into every MoE layer's router by models common
decoder.py:233-236), which both targets now write and both readers read. e347b1e5's gpt_oss
does not read it (models/gpt_oss/model/args.py:75-93): the TOML target refuses such a plan and
the TOML reader reads such a file as learned routing, with a note.

Oracle: the round trip (the launched file read back by `check --torchtitan-config` has the
plan's peak and step, as `check` prices the plan) and the source lines above.
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
num_gpus = {gpus}
[training]
framework = "torchtitan"
seq_length = 4096
global_batch_size = 64
moe_router_force_load_balancing = {balance}
[parallel]
tp = 1
pp = 1
ep = 8
micro_batch_size = 1
zero_stage = 3
recompute = "selective"
"""


def _plan(tmp_path: Path, model: str, balance: bool, gpus: int = 32) -> Path:
    path = tmp_path / f"{model}-{balance}.toml"
    text = PLAN.format(model=model, gpus=gpus, balance=str(balance).lower())
    path.write_text(text, encoding="utf-8")
    return path


def _figures(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, float]:
    code, out, err = run(["check", *argv, "--json"], capsys)
    assert code in (0, 1), err
    doc = json.loads(out)
    return doc["memory"]["peak_gib"], doc["performance"]["step_time_s"]


@pytest.mark.parametrize(
    ("target", "name", "line"),
    [
        ("torchtitan", "torchtitan.toml", "moe_force_load_balance = true"),
        ("torchtitan-module", "planner_job.py", "config.debug.moe_force_load_balance = True"),
    ],
)
def test_forced_balance_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, name: str, line: str
) -> None:
    plan = _plan(tmp_path, "qwen3-30b-a3b", True)
    planned = _figures([str(plan)], capsys)
    learned = _figures([str(_plan(tmp_path, "qwen3-30b-a3b", False))], capsys)
    assert planned != learned  # the switch moves the figures the round trip compares
    out = tmp_path / target
    code, _, err = run(["launch", str(plan), "--target", target, "--out", str(out)], capsys)
    assert code == 0, err
    assert line in (out / name).read_text()
    # before: the file read back as learned routing (the second figures)
    assert _figures(["--torchtitan-config", str(out / name)], capsys) == planned


def test_e347b1e5_gpt_oss_ignores_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan(tmp_path, "gpt-oss-20b", True, gpus=8)
    code, _, err = run(["launch", str(plan), "--target", "torchtitan"], capsys)
    assert code == 2 and "training.moe_router_force_load_balancing" in err
    assert "torchtitan-module" in err
    # b5bcd76c's Decoder sets it on gpt_oss's routers too: the module round-trips
    out = tmp_path / "module"
    code, _, err = run(
        ["launch", str(plan), "--target", "torchtitan-module", "--out", str(out)], capsys
    )
    assert code == 0, err
    back = _figures(["--torchtitan-config", str(out / "planner_job.py")], capsys)
    assert back == _figures([str(plan)], capsys)
    # a TOML of gpt_oss that sets it reads back as the learned routing e347b1e5 runs
    learned = _plan(tmp_path, "gpt-oss-20b", False, gpus=8)
    toml = tmp_path / "toml"
    code, _, err = run(
        ["launch", str(learned), "--target", "torchtitan", "--out", str(toml)], capsys
    )
    assert code == 0, err
    path = toml / "torchtitan.toml"
    path.write_text(path.read_text() + "\n[debug]\nmoe_force_load_balance = true\n")
    code, _, err = run(["check", "--torchtitan-config", str(path)], capsys)
    assert "debug.moe_force_load_balance" in err and "read as learned routing" in err
    assert _figures(["--torchtitan-config", str(path)], capsys) == _figures([str(learned)], capsys)
