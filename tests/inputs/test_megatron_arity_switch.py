"""A shell variable the file does not set after a Megatron-LM switch the reader reads
(`--sequence-parallel ${EXTRA}`): read, with a note, as bash and argparse run it.

Oracles, run here: bash expands an unset unquoted variable to no word (`set -- ... ${EXTRA}`
leaves one argument), and argparse (allow_abbrev=False, as Megatron-LM d98e8a64
arguments.py:119-120 builds its parser) then parses the switch; whatever the variable holds, a
switch (store_true, nargs 0) takes none of it, so it cannot change what the flag takes. The same
word after a value a flag needs is still refused: it may be that value. Failed before the fix
(refused, exit 2)."""

from __future__ import annotations

import argparse
import subprocess

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

LINE = (
    "D='--sequence-parallel'\n"
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 2 --hidden-size 256 "
    "--num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --vocab-size 32000 "
    "--tensor-model-parallel-size 2 "
)


def read(text: str) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", None, where="t.sh")


def test_bash_and_argparse_run_the_switch_with_an_unset_variable_after_it() -> None:
    # the oracle itself: bash leaves one word; argparse takes it as the switch
    words = subprocess.run(
        ["bash", "-c", 'unset EXTRA; for w in --sequence-parallel ${EXTRA}; do echo "$w"; done'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert words == ["--sequence-parallel"]
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--sequence-parallel", action="store_true")
    assert parser.parse_args(words).sequence_parallel is True


@pytest.mark.parametrize("tail", ["${D} ${EXTRA}", "--sequence-parallel ${EXTRA_ARGS[@]}"])
def test_an_unset_variable_after_a_switch_is_read_and_noted(tail: str) -> None:
    r = read(LINE + tail)
    assert r.doc["parallel"]["sequence_parallel"] is True  # tp 2 with the switch
    (note,) = [n for n in r.notes if n.startswith("--sequence-parallel $")]
    assert "a shell variable the file does not set" in note


def test_an_unset_variable_where_a_flag_takes_its_value_is_still_refused() -> None:
    # `--micro-batch-size ${MBS}`: the variable is the value the reader needs
    with pytest.raises(InputError, match=r"--micro-batch-size: '\$\{MBS\}'"):
        read(LINE.replace("--micro-batch-size 1", "--micro-batch-size ${MBS}"))


@pytest.mark.parametrize("words", ["$(parallel_args 2)", "`cat args.txt`"])
def test_a_command_s_output_after_a_switch_is_still_refused(words: str) -> None:
    # a command runs to print words, most likely flags (tests/inputs/test_shell_run.py)
    with pytest.raises(InputError, match=r"--sequence-parallel: .* follows it"):
        read(LINE + "--sequence-parallel " + words)
