"""planner.cli: the public contract of DESIGN.md section 2 for `planner catalog`, --version and
unknown commands (exit codes, --json, stderr messages).

Most checks run the CLI in-process through `planner.cli.main(argv)`; a few run
`python -m planner` in a subprocess to see exactly what a script or CI job would see.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from cli_subprocess import run_subprocess
from paths import REPO

import planner

HF = REPO / "tests" / "data" / "hf"


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
