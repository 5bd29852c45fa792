"""planner.cli: the public contract of DESIGN.md section 2 for `planner check` (exit codes,
--json, stderr messages, no traceback on bad input but with --debug).

Most checks run the CLI in-process through `planner.cli.main(argv)`; a few run
`python -m planner` in a subprocess to see exactly what a script or CI job would see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import STAGE_KEYS, run
from cli_subprocess import EXAMPLE, run_subprocess
from paths import REPO

PLANS = REPO / "tests" / "data" / "plans"


# --- check


def check_json(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:
    code, out, err = run(["check", str(path), "--json", *extra], capsys)
    assert code in (0, 1), err
    data = json.loads(out)  # exactly one JSON document: json.loads rejects trailing text
    assert isinstance(data, dict)
    return code, data


def assert_check_contract(code: int, data: dict) -> None:
    assert isinstance(data["fits"], bool)
    assert code == (0 if data["fits"] else 1)
    mem = data["memory"]
    assert mem["peak_gib"] > 0 and mem["capacity_gib"] > 0
    assert data["fits"] == (mem["peak_gib"] <= mem["capacity_gib"])
    assert len(mem["stages"]) == data["parallel"]["pp"]
    for st in mem["stages"]:
        assert set(st) >= STAGE_KEYS
        parts = sum(st[k] for k in STAGE_KEYS - {"total_gib"})
        assert st["total_gib"] == pytest.approx(parts, abs=0.01)  # each rounded to 0.001
    assert mem["peak_gib"] == pytest.approx(max(st["total_gib"] for st in mem["stages"]), abs=0.01)
    assert data["model"]["params_total"] >= data["model"]["params_active"] > 0
    p = data["parallel"]
    assert p["tp"] * p["pp"] * p["cp"] * p["dp"] > 0


def test_check_example_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = check_json(EXAMPLE, capsys)
    assert_check_contract(code, data)
    assert data["parallel"]["dp"] == 4  # 8 GPUs / (tp 2 x pp 1 x cp 1)
    # Llama 3.1 8B, hand arithmetic (matches HF's 8,030,261,248):
    #   embeddings + untied output 2 x 128256 x 4096                    = 1,050,673,152
    #   per layer: q, o 2 x 4096^2 + k, v 2 x 4096 x 1024 + SwiGLU 3 x 4096 x 14336
    #              + 2 norms x 4096 = 218,112,000 -> x 32               = 6,979,584,000
    #   final norm                                                      =         4,096
    assert data["model"]["params_total"] == 1_050_673_152 + 6_979_584_000 + 4_096
    assert data["model"]["params_active"] == data["model"]["params_total"]
    # H100 capacity: 79.64 GiB less the default headroom, never more than the physical memory
    assert data["memory"]["capacity_gib"] <= 79.64


@pytest.mark.parametrize("plan", ["hf-llama2-7b.toml", "inline-overrides.toml"])
def test_check_fixture_plans_json(plan: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, data = check_json(PLANS / plan, capsys)
    assert_check_contract(code, data)


def test_check_memory_override_sets_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    # inline-overrides.toml sets memory_gib = 40: capacity is at most that, not the H100's 79.64
    _, data = check_json(PLANS / "inline-overrides.toml", capsys, "--headroom", "0")
    assert data["memory"]["capacity_gib"] == pytest.approx(40.0, abs=0.001)
    assert data["parallel"]["dp"] == 8  # 64 / (tp 4 x pp 2)
    assert len(data["memory"]["stages"]) == 2


def test_check_headroom_lowers_capacity(capsys: pytest.CaptureFixture[str]) -> None:
    _, zero = check_json(EXAMPLE, capsys, "--headroom", "0")
    _, ten = check_json(EXAMPLE, capsys, "--headroom", "10")
    assert zero["memory"]["capacity_gib"] == pytest.approx(79.64, abs=0.001)
    assert ten["memory"]["capacity_gib"] == pytest.approx(79.64 * 0.9, abs=0.01)  # 71.676
    assert ten["memory"]["peak_gib"] == zero["memory"]["peak_gib"]


def test_check_human_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check", str(PLANS / "hf-llama2-7b.toml")], capsys)
    assert code in (0, 1)
    assert out.strip()
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_check_without_parallel(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", str(PLANS / "no-parallel.toml"), "--json"], capsys)
    assert code == 2
    assert out == ""
    assert "parallel" in err
    assert str(PLANS / "no-parallel.toml") in err


@pytest.mark.parametrize("headroom", ["150", "100", "-1"])
def test_check_bad_headroom(headroom: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", str(EXAMPLE), "--headroom", headroom, "--json"], capsys)
    assert code == 2
    assert out == ""
    assert "--headroom" in err


@pytest.mark.parametrize(
    ("gpu", "needle"),
    [
        ("no-such-gpu", "--gpu: unknown GPU 'no-such-gpu'"),
        # the script asks for fp8: the error names the script and the field, not a flag
        ("a100-sxm-80gb", 'train.sh: training.precision: "fp8"'),
    ],
)
def test_check_megatron_args_names_the_flag_or_the_script(
    gpu: str, needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --vocab-size 32000 "
        "--seq-length 4096 --fp8-format hybrid\n"
    )
    argv = ["check", "--megatron-args", str(script), "--gpu", gpu, "--num-gpus", "8"]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert needle in err, err


def test_check_megatron_args_reads_the_scripts_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the same line with and without the allocator's expandable segments exported before it: the
    # fragmentation planner counts on activations falls from 10% to 2% (memory.fragmentation), so
    # the peak falls and the weights do not move
    line = (
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 4096 "
        "--num-attention-heads 32 --vocab-size 32000 --seq-length 4096 --micro-batch-size 2 "
        "--global-batch-size 16 --bf16\n"
    )
    peaks, weights = [], []
    for env in ("", "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n"):
        script = tmp_path / "train.sh"
        script.write_text(env + line)
        argv = ["check", "--megatron-args", str(script), "--gpu", "h100-sxm-80gb"]
        code, out, err = run([*argv, "--num-gpus", "8", "--json"], capsys)
        assert code == 0, err
        stage = json.loads(out)["memory"]["stages"][0]
        peaks.append(stage["total_gib"])
        weights.append(stage["weights_gib"])
    assert peaks[1] < peaks[0] and weights[0] == weights[1]


def bad_inputs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """name -> (plan path, a string the error must contain)."""
    return {
        "malformed": (PLANS / "bad-malformed.toml", "line 6"),
        "unknown key": (PLANS / "bad-unknown-key.toml", "training.seqlen"),
        "negative": (PLANS / "bad-negative.toml", "training.seq_length"),
        "missing": (tmp_path / "missing.toml", "no such file"),
        "directory": (tmp_path, "is a directory"),
        # a name longer than the system allows (NAME_MAX 255): refused by stat() itself
        "name too long": (tmp_path / ("x" * 300 + ".toml"), "cannot read"),
    }


@pytest.mark.parametrize(
    "case", ["malformed", "unknown key", "negative", "missing", "directory", "name too long"]
)
def test_check_bad_input_in_process(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, needle = bad_inputs(tmp_path)[case]
    code, out, err = run(["check", str(path), "--json"], capsys)
    assert code == 2
    assert out == ""  # --json: nothing on stdout but the one document, and there is none
    assert str(path) in err and needle in err
    assert err.startswith("planner: error: ")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "case", ["malformed", "unknown key", "negative", "missing", "directory", "name too long"]
)
def test_check_bad_input_subprocess_no_traceback(case: str, tmp_path: Path) -> None:
    path, needle = bad_inputs(tmp_path)[case]
    proc = run_subprocess("check", str(path), "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_shows_traceback(tmp_path: Path) -> None:
    proc = run_subprocess("--debug", "check", str(tmp_path / "missing.toml"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr
    assert "InputError" in proc.stderr
    # after the command too, where users append it (the command's parser refused it)
    proc = run_subprocess("check", str(tmp_path / "missing.toml"), "--debug")
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "InputError" in proc.stderr
    assert "No such option" not in proc.stderr


def test_check_example_subprocess_end_to_end() -> None:
    proc = run_subprocess("check", "examples/llama3.1-8b-h100.toml", "--json")
    data = json.loads(proc.stdout)
    assert proc.returncode == (0 if data["fits"] else 1), proc.stderr
    assert data["parallel"]["dp"] == 4
    for key in ("step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu"):
        assert data["performance"][key] > 0
