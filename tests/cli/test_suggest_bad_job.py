"""Job settings no layout runs, given to `suggest` and `scale` (QA s41 q1, item 1): each once
answered "nothing fits: no layout passes the rules" (exit 1, which reads as memory; for a
dp_replicate no GPU count holds, with an empty reason). Oracle: DESIGN.md section 2's contract
(bad input exits 2 naming the file, the field and the value, as `check` does on the same
settings), and the rule each setting breaks, cited where the message quotes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

JOB = """[model]
name = "llama3.1-8b"

[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8

[training]
seq_length = 8192
global_batch_size = 128
precision = "bf16"
{training}
{titan}
"""

TITAN = 'framework = "torchtitan"'


def job(tmp_path: Path, training: str = "", titan: str = "") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(training=training, titan=titan))
    return path


CASES = [
    # H100 SXM has 132 SMs (`sm_count.gpu_sms`): a margin of 200 leaves the GEMMs none
    ("gemm_sm_margin = 200", "", "training.gemm_sm_margin", "200 SMs"),
    # Megatron's determinism asserts the unfused cross entropy (`rules.parallel.deterministic`);
    # the fused loss is the default
    ("deterministic = true", "", "training.loss_fusion", "deterministic = true"),
    # 3 must divide dp x cp, which divides 8: 3 does not divide 8
    ("optimizer_instances = 3", "", "training.optimizer_instances", "3 does not divide"),
    # only torchtitan's deepseek_v3 builds MTP layers (models/deepseek_v3/__init__.py:616-628 at
    # b5bcd76c); llama3's registry takes none
    (TITAN, "[torchtitan]\nnum_mtp_layers = 3", "torchtitan.num_mtp_layers", "3: "),
    # dp = dp_replicate x dp_shard divides 8; 3 does not (2**70 is now refused as a degree
    # above hardware.MAX_GPUS where the plan is read: test_plan_int_caps.py)
    (
        TITAN,
        "[torchtitan]\ndp_replicate = 3",
        "torchtitan.dp_replicate",
        "3 does not divide num_gpus (8)",
    ),
]


@pytest.mark.parametrize(("training", "titan", "field", "value"), CASES)
def test_suggest_refuses_a_setting_no_layout_runs(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    training: str,
    titan: str,
    field: str,
    value: str,
) -> None:
    path = job(tmp_path, training, titan)
    code, _, err = run(["suggest", str(path)], capsys)
    assert code == 2, err
    assert "nothing fits" not in err and "internal error" not in err, err
    assert f"{path}: {field}: " in err and value in err, err


@pytest.mark.parametrize(("training", "titan", "field", "value"), CASES[:2] + CASES[3:4])
def test_scale_refuses_a_rule_on_the_job_alone(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    training: str,
    titan: str,
    field: str,
    value: str,
) -> None:
    """The rules on the job alone break at every size: exit 2 before any size is planned."""
    path = job(tmp_path, training, titan)
    code, out, err = run(["scale", str(path), "--num-gpus", "8,16", "--json"], capsys)
    assert code == 2, err
    assert out == "" and f"{path}: {field}: " in err and value in err, err


def test_a_job_that_only_misses_memory_still_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama 3.1 8B's bf16 weights alone are 8.0e9 x 2 B = 16 GB, its Adam states and fp32 main
    weights 8.0e9 x 12 B = 96 GB more: on one 80 GB GPU no layout fits, a "no" (exit 1)."""
    path = job(tmp_path).read_text().replace("num_gpus = 8", "num_gpus = 1")
    (tmp_path / "one.toml").write_text(path)
    code, out, err = run(["suggest", str(tmp_path / "one.toml")], capsys)
    assert code == 1, err
    assert "nothing fits: memory" in out, out


SIZED = [
    # 3 divides 12 (dp 3 at tp = pp = cp = 1, Megatron's instances then one a data-parallel
    # rank) and not 8: dp x cp divides 8, so no layout of 8 GPUs has a dp x cp 3 divides
    ("optimizer_instances = 3", "", "training.optimizer_instances 3"),
    # dp = dp_replicate x dp_shard divides the GPU count: 3 x 4 at 12, nothing 3 divides at 8
    (TITAN, "[torchtitan]\ndp_replicate = 3", "torchtitan.dp_replicate 3"),
]


@pytest.mark.parametrize(("training", "titan", "named"), SIZED)
def test_scale_names_the_setting_at_each_size_it_does_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], training: str, titan: str, named: str
) -> None:
    """scale said "no layout fits" at 8 GPUs, which reads as memory: the note names the setting
    and the size (s41's "knowingly left" list), and 12 GPUs, which it divides, is planned."""
    path = job(tmp_path, training, titan).read_text().replace("= 128", "= 96")
    (tmp_path / "j.toml").write_text(path)  # 96 sequences: a whole number a rank at 8 and 12
    svg = tmp_path / "curve.svg"
    argv = ["scale", str(tmp_path / "j.toml"), "--num-gpus", "8,12", "--plot", str(svg)]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    at = {p["num_gpus"]: p for p in json.loads(out)["points"]}
    assert not at[8]["feasible"] and at[12]["feasible"]
    assert at[8]["note"] == f"no layout runs: {named} divides no data-parallel size at 8 GPUs"
    assert "no layout fits" not in svg.read_text() and "no layout runs" in svg.read_text()


@pytest.mark.parametrize(("training", "titan", "named"), SIZED)
def test_scale_refuses_a_setting_that_divides_none_of_the_sizes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], training: str, titan: str, named: str
) -> None:
    """Neither 8 nor 16 is a multiple of 3: no size is planned, and that is the setting (exit 2
    naming the file, the field, the value and the sizes), not memory (exit 1)."""
    path = job(tmp_path, training, titan)
    code, out, err = run(["scale", str(path), "--num-gpus", "8,16"], capsys)
    field, value = named.split()
    assert code == 2 and out == "", err
    assert f"{path}: {field}: {value} does not divide the GPU counts (8, 16)" in err, err
