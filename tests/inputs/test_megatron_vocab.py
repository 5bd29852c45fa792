"""The vocabulary a Megatron-LM command line trains with.

Oracles: benchmarks/data/megatron_rules.md section 12 (Megatron-LM d98e8a64 build_tokenizer.py:
GPT2BPETokenizer 50,257 padded to 50,304 at tp 1 and 51,200 at tp 8; NullTokenizer exactly
--vocab-size; TikTokenizer --vocab-size or 2^17, and the only tokenizer that reads
--tiktoken-pattern; HuggingFace and SentencePiece tokenizers their own files' sizes), the training
scripts' default --tokenizer-type (pretrain_gpt.py:527, pretrain_bert.py:185 (in examples, bert))
and the public BERT vocabularies (Hugging Face bert-large-uncased / bert-large-cased config.json:
30,522 / 28,996)."""

from __future__ import annotations

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

SHAPE = (
    "--num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 128 "
    "--max-position-embeddings 128 --bf16 "
)


def vocab(text: str, given: int | None = None) -> int:
    # a launcher's words come before the flags: argparse refuses words after --bf16
    line = f"{text} {SHAPE}" if text.startswith("torchrun ") else SHAPE + text
    return megatron_args.read(line, "h100-sxm-80gb", 8, "train.sh", given).doc["model"][
        "vocab_size"
    ]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        # pretrain_gpt.py's default tokenizer, named or not, with or without the script
        ("", 50_257),
        ("--vocab-file vocab.json --merge-file merges.txt", 50_257),
        ("--tokenizer-type GPT2BPETokenizer", 50_257),
        ("torchrun pretrain_gpt.py", 50_257),
        # pretrain_bert.py's default (Megatron-LM examples, bert)
        ("torchrun examples/pretrain_bert.py --vocab-file vocab.txt", 30_522),
        ("--tokenizer-type BertWordPieceLowerCase", 30_522),
        # bert-large-cased's 28,996 and the 100 <extra_id_i> build_tokenizer adds
        ("--tokenizer-type BertWordPieceCase", 29_096),
        ("--tokenizer-type NullTokenizer --vocab-size 8193", 8_193),
        ("--tokenizer-type TikTokenizer --tokenizer-model t.json", 131_072),
        ("--tokenizer-type TikTokenizer --vocab-size 200000", 200_000),
        # a shell-variable tokenizer type with --tiktoken-pattern, which build_tokenizer reads in
        # its TikTokenizer branch alone (Megatron-LM's Nemotron 3 release lines): 2^17
        ("--tokenizer-type ${TOKENIZER_TYPE} --tiktoken-pattern v2", 131_072),
        ("--tokenizer-type $TOK --tiktoken-pattern v2 --vocab-size 200000", 200_000),
        # Megatron ignores --vocab-size for HF tokenizers: taken as the tokenizer's size
        ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model m --vocab-size 151936", 151_936),
        # what planner launch writes: --vocab-size alone
        ("--vocab-size 128256", 128_256),
    ],
)
def test_size_the_line_implies(text: str, size: int) -> None:
    assert vocab(text) == size


def test_gpt2_padding_matches_megatron() -> None:
    # megatron_rules.md section 12: 50,257 padded to 50,304 at tp 1, 51,200 at tp 8
    doc = megatron_args.read(SHAPE, "h100-sxm-80gb", 8).doc
    arch = parse_plan(doc).job.arch
    assert (arch.padded_vocab(1), arch.padded_vocab(8)) == (50_304, 51_200)


