"""planner.cli: the public contract of DESIGN.md section 2 (exit codes, --json, stderr messages).

Most checks run the CLI in-process through `planner.cli.main(argv)`; a few run
`python -m planner` in a subprocess to see exactly what a script or CI job would see.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import STAGE_KEYS, run
from paths import REPO
from plan_text import plan_text, write

import planner
from planner.model import one_f_one_b

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"
PLANS = REPO / "tests" / "data" / "plans"
HF = REPO / "tests" / "data" / "hf"


def run_subprocess(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- catalog


def test_catalog_list_models_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["catalog", "list", "models", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"models"}  # `models` only: no gpus key
    names = [m["name"] for m in data["models"]]
    zoo = sorted(p.stem for p in (REPO / "model_zoo").glob("*.toml"))
    assert sorted(names) == zoo
    for m in data["models"]:
        assert isinstance(m["params_total"], int) and m["params_total"] > 0, m["name"]
        assert 0 < m["params_active"] <= m["params_total"], m["name"]
        assert m["num_layers"] > 0  # full field dump, not just the name


def test_catalog_list_gpus_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["catalog", "list", "gpus", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"gpus"}
    names = sorted(g["name"] for g in data["gpus"])
    assert names == sorted(p.stem for p in (REPO / "hardware_catalog" / "gpus").glob("*.toml"))
    h100 = next(g for g in data["gpus"] if g["name"] == "h100-sxm-80gb")
    assert h100["peak_tflops_bf16"] == 989
    assert h100["tiers"][0]["span_gpus"] == 8


def test_catalog_list_all_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["catalog", "list", "--json"], capsys)
    assert code == 0
    assert set(json.loads(out)) == {"gpus", "models"}


def test_catalog_list_unknown_kind(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["catalog", "list", "tpus"], capsys)
    assert code == 2
    assert out == ""
    assert "'tpus'" in err


def test_catalog_list_tables(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["catalog", "list"], capsys)
    assert code == 0
    assert "h100-sxm-80gb" in out and "llama3.1-405b" in out


def test_catalog_alone_lists_everything(capsys: pytest.CaptureFixture[str]) -> None:
    """`planner catalog` with no sub-command lists what `catalog list` does (it used to print
    its help and exit 2, the bad-input code, for a command that asked nothing wrong)."""
    code, listed, _ = run(["catalog", "list"], capsys)
    assert code == 0
    code, alone, err = run(["catalog"], capsys)
    assert code == 0, err
    assert alone == listed


def test_catalog_show_llama3_405b(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["catalog", "show", "llama3.1-405b", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["name"] == "llama3.1-405b"
    assert data["num_layers"] == 126
    # oracle: Llama 3 paper (Dubey et al. 2024) reports 405.8B; tolerance 1.5%
    assert data["params_total"] == pytest.approx(405.8e9, rel=0.015)
    assert data["params_active"] == data["params_total"]  # dense


def test_catalog_show_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["catalog", "show", "a100-sxm-80gb", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "a100-sxm-80gb"
    assert data["peak_tflops_fp8"] is None  # Ampere: no FP8


def test_catalog_show_hf_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    code, out, err = run(["catalog", "show", "tests/data/hf/llama2-7b.json", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert (data["num_layers"], data["hidden_size"], data["ffn_hidden_size"]) == (32, 4096, 11008)
    # oracle, hand arithmetic (matches HF's 6,738,415,616 for Llama-2-7b-hf):
    #   embeddings, untied: 2 x 32000 x 4096                        =   262,144,000
    #   per layer: attention 4 x 4096^2 = 67,108,864; SwiGLU 3 x 4096 x 11008 = 135,266,304;
    #              two RMSNorms 2 x 4096 = 8,192  -> 202,383,360 x 32 = 6,476,267,520
    #   final norm                                                  =         4,096
    assert data["params_total"] == 262_144_000 + 6_476_267_520 + 4_096


def test_catalog_show_model_toml_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["catalog", "show", str(REPO / "model_zoo" / "mixtral-8x7b.toml"), "--json"], capsys
    )
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "mixtral-8x7b"
    assert data["params_active"] < data["params_total"]  # top-2 of 8 experts


def test_catalog_show_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["catalog", "show", "llama3.1-8b"], capsys)
    assert code == 0
    assert "llama3.1-8b" in out and "params_total" in out


def test_catalog_show_unknown_name_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["catalog", "show", "llama3-405b"], capsys)
    assert code == 2
    assert out == ""
    assert "'llama3-405b'" in err
    assert "llama3.1-405b" in err.split("did you mean", 1)[1]
    assert "Traceback" not in err


def test_catalog_show_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    missing = tmp_path / "config.json"
    code, out, err = run(["catalog", "show", str(missing), "--json"], capsys)
    assert code == 2
    assert out == ""
    assert str(missing) in err


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


def test_version_subprocess() -> None:
    proc = run_subprocess("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == planner.__version__


def test_version_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.strip() == planner.__version__


def test_unknown_command_is_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(["frobnicate"], capsys)
    assert code == 2
    assert "Traceback" not in err


def test_explain_json_has_memory_and_time_side_by_side() -> None:
    proc = run_subprocess("explain", "examples/llama3.1-8b-h100.toml", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    perf = data["performance"]
    # the breakdown's exposed parts add up to the step time (hidden ones overlap compute)
    parts = {k: v for k, v in perf["breakdown_s"].items() if not k.endswith("_hidden")}
    assert sum(parts.values()) == pytest.approx(perf["step_time_s"], abs=1e-3)
    # tokens/s/GPU = seq x global batch / (step time x GPUs) = 8192 x 128 / (t x 8)
    assert perf["tokens_per_s_per_gpu"] == pytest.approx(
        8192 * 128 / (perf["step_time_s"] * 8), rel=1e-3
    )
    assert data["memory"]["stages"] and data["model"]["params_total"] > 8e9


def test_explain_gives_each_stage_its_time() -> None:
    # Llama 3.1 405B, pp 16 with Meta's split: 7 layers on the first and last ranks, 8 between
    proc = run_subprocess("explain", "tests/data/plans/launch-llama3.1-405b.toml", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    perf, mem = data["performance"], data["memory"]["stages"]
    stages = perf["stages"]
    assert [s["stage"] for s in stages] == list(range(16)) == [s["stage"] for s in mem]
    per_mb = [s["forward_s"] + s["backward_s"] for s in stages]
    # the step is Megatron's 1F1B over these stages (m = 2048 sequences / (dp 64 x mbs 1) = 32)
    # + the tail; the slowest ranks are inner ones, so it is below the closed form m x the
    # slowest + the fill and drain (sum - max), exact where the last stage is the slowest
    b = perf["breakdown_s"]
    tail = b["dp_comm_exposed"] + b["optimizer"] + b["other"]
    fwds, bwds = [s["forward_s"] for s in stages], [s["backward_s"] for s in stages]
    rebuilt = one_f_one_b.simulate_1f1b(fwds, bwds, 32) + tail
    assert rebuilt == pytest.approx(perf["step_time_s"], rel=1e-4)
    assert rebuilt < 32 * max(per_mb) + (sum(per_mb) - max(per_mb)) + tail
    # a 7-layer rank is faster than an 8-layer one; the last also runs the output layer
    assert per_mb[0] < per_mb[1] == pytest.approx(per_mb[14]) and per_mb[15] > per_mb[0]
    text = run_subprocess("explain", "tests/data/plans/launch-llama3.1-405b.toml").stdout
    assert "fwd ms" in text and "bwd ms" in text


def test_explain_human_output_names_the_bottleneck() -> None:
    proc = run_subprocess("explain", "examples/llama3.1-8b-h100.toml")
    assert proc.returncode == 0, proc.stderr
    assert "Step time" in proc.stdout and "MFU" in proc.stdout
    assert "Memory per GPU" in proc.stdout


def test_megatron_warnings_are_reported_not_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Megatron-FSDP (ZeRO 3) with pp 2: Megatron asserts nothing of the pair, and its own
    # tests never run it (`rules.feature_warnings.fsdp_untested`), so check exits 0 or 1 (never
    # 2), names the field on stderr and lists the warning in --json
    plan = tmp_path / "fsdp.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n'
        '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        '[parallel]\ntp = 1\npp = 2\nzero_stage = 3\nrecompute = "full"\n'
    )
    for command in ("check", "explain"):
        code, out, err = run([command, str(plan), "--json"], capsys)
        assert code in (0, 1), err
        (line,) = json.loads(out)["warnings"]
        assert line.startswith(f"{plan}: parallel.zero_stage: Megatron-FSDP (zero_stage 3)")
        assert f"planner: warning: {line}" in err
    # at ZeRO 1 there is nothing to warn about
    plan.write_text(plan.read_text().replace("zero_stage = 3", "zero_stage = 1"))
    _, out, err = run(["check", str(plan), "--json"], capsys)
    assert json.loads(out)["warnings"] == [] and "warning" not in err


def test_moe_with_tp_without_sequence_parallel_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Mixtral with tp 2 and ep 2 without sequence parallelism: Megatron's MoE layer raises
    ValueError at its first training forward (transformer MoE moe_layer.py:636-640 d98e8a64),
    so check exits 2 naming the field, no traceback."""
    plan = tmp_path / "moe.toml"
    plan.write_text(
        '[model]\nname = "mixtral-8x7b"\n'
        '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        '[parallel]\ntp = 2\npp = 2\nep = 2\nsequence_parallel = false\nrecompute = "full"\n'
    )
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 2 and "Traceback" not in err
    assert f"{plan}: parallel.sequence_parallel: experts at tensor_model_parallel_size 2" in err


