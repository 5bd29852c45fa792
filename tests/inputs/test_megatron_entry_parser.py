"""A flag Megatron-LM's parser lacks, on a line that runs one of its training entry points whose
parser is planner's flag table (pretrain_gpt.py, pretrain_hybrid.py, pretrain_mamba.py, the
BERT and T5 examples' pretrain_*.py), exits 2 naming it, as Megatron-LM exits; other entry points
(a fork's script, pretrain_vlm.py, an example's train.py, which add flags of their own) keep it
listed as not Megatron-LM's.

Oracle: Megatron-LM d98e8a64: pretrain_gpt.py:525-528 calls parse_and_validate_args without
ignore_unknown_args, whose default is False (arguments.py:88), and parse_args then calls
parser.parse_args() (arguments.py:129-132), which exits on an unrecognized argument (argparse
with allow_abbrev=False, arguments.py:119-120; run below). --use-custom-fsdp is the old name
of --use-megatron-fsdp, not in the parser at d98e8a64. Failed before the fix (read, exit 1)."""

from __future__ import annotations

import argparse

import pytest
from megatron_mirror import MIRROR, source

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

FLAGS = (
    " --num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
    "--max-position-embeddings 128 --micro-batch-size 1 --global-batch-size 8 --bf16 "
    "--vocab-size 32000 --tokenizer-type NullTokenizer "
)


def read(script: str, extra: str) -> megatron_args.Reading:
    text = f"torchrun --nproc_per_node 8 {script}{FLAGS}{extra}"
    return megatron_args.read(text, "h100-sxm-80gb", None, where="t.sh")


@pytest.mark.parametrize(
    ("script", "cited"),
    [
        ("pretrain_gpt.py", "pretrain_gpt.py:525-528"),
        ("pretrain_hybrid.py", "pretrain_hybrid.py:542-545"),
        ("pretrain_mamba.py", "pretrain_mamba.py:16-19"),
        ("pretrain_bert.py", "pretrain_bert.py:185"),  # in examples, bert
    ],
)
def test_an_unknown_flag_on_megatron_s_entry_point_is_refused(script: str, cited: str) -> None:
    with pytest.raises(InputError, match=r"--use-custom-fsdp: not a Megatron-LM flag") as e:
        read(script, "--use-custom-fsdp")
    assert cited in str(e.value) and "arguments.py:129-132" in str(e.value)


@pytest.mark.parametrize(
    ("script", "extra"),
    [
        ("pretrain_vlm.py", "--use-custom-fsdp"),  # adds flags of its own (pretrain_vlm.py:497)
        ("train.py", "--use-custom-fsdp"),  # an example's train.py (MIMO's adds its own)
        ("pretrain_qwen.py", "--use-custom-fsdp"),  # a fork's script
        ("pretrain_gpt.py", "--patch-tokenizer-type Qwen2Tokenizer"),  # a fork's pretrain_gpt
    ],
)
def test_other_entry_points_keep_their_flags_listed(script: str, extra: str) -> None:
    assert extra.split()[0] in read(script, extra).unknown


def test_argparse_exits_on_an_unknown_flag() -> None:
    # the behaviour cited: parse_args (not parse_known_args) exits 2
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--use-megatron-fsdp", action="store_true")
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["--use-custom-fsdp"])
    assert e.value.code == 2


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_the_cited_lines_say_so() -> None:
    gpt = source("pretrain_gpt.py").splitlines()
    call = "\n".join(gpt[524:528])  # lines 525-528
    assert call.strip().startswith("args = parse_and_validate_args(")
    assert "ignore_unknown_args" not in call
    args = source("megatron/training/arguments.py").splitlines()
    assert "ignore_unknown_args=False" in args[87]  # line 88: the default
    assert args[128].strip() == "if ignore_unknown_args:"  # line 129
    assert args[131].strip() == "args = parser.parse_args()"  # line 132
    hybrid = "\n".join(source("pretrain_hybrid.py").splitlines()[541:545])
    assert "parse_and_validate_args(" in hybrid and "ignore_unknown_args" not in hybrid


def test_a_test_configuration_whose_script_planner_guesses_lists_the_flag() -> None:
    # a model_config.yaml outside the test-case tree: pretrain_gpt.py is planner's guess
    # (megatron_yaml._script), so the flag is listed, not refused
    text = (
        "MODEL_ARGS:\n  --num-layers: 2\n  --hidden-size: 256\n  --num-attention-heads: 4\n"
        "  --seq-length: 128\n  --max-position-embeddings: 128\n  --micro-batch-size: 1\n"
        "  --vocab-size: 32000\n  --tokenizer-type: NullTokenizer\n  --stop-words: the\n"
    )
    reading = megatron_args.read(text, "h100-sxm-80gb", 8, "c.yaml")
    assert "--stop-words" in reading.unknown


def test_a_refusal_on_another_tool_s_line_says_its_parser_is_its_own() -> None:
    # tools/checkpoint/checkpoint_inspector.py is a click command (:21 import click, :63
    # @click.group), not parse_and_validate_args: the refusal says so (it failed before
    # without it, naming Megatron-LM's argparse alone)
    text = "python3 tools/checkpoint/checkpoint_inspector.py convert --swiglu in_dir out_dir"
    with pytest.raises(InputError, match=r"checkpoint_inspector\.py is no Megatron-LM training"):
        megatron_args.read(text + FLAGS, "h100-sxm-80gb", 8, "t.sh")