def test_the_null_multimodal_tokenizer_adds_its_end_of_document_token() -> None:
    # Megatron-LM d98e8a64 megatron/core/tokenizers/vision/libraries/null_multimodal_tokenizer.py
    # :9-10 keeps --vocab-size as the size without the end-of-document token, whose id it is,
    # and :63-65 returns `_vocab_size_without_eod + 1`; build_tokenizer.py:133-152 pads that up
    # to a multiple of 128 x tp: 131,073 -> ceil(131,073 / 128) x 128 = 1,025 x 128 = 131,200 at
    # tp 1, ceil(131,073 / 1,024) x 1,024 = 129 x 1,024 = 132,096 at tp 8. NullTokenizer keeps
    # --vocab-size as is (null_tokenizer.py:18, 60-62): 131,072 is already a multiple of both
    line = "--tokenizer-type NullMultimodalTokenizer --vocab-size 131072"
    read = megatron_args.read(SHAPE + line, "h100-sxm-80gb", 8)
    arch = parse_plan(read.doc).job.arch
    assert (arch.vocab_size, arch.padded_vocab(1), arch.padded_vocab(8)) == (
        131_073,
        131_200,
        132_096,
    )
    assert read.notes[0] == (
        "vocabulary: NullMultimodalTokenizer: --vocab-size 131072 + 1 (end of document)"
    )
    line = "--tokenizer-type NullTokenizer --vocab-size 131072"
    arch = parse_plan(megatron_args.read(SHAPE + line, "h100-sxm-80gb", 8).doc).job.arch
    assert (arch.padded_vocab(1), arch.padded_vocab(8)) == (131_072, 131_072)


def test_padded_vocab_size_is_used_as_it_is() -> None:
    # Megatron sets padded_vocab_size from the tokenizer only when it is not given
    doc = megatron_args.read(SHAPE + "--padded-vocab-size 51200", "h100-sxm-80gb", 8).doc
    arch = parse_plan(doc).job.arch
    assert arch.padded_vocab(1) == arch.padded_vocab(8) == 51_200


@pytest.mark.parametrize(
    "text",
    [
        "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Llama-3.1-8B",
        "--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model my_256k.model",
        "--tokenizer-type Llama2Tokenizer --tokenizer-model tokenizer.model",
        "--tokenizer-type ${TOKENIZER_TYPE}",
    ],
)
def test_a_size_in_a_file_is_asked_for_and_given_with_vocab_size(text: str) -> None:
    with pytest.raises(InputError, match="planner check --vocab-size N"):
        vocab(text)
    assert vocab(text, given=128_256) == 128_256


@pytest.mark.parametrize(
    ("model", "size"),
    [
        # Nemotron-4's SentencePiece tokenizer: 256,000 (arXiv:2402.16819 section 2), as
        # Megatron-LM's release lines name it
        ("${DATA_PATH}/utils/nemotron_2_256k.model", 256_000),
        ("nemotron_2_256k.model", 256_000),
        # Llama 2's 32,000 and the two tokens llava-hf adds (its added_tokens.json)
        ("llava-hf/llava-1.5-7b-hf", 32_002),
    ],
)
def test_a_known_tokenizer_model_needs_no_size(model: str, size: int) -> None:
    assert vocab(f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}") == size
    # a size given to planner still wins
    assert vocab(f"--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model {model}", 7) == 7


def test_a_known_name_inside_another_file_name_is_not_taken() -> None:
    with pytest.raises(InputError, match="planner check --vocab-size N"):
        vocab(
            "--tokenizer-type GPTSentencePieceTokenizer --tokenizer-model my_nemotron_2_256k.model"
        )


def test_planner_vocab_size_wins_over_a_vocabulary_file_planner_does_not_open() -> None:
    # a --vocab-file's size is the file's (megatron_hf_tokenizer.py:114-118 downloads the public
    # one only without it); without the file the line fixes it: test_megatron_vocab_given.py
    given = "--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt"
    assert vocab(given, given=32_000) == 32_000


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("--tokenizer-type NullTokenizer", "NullTokenizer has exactly --vocab-size tokens"),
        (
            "--tokenizer-type NullMultimodalTokenizer",
            r"NullMultimodalTokenizer has --vocab-size \+ 1 \(its end-of-document token\)",
        ),
        ("--tokenizer-type FooTokenizer", "unknown tokenizer 'FooTokenizer'"),
    ],
)
def test_bad_tokenizers(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        vocab(text)


def test_the_vocabulary_is_noted() -> None:
    notes = megatron_args.read(SHAPE, "h100-sxm-80gb", 8).notes
    assert notes[0].startswith("vocabulary: GPT2BPETokenizer")
