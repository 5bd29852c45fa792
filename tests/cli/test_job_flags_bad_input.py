"""Job flags over a job file whose tables or values are bad (QA s41 q1, items 2 and 3): the flags
were written into the raw TOML before validation, so a `[cluster]` or `[training]` that is not a
table crashed ("internal error: TypeError"), --nodes read a bad gpus_per_node or GPU unchecked,
and a --nodes past the GPU limit quoted the product, not the user's count. Oracle: DESIGN.md
section 2's contract (exit 2, naming the file, the field and the value, as the same file without
the flag is refused; never an internal error) and, for the limit, hardware.MAX_GPUS = 2**24 =
16,777,216 GPUs: 3,000,000 nodes x 8 H100s = 24,000,000 is over, 16,777,216 // 8 = 2,097,152
nodes at most."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

MODEL = '[model]\nname = "llama3.1-8b"\n'
TRAINING = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert "internal error" not in err and "Traceback" not in err, err
    return err


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "argv", "field", "value"),
    [
        (
            "training = [1, 2]\n" + MODEL + '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n',
            ["suggest", "--seq-length", "4096"],
            "training",
            "(got [1, 2])",
        ),
        ('cluster = "x"\n' + MODEL + TRAINING, ["scale"], "cluster", '(got "x")'),
        ('cluster = "x"\n' + MODEL + TRAINING, ["suggest", "--nodes", "2"], "cluster", '"x"'),
        (
            MODEL + '[cluster]\ngpu = "h100-sxm-80gb"\ngpus_per_node = "x"\n' + TRAINING,
            ["suggest", "--nodes", "2"],
            "cluster.gpus_per_node",
            '(got "x")',
        ),
        (
            MODEL + '[cluster]\ngpu = "h100-sxm-80gb"\ngpus_per_node = nan\n' + TRAINING,
            ["suggest", "--nodes", "2"],
            "cluster.gpus_per_node",
            "(got nan)",
        ),
        (
            MODEL + '[cluster]\ngpu = "nosuch"\nnum_gpus = 8\n' + TRAINING,
            ["suggest", "--nodes", "2"],
            "cluster.gpu",
            "'nosuch'",
        ),
    ],
)
def test_flags_over_a_bad_job_file_name_its_field(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    argv: list[str],
    field: str,
    value: str,
) -> None:
    path = write(tmp_path, text)
    err = refused([argv[0], str(path), *argv[1:]], capsys)
    assert f"{path}: {field}: " in err and value in err, err


def test_nodes_over_the_gpu_limit_quote_the_node_count(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["suggest", "--nodes", "3000000"], capsys)
    assert "--nodes: 3,000,000 nodes of 8 GPUs" in err, err
    assert "16,777,216" in err and "at most 2,097,152 nodes" in err, err


@pytest.mark.parametrize(
    ("pattern", "said"),
    [("", '""'), ("M*x", '"M*x"')],  # no layers; a symbol Megatron-LM has not (hybrid.py)
)
def test_a_bad_hybrid_pattern_names_its_field_and_value(
    pattern: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the fuzz QA's repro: the inline model of tests/data/plans/inline-overrides.toml with a
    # hybrid_layer_pattern added; before, "model: the main pattern has no layers"
    text = (REPO / "tests" / "data" / "plans" / "inline-overrides.toml").read_text()
    text = text.replace("[model]\n", f'[model]\nhybrid_layer_pattern = "{pattern}"\n', 1)
    path = write(tmp_path, text)
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2
    assert f"hybrid_layer_pattern {said}" in " ".join(err.split())
