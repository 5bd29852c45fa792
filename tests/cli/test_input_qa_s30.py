"""QA s30 (the second pass): bad input on the command line exits 2 naming the option and the
value; `check` exits 0 fits, 1 does not fit, 2 bad input, --debug included; what `launch` refuses
of a plan `check` says; NeMo lines' errors name the NeMo key; planner reads its own pools Slurm
script.

Oracles: the project's exit-code contract (planner.cli.app: 0 / 1 / 2; DESIGN.md section 2), and
for each item the tool whose behaviour planner mirrors, named in its test."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES, PLANS

from planner.inputs.errors import EXIT_BAD_INPUT

LLAMA = EXAMPLES / "llama3.1-8b-h100.toml"


# --- N1: --debug keeps bad input's exit code (2), not Python's 1 for an uncaught exception


def test_debug_shows_the_traceback_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["--debug", "check", "/nonexistent/plan.toml"], capsys)
    assert code == EXIT_BAD_INPUT
    assert "Traceback" in err and "/nonexistent/plan.toml: no such file" in err
    code, _, err = run(["check", "/nonexistent/plan.toml"], capsys)
    assert code == EXIT_BAD_INPUT and "Traceback" not in err


# --- item 6: integers on the command line are plain decimal integers


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--num-gpus", "16.0"),
        ("--num-gpus", "1_6"),
        ("--num-gpus", "1e3"),
        ("--global-batch-size", "8.0"),
        ("--nodes", "2.0"),
        ("--top", "3.0"),
        ("--seq-length", " 4096"),
    ],
)
def test_an_integer_option_takes_decimal_digits_only(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["suggest", "--model", "llama3.1-8b", option, value], capsys)
    assert code == EXIT_BAD_INPUT and out == ""
    text = " ".join(err.replace("│", " ").split())
    assert f"Invalid value for '{option}'" in text and repr(value) in text


def test_integer_bounds_name_the_value(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["suggest", "--model", "llama3.1-8b", "--top", "101"], capsys)
    assert code == EXIT_BAD_INPUT and "expected 1 to 100 (got '101')" in err
    code, _, err = run(["check", str(LLAMA), "--num-gpus", "0"], capsys)
    assert code == EXIT_BAD_INPUT and "expected at least 1 (got '0')" in err


# --- item 5: an empty path is refused, not read as the working directory


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", str(LLAMA), "--target", "torchrun", "--out", ""],
        ["suggest", "--model", "llama3.1-8b", "--write-plan", ""],
        ["check", "--megatron-args", "", "--gpu", "h100-sxm-80gb"],
        ["check", str(LLAMA), "--calibration", ""],
        ["explain", str(LLAMA), "--timeline", ""],
        ["check", ""],
    ],
)
def test_an_empty_path_is_bad_input(
    argv: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(argv, capsys)
    assert code == EXIT_BAD_INPUT
    assert "expected a path (got '')" in err
    assert list(tmp_path.iterdir()) == []  # nothing written into the working directory


# --- item 7: a NeMo line's errors name its keys


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.global_batch_size=7", "data.global_batch_size (training.global_batch_size)"),
        ("data.seq_length=0", "data.seq_length (training.seq_length)"),
        (
            "trainer.strategy.tensor_model_parallel_size=0",
            "trainer.strategy.tensor_model_parallel_size (parallel.tp)",
        ),
        (
            "trainer.strategy.expert_model_parallel_size=2",
            "trainer.strategy.expert_model_parallel_size (parallel.ep)",
        ),
    ],
)
def test_nemo_errors_name_the_nemo_key(
    override: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "nemo.txt"
    path.write_text(f"nemo llm pretrain -y --factory llama3_8b {override}\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{path}: {key}: " in err
    assert "--" not in err.split(f"{path}: ", 1)[1].split(":")[0]  # no Megatron-LM flag named


# --- N2: planner reads back its own pools Slurm script (bash -c 'STRING' NAME ARGS...)


def test_the_pools_slurm_script_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Oracle: bash binds `bash -c 'STRING' NAME ARGS...` as $0 = NAME, "$@" = ARGS (bash(1),
    -c), checked against bash itself where it is on the machine."""
    plan = EXAMPLES / "pools-two-datacentres-h100-plan.toml"
    code, out, err = run(["launch", str(plan), "--target", "slurm"], capsys)
    assert code == 0, err
    path = tmp_path / "pool.sbatch"
    path.write_text(out)
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert "GPU count 16,384" in err


