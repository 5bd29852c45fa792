"""`planner check --megatron-args` with --verbose and --vocab-size: what it says on stderr, what
it keeps off stdout, and how it exits.

Oracles: the project's contract (exit 0 fits / 1 does not / 2 bad input, one message naming the
file, the flag and the value; with --json nothing but the JSON document on stdout), and
megatron_rules.md section 12 for which tokenizers need the vocabulary given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

LINE = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
    "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --lr 3e-4 --log-interval 1 "
    "--ckpt-fully-parallel-save"
)


def script(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.sh"
    path.write_text(text + "\n")
    return str(path)


def check(path: str, *extra: str) -> list[str]:
    return ["check", "--megatron-args", path, "--gpu", "h100-sxm-80gb", "--num-gpus", "8", *extra]


def test_verbose_lists_what_was_ignored_on_stderr_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = script(tmp_path, LINE)
    code, out, err = run(check(path, "--json", "--verbose"), capsys)
    assert code == 0
    assert json.loads(out)["fits"] is True  # stdout: the one JSON document
    ignored = next(line for line in err.splitlines() if "ignored Megatron-LM flags" in line)
    for flag in ("--lr", "--log-interval", "--ckpt-fully-parallel-save"):
        assert flag in ignored
    # torchrun's own options come before the script: not the script's, not listed
    assert "--nproc_per_node" not in err
    assert "vocabulary: GPT2BPETokenizer" in err  # the note, always


def test_without_verbose_only_the_notes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(check(script(tmp_path, LINE)), capsys)
    assert code == 0
    assert "ignored" not in err and "note:" in err


def test_vocab_size_gives_what_the_tokenizer_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf = LINE + " --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B"
    path = script(tmp_path, hf)
    code, out, err = run(check(path, "--json"), capsys)
    assert code == 2 and out == ""
    assert path in err and "--tokenizer-type" in err and "--vocab-size N" in err
    assert "Traceback" not in err
    code, out, err = run(check(path, "--json", "--vocab-size", "128256"), capsys)
    assert code == 0 and json.loads(out)["fits"] is True
    assert "vocabulary: --vocab-size 128256 given to planner" in err


def test_explain_reads_the_same_line_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain --megatron-args: the plan check reads (same peak), and where its time goes."""
    path = script(tmp_path, LINE)
    code, out, _ = run(check(path, "--json"), capsys)
    assert code == 0
    checked = json.loads(out)["memory"]["peak_gib"]
    argv = ["explain", "--megatron-args", path, "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["memory"]["peak_gib"] == checked
    assert data["performance"]["step_time_s"] > 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["check", "plan.toml", "--vocab-size", "1000"], "--vocab-size: only with --megatron-args"),
        (["check", "plan.toml", "--verbose"], "--verbose: only with --megatron-args"),
        (["explain", "plan.toml", "--vocab-size", "1000"], "--vocab-size: only with"),
        (["explain", "plan.toml", "--megatron-args", "x.sh"], "give one of a plan file"),
        (["explain", "plan.toml", "--gpu", "h100-sxm-80gb"], "--gpu: only with --megatron-args"),
    ],
)
def test_megatron_only_options_need_megatron_args(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and needle in err


def test_bad_vocab_size_and_typo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script(tmp_path, LINE)
    code, _, err = run(check(path, "--vocab-size", "0"), capsys)
    assert code == 2 and "--vocab-size" in err
    typo = script(tmp_path, LINE + " --tensor-model-paralel-size 2")
    code, out, err = run(check(typo, "--json"), capsys)
    assert code == 2 and out == ""
    assert f"{typo}: --tensor-model-paralel-size: not a Megatron-LM flag" in err


def test_the_gpu_count_is_the_launchers_where_not_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --num-gpus, torchrun's --nproc-per-node x --nnodes (Megatron-LM's examples pass
    them through an array of variables): 8 x 2 = 16 here, the same plan as --num-gpus 16, and
    noted; a line whose launcher says no count asks for --num-gpus."""
    body = LINE.removeprefix("torchrun --nproc_per_node 8 ").replace(
        "--global-batch-size 8", "--global-batch-size 16"
    )
    text = (
        "GPUS_PER_NODE=8\nNUM_NODES=2\n"
        "DISTRIBUTED_ARGS=(\n  --nproc_per_node $GPUS_PER_NODE\n  --nnodes $NUM_NODES\n)\n"
        f"torchrun ${{DISTRIBUTED_ARGS[@]}} {body}"
    )
    path = script(tmp_path, text)
    gpu = ["check", "--megatron-args", path, "--gpu", "h100-sxm-80gb", "--json"]
    code, out, err = run(gpu, capsys)
    assert code == 0, err
    assert "GPU count 16: the launcher's --nproc-per-node 8 x --nnodes 2" in err
    code, given, _ = run([*gpu, "--num-gpus", "16"], capsys)
    assert json.loads(out)["memory"] == json.loads(given)["memory"]
    module = script(tmp_path, f"python -m torch.distributed.run --nproc-per-node 4 {body}")
    code, _, err = run(["check", "--megatron-args", module, "--gpu", "h100-sxm-80gb"], capsys)
    assert code in (0, 1) and "GPU count 4" in err
    bare = script(tmp_path, body)
    code, out, err = run(["check", "--megatron-args", bare, "--gpu", "h100-sxm-80gb"], capsys)
    assert code == 2 and "give --num-gpus N" in err


def test_layout_errors_name_the_megatron_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As Megatron-LM's gpt-oss example (pp 8 on 12 layers): pp 4 on 6 layers; the error names
    the flag the script set beside the plan field (it named only `parallel.pp`)."""
    line = LINE.replace("--num-layers 4", "--num-layers 6")
    path = script(tmp_path, line + " --pipeline-model-parallel-size 4")
    code, _, err = run(check(path), capsys)
    assert code == 2
    assert f"{path}: --pipeline-model-parallel-size (parallel.pp): num_layers (6)" in err
