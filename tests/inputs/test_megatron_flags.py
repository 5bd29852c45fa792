"""Megatron-LM's flag list and what the reader makes of flags it does not read.

Oracles: the header of planner/inputs/megatron_flags.txt (898 option strings, dumped from the
parser of Megatron-LM d98e8a64), Megatron-LM's functional-test command lines
(benchmarks/data/megatron_functional_tests/command_lines.json) for the flags the issue names and
for the inference scripts' own flags, and argparse's allow_abbrev=False (a misspelt flag is
rejected, never guessed)."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys

import pytest
from paths import BENCHMARKS

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_flags import (
    NOT_MODELLED,
    NOT_MODELLED_DEFAULTS,
    READ,
    TYPO_CUTOFF,
    megatron_flags,
    typo_of,
)

LINE = (
    "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --vocab-size 1000 "
    "--seq-length 128 --bf16 "
)


def test_the_list_is_the_parsers() -> None:
    # the file's header: "Counts: 898 flags = 876 from add_megatron_arguments + 22 from
    # add_modelopt_args"
    assert len(megatron_flags()) == 898
    assert all(f.startswith("--") for f in megatron_flags())


def test_every_flag_the_reader_uses_is_megatrons() -> None:
    assert READ.issubset(megatron_flags())
    assert megatron_flags().issuperset(NOT_MODELLED)
    assert set(NOT_MODELLED_DEFAULTS) <= set(NOT_MODELLED)


def test_the_list_is_loaded_at_first_use_not_at_import() -> None:
    code = (
        "import planner.inputs.megatron_args, planner.cli.app\n"
        "from planner.inputs.megatron_flags import megatron_flags\n"
        "print(megatron_flags.cache_info().currsize)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


@pytest.mark.parametrize(
    "flag",
    # the issue: names with "parallel" that are Megatron's own, memory-neutral flags (and a log
    # one, given its value: `--log-interval` bare exits, "expected one argument")
    ["--log-interval 10", "--ckpt-fully-parallel-save", "--ckpt-fully-parallel-load"],
)
def test_megatron_flags_that_do_not_change_memory_are_ignored_and_listed(flag: str) -> None:
    reading = megatron_args.read(LINE + flag, "h100-sxm-80gb", 8)
    name = flag.split()[0]
    assert name in reading.ignored and name not in reading.unknown


def test_flags_megatron_lacks_are_listed_apart() -> None:
    """A word after the script that Megatron-LM's parser lacks (a fork's flag) is listed; the
    launcher's options before the script are not the script's, and not listed. (On Megatron-LM's
    own pretrain_gpt.py such a flag exits 2: test_megatron_entry_parser.py.)"""
    text = "torchrun --nproc_per_node 8 --nnodes 1 pretrain_llama.py " + LINE + "--lr 3e-4"
    reading = megatron_args.read(text + " --zz-fork-only 1", "h100-sxm-80gb", 8)
    assert reading.unknown == ("--zz-fork-only",)
    assert "--lr" in reading.ignored
    assert "--num-layers" not in reading.ignored  # read


@pytest.mark.parametrize(
    ("flag", "meant"),
    [
        ("--tensor-model-paralel-size", "--tensor-model-parallel-size"),
        ("--tensor_model_parallel_size", "--tensor-model-parallel-size"),
        ("--Pipeline-Model-Parallel-Size", "--pipeline-model-parallel-size"),
        ("--tensor-parallel-size", "--tensor-model-parallel-size"),
        ("--num-layer", "--num-layers"),
        ("--micro-batch", "--micro-batch-size"),
        ("--global-batch-sise", "--global-batch-size"),
        ("--use-distributed-optimiser", "--use-distributed-optimizer"),
    ],
)
def test_a_misspelt_layout_flag_is_an_error(flag: str, meant: str) -> None:
    assert typo_of(flag) == meant
    with pytest.raises(InputError, match=f"{flag}: not a Megatron-LM flag \\(did you mean {meant}"):
        megatron_args.read(LINE + f"{flag} 2", "h100-sxm-80gb", 8, "train.sh")


def test_a_generation_scripts_own_flags_are_not_misspellings() -> None:
    """Megatron-LM's text generation server takes --out-seq-length (its own argument, one edit
    from --seq-length): on a line that launches only such an entry point it is listed as not a
    Megatron-LM flag, where on a training line it is an error."""
    server = "torchrun tools/run_text_generation_server.py " + LINE + "--out-seq-length 64"
    reading = megatron_args.read(server, "h100-sxm-80gb", 8)
    assert "--out-seq-length" in reading.unknown
    assert any(
        n.startswith("run_text_generation_server.py runs a trained model") for n in reading.notes
    )
    with pytest.raises(InputError, match="--out-seq-length: not a Megatron-LM flag"):
        megatron_args.read(
            "python pretrain_gpt.py " + LINE + "--out-seq-length 64", "h100-sxm-80gb", 8
        )


def test_pai_megatron_patch_flags_are_not_misspellings() -> None:
    """Pai-Megatron-Patch's scripts pass --patch-tokenizer-type (one edit class from
    --tokenizer-type) and --extra-vocab-size: listed as not Megatron-LM flags, the vocabulary
    given with --vocab-size, where every Pai script was refused as misspelt."""
    line = "torchrun pretrain_llama.py " + LINE + "--patch-tokenizer-type LLama3Tokenizer "
    reading = megatron_args.read(line + "--extra-vocab-size 256", "h100-sxm-80gb", 8, "x", 1000)
    assert {"--patch-tokenizer-type", "--extra-vocab-size"} <= set(reading.unknown)
    # without the exemption it would be one: as alike to --tokenizer-type as the cut-off asks
    alike = difflib.SequenceMatcher(None, "--patch-tokenizer-type", "--tokenizer-type").ratio()
    assert alike >= TYPO_CUTOFF


def non_megatron_flags_in_the_functional_tests() -> list[str]:
    cases = json.loads(
        (BENCHMARKS / "data/megatron_functional_tests/command_lines.json").read_text()
    )
    known = megatron_flags()
    return sorted(
        {
            w.partition("=")[0]
            for case in cases["cases"]
            for w in case["model_args"]
            if w.startswith("--") and w.partition("=")[0] not in known
        }
    )


def test_no_flag_of_megatrons_own_test_lines_is_taken_for_a_typo() -> None:
    # the inference and post-training scripts' own flags (--total-seq-length, --top_k,
    # --num-tokens-to-generate, ...) and torchrun's: none is a misspelling
    flags = non_megatron_flags_in_the_functional_tests()
    assert "--total-seq-length" in flags and len(flags) > 40
    torchrun = ["--nproc_per_node", "--nnodes", "--node_rank", "--master_addr", "--master_port"]
    assert [f for f in flags + torchrun if typo_of(f)] == []


def test_the_multimodal_examples_own_flag_is_no_misspelling() -> None:
    # examples/multimodal/multimodal_args.py:28 at d98e8a64 adds --dataloader-save (Energon's
    # state path), which difflib finds alike to --dataloader-type; its lines are refused as
    # multimodal training by name, not as a misspelling
    from planner.inputs.megatron_flags import typo_of

    assert typo_of("--dataloader-save") is None
    assert typo_of("--dataloader_type") == "--dataloader-type"
