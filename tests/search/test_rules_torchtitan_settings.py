"""Plan settings a torchtitan job was priced with but no torchtitan target writes (QA Q3 #4):
refused (exit 2 naming the field), or, where planner's own inert check calls them without
effect, priced without effect.

- flash_attention = false: torchtitan's attention is torch's SDPA over a fixed backend list,
  cuDNN then flash then math, with no setting to unfuse it (e347b1e5 models/attention.py:168-190,
  b5bcd76c models common attention.py:382-417); the QA's plan read back at 39.8 GiB, ~3.0 s
  against a header of 76.5 GiB, 5.277 s.
- gemm_sm_margin: Transformer Engine's NVTE_EXT_MARGIN_SM (`emit.common`), which torch's GEMMs
  do not read.
- log_grad_stats: Megatron-LM's --log-num-zeros-in-grad (`emit.megatron`), no torchtitan
  setting (e347b1e5 job_config.py has none).
- tp_userbuffers: `inputs.inert` says a torchtitan job does not read it (MEGATRON_TRAINING), yet
  the memory counted Transformer Engine's userbuffers (model/buffers.py): the round trip through
  the TOML target now reads back the plan's peak.

Oracles: the source lines above, and the round trip (launch, `check --torchtitan-config`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 32
[training]
seq_length = 4096
global_batch_size = 128
framework = "torchtitan"
{line}
[parallel]
tp = 2
pp = 2
micro_batch_size = 1
zero_stage = 3
"""


def _plan(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN.format(line=line), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("flash_attention = false", "training.flash_attention"),
        ("gemm_sm_margin = 8", "training.gemm_sm_margin"),
        ("log_grad_stats = true", "training.log_grad_stats"),
    ],
)
def test_settings_torchtitan_does_not_run_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, field: str
) -> None:
    plan = _plan(tmp_path, line)
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 2 and f"{field}: a Megatron-LM setting torchtitan does not run" in err
    for target in ("torchtitan", "torchtitan-module"):
        code, _, err = run(["launch", str(plan), "--target", target], capsys)
        assert code == 2 and field in err
    # the same plan under Megatron-LM is taken
    megatron = tmp_path / "m.toml"
    megatron.write_text(plan.read_text().replace('framework = "torchtitan"\n', ""))
    code, _, _ = run(["check", str(megatron)], capsys)
    assert code in (0, 1)


def _figures(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[float, float]:
    code, out, err = run(["check", *argv, "--json"], capsys)
    assert code in (0, 1), err
    doc = json.loads(out)
    return doc["memory"]["peak_gib"], doc["performance"]["step_time_s"]


def test_tp_userbuffers_count_nothing_under_torchtitan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(tmp_path, "tp_userbuffers = true")
    code, _, err = run(["check", str(plan)], capsys)
    assert "tp_userbuffers = true has no effect" in err  # inert.py's word
    planned = _figures([str(plan)], capsys)
    out = tmp_path / "out"
    code, _, err = run(["launch", str(plan), "--target", "torchtitan", "--out", str(out)], capsys)
    assert code == 0, err
    # before: 32.84 GiB planned, 32.37 read back (the userbuffers of no overlap torchtitan runs)
    assert _figures(["--torchtitan-config", str(out / "torchtitan.toml")], capsys) == planned
