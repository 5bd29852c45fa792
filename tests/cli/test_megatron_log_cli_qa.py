"""`--megatron-log` and `planner calibrate` from the command line (QA, 2026-12): restarts in a
log without arguments blocks, a corrupt gzip'd log, `--vocab-size` for a log's tokenizer (and
the padded vocabulary Megatron prints after the block), and `check --help`.

Oracles: the same log with its arguments blocks (measured by `planner.calibration.measured`'s
restart policy), the exit-code contract (2 naming the file), Megatron-LM d98e8a64's
` > padded vocab` format string (megatron/core/tokenizers/utils/build_tokenizer.py :141-145),
and the options `check` passes to the log reader (`calibration.log_run(path, gpu, num_gpus,
vocab_size)`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from cli_run import run
from paths import DATA

from planner.cli.app import app
from tests.cli.test_calibrate_cli import log_head

LOGS = sorted((DATA / "megatron_logs").glob("*.log"))
GPU = ["--gpu", "h100-sxm-80gb"]
PLAN = (
    '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
    "[training]\nseq_length = 8192\nglobal_batch_size = 8\n[parallel]\ntp = 1\npp = 4\n"
)


def _without_arguments(text: str) -> str:
    """The log as the last rank's own file holds it: no arguments block."""
    lines = [ln for ln in text.splitlines() if not ln.startswith("  ") and "arguments --" not in ln]
    return "\n".join(lines) + "\n"


def _measured(log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *more: str) -> float:
    argv = ["calibrate", str(log), *GPU, *more, "--out", str(tmp_path / "p.toml"), "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    (residual,) = json.loads(out)["residuals"]
    return float(residual["measured_step_s"])


@pytest.mark.parametrize("order", ["short first", "short last"])
def test_restarts_without_arguments_blocks_measure_as_with_them(
    order: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA: a job that restarted, in a log without arguments blocks (`calibrate --plan`), was
    one run: the restart's start-up lines (training.py :3539, every start logs its first
    iteration; :3289, its interval timer is not reset) entered the median. Each start is now a
    run, and the longest is measured, as in the same log with its arguments blocks (a restart
    prints them again: measured.py's `_same_job`, "measured on the run with more iteration
    lines")."""
    text = LOGS[0].read_text()
    short = log_head(text, 3) * 3  # three attempts that died after three lines
    both = short + text if order == "short first" else text + short
    with_args = tmp_path / "args.log"
    with_args.write_text(both)
    bare = tmp_path / "bare.log"
    bare.write_text(_without_arguments(both))
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    expected = _measured(with_args, tmp_path, capsys)
    assert _measured(bare, tmp_path, capsys, "--plan", str(plan)) == expected


def test_a_restart_note_names_the_run_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the reader prints for a start it leaves out: its first line, its line count and
    the run measured instead."""
    text = _without_arguments(LOGS[0].read_text())
    bare = tmp_path / "bare.log"
    bare.write_text(log_head(text, 4) + text)
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    argv = ["calibrate", str(bare), *GPU, "--plan", str(plan), "--out", str(tmp_path / "p")]
    code, _, err = run(argv, capsys)
    first = next(i for i, ln in enumerate(bare.read_text().splitlines(), 1) if " iteration " in ln)
    assert code == 0, err
    assert f"{bare}:{first}: a run of 4 iteration line(s)" in err
    assert "left out, measured on the run with more iteration lines" in err


@pytest.mark.parametrize("command", ["calibrate", "explain", "check"])
def test_a_corrupt_gzipd_log_is_named(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes flipped inside the deflate stream: zlib.error, which is no OSError, ended as
    "internal error: Error -3 while decompressing data" without the file's name."""
    data = gzip.compress(LOGS[0].read_bytes())
    log = tmp_path / "run.log.gz"
    log.write_bytes(data[:20] + bytes(b ^ 0x5A for b in data[20:60]) + data[60:])
    if command == "calibrate":
        argv = [command, str(log), *GPU, "--out", str(tmp_path / "p.toml")]
    else:
        argv = [command, "--megatron-log", str(log), *GPU]
    code, _, err = run(argv, capsys)
    assert code == 2 and "internal error" not in err and "Traceback" not in err, err
    assert f"{log}: cannot read the gzip'd log" in err, err


def _hf_log(tmp_path: Path, padded_line: bool) -> Path:
    """The fixture log (NullTokenizer, --vocab-size 131073) as an HF tokenizer's run prints it:
    `tokenizer_type HuggingFaceTokenizer`, `vocab_size None`; with `padded_line`, the line
    `_set_padded_vocab_size` prints when the tokenizer is built, after the block
    (`vocab_size_with_padding`, build_tokenizer.py :141-145; 131073 padded to a multiple of
    128 x tp 1)."""
    text = LOGS[0].read_text()
    dots = "." * 34
    for old, new in (
        (f"tokenizer_type {dots} NullTokenizer", f"tokenizer_type {dots} HuggingFaceTokenizer"),
        (f"vocab_size {'.' * 38} 131073", f"vocab_size {'.' * 38} None"),
    ):
        assert old in text, old
        text = text.replace(old, new, 1)
    if padded_line:
        line = " > padded vocab (size: 131073) with 127 dummy tokens (new size: 131200)"
        text = text.replace("> building tokenizer ...\n", f"> building tokenizer ...\n{line}\n")
    path = tmp_path / f"hf{int(padded_line)}.log"
    path.write_text(text)
    return path


def _prediction(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The prediction `--json` gives: step time and per-stage memory (the measured side is the
    log's, the same for both)."""
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    return {"step_time_s": data["performance"]["step_time_s"], "memory": data["memory"]}


def test_explain_takes_vocab_size_for_a_log_as_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`explain --megatron-log LOG --vocab-size N` was refused ("only with --megatron-args")
    where `check` passes it to the log reader: the same prediction now."""
    log = str(_hf_log(tmp_path, False))
    code, _, err = run(["explain", "--megatron-log", log, *GPU], capsys)
    assert code == 2 and "--vocab-size" in err, err
    given = ["--megatron-log", log, *GPU, "--vocab-size", "131073"]
    explained = _prediction(["explain", *given], capsys)
    checked = _prediction(["check", *given], capsys)
    assert explained == checked


def test_the_padded_vocab_line_is_the_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The block prints `padded_vocab_size None` for a tokenizer whose size is its own (the
    block is printed at the end of validate_args, before the tokenizer is built): the size
    comes from the ` > padded vocab (size: N)` line, as --vocab-size N would give it."""
    with_line = str(_hf_log(tmp_path, True))
    without = str(_hf_log(tmp_path, False))
    for command in ("explain", "check"):
        read = _prediction([command, "--megatron-log", with_line, *GPU], capsys)
        given = _prediction(
            [command, "--megatron-log", without, *GPU, "--vocab-size", "131073"], capsys
        )
        assert read == given


def test_check_help_says_which_options_a_log_takes() -> None:
    """`check --help` said --gpu, --num-gpus and --vocab-size were for --megatron-args only;
    `check` passes all three to the log reader (and --gpu, --num-gpus to --torchtitan-config)."""
    command = typer.main.get_command(app)
    check = command.commands["check"]  # type: ignore[attr-defined]
    helps = {p.name: p.help for p in check.params}
    for name in ("gpu", "num_gpus", "vocab_size"):
        assert "--megatron-log" in helps[name] and "--megatron-args" in helps[name], name
    explain = command.commands["explain"]  # type: ignore[attr-defined]
    vocab = next(p for p in explain.params if p.name == "vocab_size")
    assert "--megatron-log" in vocab.help
