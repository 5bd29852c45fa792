"""A torchtitan plan's validation (`[torchtitan] validation_batch`, validation_seq_len) in its
launch files (QA: both targets dropped it, so the header predicted 101.2 GiB, does not fit, of a job
that ran no validation and read back at 36.0 GiB, fits).

Oracles: the TOML's table and fields, e347b1e5 config/job_config.py:950-963 (`Validation`:
enable, local_batch_size, seq_len; the schema planner/inputs/torchtitan_job_config_schema.json
holds their annotations); the Python configuration's validator, b5bcd76c trainer.py:113
(`config.validator`), components/validate.py:81 (enable) and trainer.py:558, :593-617 (built with
the training's tokens per micro-batch per DP rank at max_context_length), validate.py:230-240 (a
pipeline schedule's micro-batches at a time); and the read-back equality (`check
--torchtitan-config` on the written file predicts the header's memory).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from plan_text import write
from titan_module_check import check_module
from titan_toml_plans import SCHEMA

from planner.emit.launch import render
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan
from planner.model import memory
from planner.search.rules import check_plan

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = {gpus}
[training]
framework = "torchtitan"
seq_length = 8192
global_batch_size = {gbs}
[parallel]
tp = 1
pp = {pp}
micro_batch_size = 1
zero_stage = 3
recompute = "full"
[torchtitan]
compile = true
validation_batch = {batch}
validation_seq_len = {seq}
"""

PEAK = re.compile(r"peak memory ([0-9.]+) GiB of [0-9.]+ GiB usable \((fits|DOES NOT FIT)")


def _plan(tmp_path: Path, batch: int, seq: int = 8192, pp: int = 1, gbs: int = 8) -> Plan:
    text = PLAN.format(gpus=8, gbs=gbs, pp=pp, batch=batch, seq=seq)
    return check_plan(load_plan(write(tmp_path, text)))


def _read_back(tmp_path: Path, name: str, text: str) -> Plan:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return check_plan(torchtitan_config.load(path, None, 8))


def test_toml_writes_the_validation_and_reads_back_its_peak(tmp_path: Path) -> None:
    """QA's repro: validation 8 x 8192 on ZeRO 3 does not fit, and the launched file says so."""
    plan = _plan(tmp_path, batch=8)
    _, text = render(plan, "torchtitan")
    table = tomllib.loads(text)["validation"]
    assert table == {"enable": True, "local_batch_size": 8, "seq_len": 8192}
    for name, value in table.items():  # fields of e347b1e5's Validation, of their types
        assert SCHEMA["sections"]["validation"][name] == type(value).__name__
    back = _read_back(tmp_path, "job.toml", text)
    assert (back.job.titan.validation_batch, back.job.titan.validation_seq_len) == (8, 8192)
    planned = memory.estimate(plan.job, plan.require_layout())
    read = memory.estimate(back.job, back.require_layout())
    assert read.peak == planned.peak and not read.fits
    header = PEAK.search(text)
    assert header is not None and header.group(2) == "DOES NOT FIT"
    assert float(header.group(1)) == pytest.approx(read.peak / 2**30, abs=0.05)


def test_toml_without_validation_writes_no_table(tmp_path: Path) -> None:
    _, text = render(_plan(tmp_path, batch=0), "torchtitan")
    assert "validation" not in tomllib.loads(text)


@pytest.mark.parametrize(("pp", "gbs", "batch"), [(1, 8, 1), (2, 16, 4)])
def test_module_writes_the_validator_on_the_training_batches(
    tmp_path: Path, pp: int, gbs: int, batch: int
) -> None:
    """The validator's batch is the training's per-rank schedule batch: mbs 1 without PP; with
    pp 2 on 8 GPUs, dp 4, 16 a step: one schedule of 16 / 4 = 4 micro-batches (trainer.py:558,
    validate.py:230-240)."""
    plan = _plan(tmp_path, batch=batch, pp=pp, gbs=gbs)
    _, text = render(plan, "torchtitan-module")
    check_module(text)
    assert "config.validator.enable = True" in text
    back = _read_back(tmp_path, "planner_job.py", text)
    assert (back.job.titan.validation_batch, back.job.titan.validation_seq_len) == (batch, 8192)
    planned = memory.estimate(plan.job, plan.require_layout()).peak
    assert memory.estimate(back.job, back.require_layout()).peak == planned


@pytest.mark.parametrize(
    ("batch", "seq", "field", "value"),
    [
        (8, 8192, "torchtitan.validation_batch", "8"),
        (1, 2048, "torchtitan.validation_seq_len", "2048"),
    ],
)
def test_module_refuses_a_validation_it_cannot_carry(
    tmp_path: Path, batch: int, seq: int, field: str, value: str
) -> None:
    plan = _plan(tmp_path, batch=batch, seq=seq)
    with pytest.raises(InputError, match=rf"{re.escape(field)}: {value}: torchtitan b5bcd76c"):
        render(plan, "torchtitan-module")
    render(plan, "torchtitan")  # the TOML carries both