def test_bash_c_binds_its_positional_parameters() -> None:
    from planner.inputs.megatron_line import tokens

    text = "bash -c 'exec torchrun \"$@\"' node --nproc-per-node 8 pretrain_gpt.py --num-layers 32"
    assert tokens(text) == ["pretrain_gpt.py", "--num-layers", "32"]
    text = "bash -c 'torchrun pretrain_gpt.py --num-layers $1 --name $0' n0 7"
    assert tokens(text) == ["pretrain_gpt.py", "--num-layers", "7", "--name", "n0"]
    bash = shutil.which("bash")
    if bash is not None:
        echo = subprocess.run(
            [bash, "-c", 'echo $0 "$@"', "node", "a", "b"], capture_output=True, text=True
        )
        assert echo.stdout.split() == ["node", "a", "b"]


# --- item 2: check warns with launch's reason where launch refuses the plan


def test_check_warns_where_launch_refuses_the_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Oracle: `planner launch` itself (emit.common.nodes refuses 12 GPUs of 8-GPU nodes)."""
    plan = tmp_path / "p12.toml"
    text = LLAMA.read_text().replace("num_gpus = 8", "num_gpus = 12")
    plan.write_text(text.replace("global_batch_size = 128", "global_batch_size = 96"))  # dp 6
    assert "num_gpus = 12" in plan.read_text() and "= 96" in plan.read_text()
    code, _, launched = run(["launch", str(plan), "--target", "torchrun"], capsys)
    assert code == EXIT_BAD_INPUT
    reason = launched.split("planner: error: ", 1)[1].strip()
    for command in ("check", "explain"):
        code, _, err = run([command, str(plan)], capsys)
        assert code in (0, 1), err
        assert "planner: warning: launch --target" in err and reason in err


def test_check_of_a_launchable_plan_warns_nothing_of_launch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(["check", str(LLAMA)], capsys)
    assert code == 0 and "refuses this plan" not in err and "warning: launch" not in err
    # what the Megatron-LM targets launch instead is a note
    # (emit.launch_pricing.megatron_lm_launched_note)
    assert "planner: note: launch --target megatron-args" in err


# --- N3: options of one reading are refused beside another


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--nemo-model", "bogus"], "--nemo-model"),
        (["--vocab-size", "5"], "--vocab-size"),
        (["--verbose"], "--verbose"),
    ],
)
def test_reading_options_are_refused_with_a_torchtitan_config(
    extra: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = next(PLANS.glob("*.toml"))
    argv = ["check", "--torchtitan-config", str(config), "--gpu", "h100-sxm-80gb", *extra]
    code, _, err = run(argv, capsys)
    assert code == EXIT_BAD_INPUT and f"check: {flag}: only with --megatron-args" in err


def test_nemo_model_is_refused_with_a_megatron_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "train.log"
    log.write_text("nothing\n")
    argv = ["check", "--megatron-log", str(log), "--gpu", "h100-sxm-80gb", "--nemo-model", "x"]
    code, _, err = run(argv, capsys)
    assert code == EXIT_BAD_INPUT and "check: --nemo-model: only with --megatron-args" in err


# --- N4: a job name without ASCII letters or digits says which letters count


def test_a_job_name_of_other_letters_says_ascii(capsys: pytest.CaptureFixture[str]) -> None:
    """Oracle: Kubernetes' DNS-1123 label, `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (ASCII only)."""
    code, _, err = run(["launch", str(LLAMA), "--target", "k8s", "--job-name", "ä"], capsys)
    assert code == EXIT_BAD_INPUT
    assert "'ä' has no ASCII letters or digits (a-z, 0-9)" in err
