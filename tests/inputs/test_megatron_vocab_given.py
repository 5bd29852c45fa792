"""`planner check --vocab-size N` against a vocabulary the Megatron-LM line fixes itself: the
line's size wins (noted), and N is used only where the size is a tokenizer file's.

Oracles (Megatron-LM d98e8a64): megatron/core/tokenizers/utils/build_tokenizer.py:96-102 passes
--vocab-size to NullTokenizer, whose null_tokenizer.py:16-18 keeps it as its size, and :58-66
passes it (not the tiktoken file's size) to TikTokenizer; megatron_hf_tokenizer.py:114-118
downloads the built-in tokenizer's public vocabulary (GPT-2's 50,257) where no --vocab-file is
given; a HuggingFace tokenizer's size is its files' (build_tokenizer.py:68-74), which planner does
not open. The line-fixed cases read N before the fix."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args

SHAPE = (
    "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 128 "
    "--max-position-embeddings 128 --bf16 "
)
GIVEN = 128_256


def reading(text: str) -> megatron_args.Reading:
    return megatron_args.read(SHAPE + text, "h100-sxm-80gb", 8, "train.sh", GIVEN)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("--tokenizer-type NullTokenizer --vocab-size 32000", 32_000),  # the line's --vocab-size
        ("--tokenizer-type TikTokenizer --vocab-size 65536", 65_536),  # the line's --vocab-size
        ("--tokenizer-type TikTokenizer", 1 << 17),  # TikTokenizer's default, 2^17
        ("--tokenizer-type GPT2BPETokenizer", 50_257),  # the public GPT-2 vocabulary
        ("--vocab-size 32000", 32_000),  # stated without a tokenizer: read as the size meant
    ],
)
def test_the_line_s_own_vocabulary_wins_and_the_conflict_is_noted(text: str, size: int) -> None:
    r = reading(text)
    assert r.doc["model"]["vocab_size"] == size
    assert f"planner's --vocab-size {GIVEN} is not used" in r.notes[0]


@pytest.mark.parametrize(
    "text",
    [
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model org/model",
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model org/model --vocab-size 32000",
        "--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt",
        "--tokenizer-type BertWordPieceCase --vocab-file v.txt",
    ],
)
def test_a_tokenizer_file_s_size_is_the_given_one(text: str) -> None:
    r = reading(text)
    assert r.doc["model"]["vocab_size"] == GIVEN
    assert r.notes[0] == f"vocabulary: --vocab-size {GIVEN} given to planner"


def test_the_same_size_given_is_not_a_conflict() -> None:
    r = megatron_args.read(
        SHAPE + "--tokenizer-type NullTokenizer --vocab-size 32000", "h100-sxm-80gb", 8, "t", 32_000
    )
    assert r.notes[0] == "vocabulary: NullTokenizer: --vocab-size 32000"


def test_a_default_tokenizer_of_a_script_planner_does_not_know_is_not_fixed() -> None:
    # no --tokenizer-type and no pretrain_*.py: GPT-2 is only planner's guess (DEFAULT_SCRIPT)
    r = megatron_args.read("python tasks/main.py " + SHAPE, "h100-sxm-80gb", 8, "t", GIVEN)
    assert r.doc["model"]["vocab_size"] == GIVEN
    # without the given size the guess stands, as before (test_megatron_vocab.py)
    assert megatron_args.read(SHAPE, "h100-sxm-80gb", 8, "t").doc["model"]["vocab_size"] == 50_257