def explained_parts(plan: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, float], str]:
    """`explain --json`'s exposed step-time parts, checked to add up to the step, and the human
    output of the same plan."""
    code, out, err = run(["explain", str(plan), "--json"], capsys)
    assert code == 0, err
    perf = json.loads(out)["performance"]
    parts = {k: v for k, v in perf["breakdown_s"].items() if not k.endswith("_hidden")}
    assert sum(parts.values()) == pytest.approx(perf["step_time_s"], abs=1e-3)
    _, text, _ = run(["explain", str(plan)], capsys)
    return parts, text


def test_explain_shows_the_host_transfers_of_cpu_offloading(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Llama 3.1 8B on 8 H100 (PCIe 5 host link), tp 1 x dp 8, 8k sequences of micro-batch 2,
    # the first 16 layers' activations offloaded: the exposed parts still add up to the step and
    # the human table has a row for the host transfers whenever they are exposed
    plan = tmp_path / "offload.toml"
    plan.write_text(
        EXAMPLE.read_text().split("[parallel]")[0]
        + "[parallel]\ntp = 1\npp = 1\nmicro_batch_size = 2\ncpu_offloading_num_layers = 16\n"
    )
    parts, text = explained_parts(plan, capsys)
    assert ("CPU offloading host transfers" in text) == (parts["offload_exposed"] > 0)


def test_explain_shows_the_wait_on_a_shared_pcie_link(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Llama 3.1 70B on 64 L40S (no NVLink), tp 2 x ZeRO-3 dp 32 with 77 layers offloaded: TP,
    # DP and host copies all cross each GPU's one PCIe link, busier than the rest of the step
    # (tests/model/test_shared_link.py has its arithmetic); explain names the wait, and the
    # exposed parts still add up to the step
    plan = write(
        tmp_path,
        plan_text(
            model='[model]\nname = "llama3.1-70b"\n',
            cluster='[cluster]\ngpu = "l40s-48gb"\nnum_gpus = 64\n',
            training="[training]\nseq_length = 4096\nglobal_batch_size = 512\n",
            parallel="[parallel]\ntp = 2\ndp = 32\nsequence_parallel = true\n"
            "tp_comm_overlap = true\nmicro_batch_size = 4\nzero_stage = 3\n"
            "cpu_offloading_num_layers = 77\n",
        ),
        "l40s.toml",
    )
    parts, text = explained_parts(plan, capsys)
    assert parts["link_shared"] > 0
    assert "waiting on the one PCIe link all traffic shares" in text
