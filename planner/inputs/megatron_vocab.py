"""The vocabulary a Megatron-LM command line trains with.

Megatron sizes the embedding and the output layer with `padded_vocab_size`: `--padded-vocab-size`
when given, else the tokenizer's vocabulary padded up to a multiple of
make_vocab_size_divisible_by x tp (benchmarks/data/megatron_rules.md section 12; Megatron-LM
d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py). Which tokenizer: `--tokenizer-type`,
else the training script's default (`parse_and_validate_args(args_defaults=...)`: GPT2BPETokenizer
for pretrain_gpt.py, BertWordPieceLowerCase for pretrain_bert.py, in examples under bert).

What the tokenizer's size is:
- NullTokenizer: exactly `--vocab-size` (required); NullMultimodalTokenizer: `--vocab-size` and
  its end-of-document token (required);
- TikTokenizer: `--vocab-size`, else 2^17 = 131,072 (also the tokenizer of a line whose
  --tokenizer-type is a shell variable but which gives --tiktoken-pattern, read by it alone);
- GPT2BPETokenizer, BertWordPiece*: the public vocabulary Megatron downloads when no
  `--vocab-file` is given (a different file given there is not opened: say `--vocab-size`);
- HuggingFace, SentencePiece, Llama2, SFT and multimodal tokenizers: the tokenizer model's own
  size, which planner does not open; `planner check --vocab-size N` gives it (a `--vocab-size`
  on the line, which Megatron ignores for these, is taken as that size, with a note).
A `--vocab-size` without `--tokenizer-type` is read as the size meant, with a note: Megatron
itself would build the script's default tokenizer and ignore it (planner's own launch files and
many hand-written lines say only `--vocab-size`).
`planner check --vocab-size N` is the size of a tokenizer file planner does not open (a
HuggingFace or SentencePiece model, a --vocab-file): it wins over planner's reading of such a
file (a line's --vocab-size, a public size assumed for it), never over a size the line fixes
itself (a `--padded-vocab-size`, which is what Megatron uses; NullTokenizer's or TikTokenizer's
`--vocab-size`; a built-in tokenizer's public vocabulary without --vocab-file; a `--vocab-size`
without --tokenizer-type), which keeps it with a note.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from planner.inputs.errors import InputError

TOKENIZERS = (
    "BertWordPieceLowerCase",
    "BertWordPieceCase",
    "GPT2BPETokenizer",
    "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer",
    "HuggingFaceTokenizer",
    "Llama2Tokenizer",
    "TikTokenizer",
    "MultimodalTokenizer",
    "NullTokenizer",
    "NullMultimodalTokenizer",
    "SFTTokenizer",
)
"""--tokenizer-type's choices (megatron/training/config/training_config.py, TokenizerConfig)."""

PUBLIC_VOCAB: dict[str, tuple[int, str]] = {
    "GPT2BPETokenizer": (50_257, "the public GPT-2 vocabulary (megatron_rules.md section 12)"),
    "BertWordPieceLowerCase": (
        30_522,
        "bert-large-uncased's vocab.txt (Hugging Face bert-large-uncased config.json)",
    ),
    "BertWordPieceCase": (
        28_996 + 100,
        "bert-large-cased's vocab.txt (Hugging Face bert-large-cased config.json: 28,996) and "
        "the 100 <extra_id_i> tokens build_tokenizer adds",
    ),
}
"""The vocabularies of Megatron's built-in tokenizers (downloaded when no --vocab-file is given)."""

KNOWN_TOKENIZER_MODELS: dict[str, tuple[int, str]] = {
    "nemotron_2_256k.model": (
        256_000,
        "Nemotron-4's SentencePiece tokenizer (Nemotron-4 15B technical report, "
        "arXiv:2402.16819, section 2)",
    ),
    "llava-hf/llava-1.5-7b-hf": (
        32_002,
        "Llama 2's 32,000 and the <image> and <pad> tokens that repository adds "
        "(its added_tokens.json)",
    ),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (
        131_072,
        "Megatron-LM's own Nemotron Nano v3 configuration (d98e8a64 "
        "tests/unit_tests/models/test_hybrid_moe_model.py, vocab_size)",
    ),
}
"""Tokenizer models whose size is public, by the end of the --tokenizer-model path (a file name, or
a Hugging Face repository id): the tokenizers Megatron-LM's own release and CI lines name. A
line naming one of them is read without `planner check --vocab-size`; a `--vocab-size` on the line
(which Megatron ignores for these tokenizers) still wins, as for any other. Generic names
("tokenizer.model") are not here: the same name holds different vocabularies."""

TIKTOKEN_DEFAULT = 1 << 17
"""TikTokenizer without --vocab-size: 131,072 (megatron_rules.md section 12)."""

SCRIPT_TOKENIZER = {
    "pretrain_gpt.py": "GPT2BPETokenizer",
    "pretrain_hybrid.py": "GPT2BPETokenizer",
    "pretrain_vlm.py": "GPT2BPETokenizer",
    "pretrain_bert.py": "BertWordPieceLowerCase",
    "pretrain_t5.py": "BertWordPieceLowerCase",
}
"""The default --tokenizer-type each training script passes to parse_and_validate_args
(Megatron-LM d98e8a64: pretrain_gpt.py:527, pretrain_hybrid.py:544, pretrain_vlm.py:498,
pretrain_bert.py:185 (in examples, bert), pretrain_t5.py:273 (in examples, t5))."""

DEFAULT_SCRIPT = "pretrain_gpt.py"


@dataclass(frozen=True)
class Vocabulary:
    size: int
    padded: bool
    """True: `size` is Megatron's padded_vocab_size already (--padded-vocab-size)."""
    note: str
    """Where the size comes from, for the reader's notes."""


@dataclass(frozen=True)
class VocabFlags:
    """What a command line says about its vocabulary."""

    tokenizer_type: str | None = None
    tokenizer_model: str | None = None
    vocab_file: str | None = None
    vocab_size: int | None = None
    padded_vocab_size: int | None = None
    script: str | None = None
    """The training script named on the line (its file name), if any."""
    tiktoken_pattern: str | None = None
    """--tiktoken-pattern, which only TikTokenizer reads (`tiktoken_kind`)."""


def script_of(words: list[str]) -> str | None:
    """The training script a launch line runs: the last word naming a known script."""
    names = [PurePosixPath(w).name for w in words if w.endswith(".py")]
    known = [n for n in names if n in SCRIPT_TOKENIZER]
    return known[-1] if known else None


def vocabulary(flags: VocabFlags, given: int | None, where: str) -> Vocabulary:
    """The vocabulary the line trains with; `given` is `planner check --vocab-size`, used only
    where the line leaves the size to a tokenizer file planner does not open (`_line_size`)."""
    if flags.padded_vocab_size is not None:
        return Vocabulary(flags.padded_vocab_size, True, "--padded-vocab-size")
    kind, how = _tokenizer(flags)
    fixed = _line_size(flags, kind, how)
    if fixed is not None:
        if given is not None and given != fixed.size:
            note = f"{fixed.note}; planner's --vocab-size {given} is not used: the line fixes it"
            return replace(fixed, note=note)
        return fixed
    if given is not None:
        return Vocabulary(given, False, f"--vocab-size {given} given to planner")
    assert kind is not None  # a line-stated size without --tokenizer-type is `_line_size`'s
    if "$" in kind:
        raise InputError(
            f"{where}: --tokenizer-type: {kind!r} is a shell variable the file does not set: "
            "set it, or give the vocabulary with `planner check --vocab-size N`"
        )
    if kind not in TOKENIZERS:
        raise InputError(
            f"{where}: --tokenizer-type: unknown tokenizer {kind!r} (Megatron-LM accepts "
            f"{', '.join(TOKENIZERS)})"
        )
    if kind in NULL_TOKENIZERS:
        raise InputError(
            f"{where}: --vocab-size: {kind} has {_NULL_SIZE[kind]} tokens, but it is not "
            "given (or give it with `planner check --vocab-size N`)"
        )
    if kind in PUBLIC_VOCAB:  # a --vocab-file assumed the public one, or a guessed default
        size, source = PUBLIC_VOCAB[kind]
        note = f"{kind} ({how}): {size}, {source}"
        if flags.vocab_file is not None:
            note += f"; the size of --vocab-file {flags.vocab_file} is not read"
        return Vocabulary(size, False, note)
    # the size is in the tokenizer model, which planner does not open
    model = flags.tokenizer_model or flags.vocab_file
    line = flags.vocab_size
    if line is not None:
        return Vocabulary(
            line,
            False,
            f"{kind}: --vocab-size {line} taken as the size of the tokenizer "
            f"{model or '(no --tokenizer-model)'} (Megatron itself uses the tokenizer's own size)",
        )
    known = known_model(model)
    if known is not None:
        size, source = known
        return Vocabulary(size, False, f"{kind} {model}: {size}, {source}")
    raise InputError(
        f"{where}: --tokenizer-type: {kind} takes its vocabulary size from the tokenizer "
        f"{model or '(no --tokenizer-model given)'}, which planner does not open: give the size "
        "with `planner check --vocab-size N`"
    )


NULL_TOKENIZERS: dict[str, int] = {"NullTokenizer": 0, "NullMultimodalTokenizer": 1}
"""Tokenizers whose size is --vocab-size plus this many tokens (Megatron-LM d98e8a64
build_tokenizer.py:96-102 passes the flag to both): NullTokenizer keeps it as is
(megatron/core/tokenizers/text/libraries/null_tokenizer.py:18, 60-62; its end-of-document id is
vocab_size - 1, :19), NullMultimodalTokenizer adds its end-of-document token after it
(megatron/core/tokenizers/vision/libraries/null_multimodal_tokenizer.py:9-10, the id
vocab_size; :63-65 `_vocab_size_without_eod + 1`, which vision_tokenizer.py:129-131 and so
build_tokenizer.py:149-152 pad)."""

_NULL_SIZE = {
    "NullTokenizer": "exactly --vocab-size",
    "NullMultimodalTokenizer": "--vocab-size + 1 (its end-of-document token)",
}
"""How `vocabulary`'s refusal words each null tokenizer's size."""


def _tokenizer(flags: VocabFlags) -> tuple[str | None, str]:
    """The tokenizer the line builds and how that is known; None for a line that states
    --vocab-size without --tokenizer-type (read as the size meant)."""
    kind = flags.tokenizer_type
    if kind is None:
        if flags.vocab_size is not None:
            return None, "--vocab-size"
        script = flags.script or DEFAULT_SCRIPT
        return SCRIPT_TOKENIZER[script], f"{script}'s default tokenizer"
    if "$" in kind and flags.tiktoken_pattern is not None:
        return "TikTokenizer", tiktoken_kind(kind, flags.tiktoken_pattern)
    return kind, "--tokenizer-type"


def _line_size(flags: VocabFlags, kind: str | None, how: str) -> Vocabulary | None:
    """The size where the line fixes it without a tokenizer file planner does not open: a
    --vocab-size without --tokenizer-type; the null tokenizers' --vocab-size
    (NullMultimodalTokenizer's with its end-of-document token, `NULL_TOKENIZERS`); TikTokenizer's
    --vocab-size or its default (build_tokenizer.py:58-66 passes the flag, not the file's
    size); a built-in tokenizer's public vocabulary, downloaded where no --vocab-file is given
    (megatron/core/tokenizers/text/libraries/megatron_hf_tokenizer.py:114-118), where the line
    names the tokenizer or a training script whose default it is (SCRIPT_TOKENIZER; another
    script's default is not known).
    None where the size is a file's (or the line does not say enough to read it)."""
    line = flags.vocab_size
    if kind is None and line is not None:  # the size the line states (planner's own launch
        script = flags.script or DEFAULT_SCRIPT  # files, hand-written lines)
        return Vocabulary(
            line,
            False,
            f"--vocab-size {line} without --tokenizer-type (Megatron would use {script}'s "
            f"default {SCRIPT_TOKENIZER[script]}; add --tokenizer-type NullTokenizer to train "
            "with exactly this size)",
        )
    if kind is None:
        return None
    if kind in NULL_TOKENIZERS and line is not None:
        extra = NULL_TOKENIZERS[kind]
        note = f"{kind}: --vocab-size {line}" + (f" + {extra} (end of document)" if extra else "")
        return Vocabulary(line + extra, False, note)
    if kind == "TikTokenizer":
        size = line if line is not None else TIKTOKEN_DEFAULT
        via = "" if how == "--tokenizer-type" else f" ({how})"
        return Vocabulary(size, False, f"TikTokenizer{via}: {size}")
    named = flags.tokenizer_type is not None or flags.script is not None  # not a guessed default
    if kind in PUBLIC_VOCAB and flags.vocab_file is None and named:
        size, source = PUBLIC_VOCAB[kind]
        return Vocabulary(size, False, f"{kind} ({how}): {size}, {source}")
    return None


def tiktoken_kind(variable: str, pattern: str) -> str:
    """Why a line whose --tokenizer-type is a shell variable is read as TikTokenizer: it gives
    --tiktoken-pattern, which Megatron's build_tokenizer reads in the TikTokenizer branch alone
    (Megatron-LM d98e8a64 megatron/core/tokenizers/utils/build_tokenizer.py), as Megatron-LM's
    own Nemotron 3 release lines do with `--tokenizer-type ${TOKENIZER_TYPE}`."""
    return (
        f"--tokenizer-type {variable} is a shell variable; --tiktoken-pattern {pattern} is read "
        "by TikTokenizer alone"
    )


def known_model(model: str | None) -> tuple[int, str] | None:
    """(size, source) of a tokenizer model in KNOWN_TOKENIZER_MODELS, by the end of its path."""
    if model is None:
        return None
    for name, entry in KNOWN_TOKENIZER_MODELS.items():
        if model == name or model.endswith("/" + name):
            return entry
    return None
