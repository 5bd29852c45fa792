"""Brute force: planner's verdict on a Megatron-LM command line (`refuse_choices`,
`refuse_stray_words`) is a real argparse parser's, over lines of option-like words: `--`, `-v`,
`-1`, `-1e3`, `-x=1`, `--flag=value` of every kind, a flag's prefix (Megatron-LM's parser has
allow_abbrev=False: megatron/training/arguments.py:119-120 @d98e8a64), negative numbers, a flag
given twice, numbers in odd spellings ('1_000', ' 3', '0x10', '1e3', 'inf', 'nan'), the help
option, and quoted words with spaces.

Oracle: a real argparse parser built from megatron_flags.txt as Megatron-LM builds its own
(`_oracle`: allow_abbrev=False, -h/--help kept, enum flags typed by member name as
megatron/training/argument_utils.py:115 `_get_enum_kwargs` types them), for the flags whose
types argparse or the standard library converts (switches, int, float, str, bool, enum).
Megatron-LM d98e8a64 needs Python >= 3.12 (pyproject.toml: requires-python); these tests run
on 3.11.7, whose parsing code is 3.12.1's. Both predate gh-109475 (python/cpython#114814,
merged to the 3.11 and 3.12 branches in February 2024, in 3.13.0): an explicit `--flag=--`
gives the option the word '--', where they dropped it and stored [];
`_Parser._get_values` models the fix. Checked by hand: the 21,510 lines here get the same
verdicts on CPython 3.11.7 and 3.12.1 with that model, and on 3.13.0 without it (without it,
3.11.7 and 3.12.1 differ on the 46 lines with `--flag=--` alone).

Deliberate differences, not judged by the brute force (each pinned below):
- words of a flag that is not Megatron-LM's (`--zz-unknown 1`): Megatron-LM's parser exits
  ("unrecognized arguments"); planner lists the flag (a fork's, an extra_args_provider's), as
  `megatron_args` does. A word `--zz=a b` (a space after '=' only) is such a flag too, where
  Megatron-LM's own parser takes it for a value (no option `--zz`, and a space).
"""

from __future__ import annotations

import argparse
import enum
import itertools
import random
from functools import cache
from typing import Any

import pytest

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_choices import refuse_choices, refuse_stray_words
from planner.inputs.megatron_flags import FlagSpec, flag_specs
from planner.inputs.megatron_line import flag_runs, flags_of

TYPES = ("-", "int", "float", "str", "bool", "enum")
"""The flag types the oracle converts as Megatron-LM does without planner's code."""

LINE = (
    "python pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
    "--vocab-size 1000 --seq-length 128 --max-position-embeddings 128 --bf16 "
)


def _read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(LINE + extra, "h100-sxm-80gb", 8, "train.sh")


class _Refused(Exception):
    pass


class _Kept(list[str]):
    """An option's words, whose '--' `_get_values` may not drop (gh-109475)."""

    def remove(self, value: str) -> None:
        raise ValueError(value)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _Refused(message)

    def print_help(self, file: Any = None) -> None:  # -h prints the usage, then exits 0
        pass

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _Refused(f"exit {status}")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # CPython 3.12 since gh-109475 (python/cpython#114814): '--' is dropped from a
        # positional's words only, so `--lr=--` is float('--'); 3.11.7 drops it for options too
        if action.option_strings:
            arg_strings = _Kept(arg_strings)
        return super()._get_values(action, arg_strings)


def _kind(flag: str, spec: FlagSpec) -> Any:
    if spec.type == "enum":  # argument_utils.py:115: config_type[cli_arg], KeyError escapes
        assert spec.choices is not None
        make: Any = enum.Enum  # the functional API, with the table's member names
        members = make("Members", spec.choices)
        return members.__getitem__
    return {"int": int, "float": float, "str": str, "bool": bool}[spec.type]


@cache
def _oracle() -> _Parser:
    parser = _Parser(allow_abbrev=False)  # arguments.py:119: help kept
    for flag, spec in flag_specs().items():
        if spec.type not in TYPES:
            continue
        if spec.nargs == "0":
            parser.add_argument(flag, action="store_true")
            continue
        kind = _kind(flag, spec)
        nargs = (
            None if spec.nargs == "1" else int(spec.nargs) if spec.nargs.isdigit() else spec.nargs
        )
        choices = None if spec.choices is None else [kind(c) for c in spec.choices]
        parser.add_argument(flag, nargs=nargs, type=kind, choices=choices)
    return parser


def _forks(line: list[str]) -> list[str]:
    """The words of flags that are not Megatron-LM's (a --word whose name, before '=', has no
    space, other than '--'), each up to the next such --word: planner does not judge them."""
    out, fork = [], False
    for word in line:
        name = word.partition("=")[0]
        if word.startswith("--") and " " not in name:
            fork = name != "--" and name not in flag_specs()
        if fork:
            out.append(word)
    return out


def _argparse_refuses(line: list[str]) -> bool:
    try:
        _, extras = _oracle().parse_known_args(line)
    except (_Refused, KeyError):
        return True
    for word in _forks(line):
        if word in extras:
            extras.remove(word)
    return bool(extras)


def _planner_refuses(line: list[str]) -> bool:
    try:
        refuse_choices(flags_of(line), "x")
        refuse_stray_words(flag_runs(line), "x")
    except InputError:
        return True
    return False


WORDS = [
    # values, numbers in odd spellings: int() and float() take '1_000', ' 3', '٣', '+1'
    *("1", "x", "1.5", "", " 3", "1 ", "a b", "1_000", "0x10", "1e3", "inf", "nan", "+1"),
    *("1.", "٣", "True", "infinity"),
    # negative numbers: a value where `^-\d+$|^-\d*\.\d+$` matches, else an option
    *("-1", "-0.5", "-.5", "-1.", "-1e3", "-1e-3", "-1_000", "-inf", "-nan", "-1=2"),
    # single-dash words: options no parser of Megatron-LM's has, unless with a space
    *("-", "-v", "-x=1", "-x 1", "-a b", "-x=1 y"),
    # the help option: usage and exit 0, or an error on what follows -h
    *("-h", "-hx", "-h=1", "-h x", "--help", "--help=1"),
    # --words: the end of options, a name with a space (a value), flags not Megatron-LM's
    *("--", "-- x", "---", "--=1", "--a b", "--zz-unknown", "--zz-unknown=1"),
    *("--use-flash-attn", "--lr", "--lr=1", "--lr=1 x"),
]


def _words(flag: str, spec: FlagSpec) -> list[str]:
    """WORDS and the flag's own forms: a prefix (no abbreviations), the flag again, `=value`."""
    own = [flag[:-2], flag, f"{flag}=1", f"{flag}=", f"{flag}=-1", f"{flag}=--", f"{flag}=a b"]
    return [*WORDS, *own, *(spec.choices or ())[:1]]


CORE = ["1", "x", "", "a b", "1_000", "inf", "-1", "-1e3", "-inf", "--", "-v", "-x=1", "-h"]
CORE += ["--help", "--a b", "--zz-unknown"]
"""The words every pair of which follows each flag."""


def _kinds() -> dict[str, FlagSpec]:
    """One flag of each (nargs, type, choices) kind among TYPES."""
    kinds: dict[tuple[str, str, bool], str] = {}
    for flag, spec in sorted(flag_specs().items()):
        if spec.type in TYPES:
            kinds.setdefault((spec.nargs, spec.type, spec.choices is not None), flag)
    return {flag: flag_specs()[flag] for flag in kinds.values()}


def _check(lines: list[list[str]]) -> tuple[int, int]:
    refused = 0
    for line in lines:
        verdict = _argparse_refuses(line)
        assert _planner_refuses(line) == verdict, line
        refused += verdict
    return len(lines), refused


def test_planner_agrees_with_argparse_on_every_small_line() -> None:
    """Each flag kind followed by each word (or its `=word` form, then nothing or one more
    word), and by every pair of CORE's words and its own."""
    specs = _kinds()
    assert len(specs) >= 14
    lines: list[list[str]] = []
    for flag, spec in specs.items():
        words = _words(flag, spec)
        lines += [[flag], *([flag, w] for w in words)]
        core = [*CORE, flag, flag[:-2], *(spec.choices or ())[:1]]
        lines += [[flag, *pair] for pair in itertools.product(core, repeat=2)]
        tails: list[list[str]] = [[], ["1"], ["-v"], ["--lr"], ["-h"]]
        lines += [[f"{flag}={w}", *tail] for w in words for tail in tails]
    checked, refused = _check(lines)
    assert checked > 8000 and 500 < checked - refused < refused


VALUES = ["1", "x", "-1", "-0.5", "1_000", " 3", "inf", "a b"]
"""Words most flags take, drawn more often so that random lines are not all refused."""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_planner_agrees_with_argparse_on_random_lines(seed: int) -> None:
    """Lines of up to six words drawn from every kind's words and flags (several flags, a
    flag given twice)."""
    specs = _kinds()
    flags = [*specs, "--lr", "--use-flash-attn", "--zz-unknown"]
    values = VALUES + [c for spec in specs.values() for c in (spec.choices or ())[:1]]
    words = sorted({w for flag, spec in specs.items() for w in _words(flag, spec)})
    rng = random.Random(seed)
    lines = []
    for _ in range(3000):
        line = [rng.choice(flags)]
        for _ in range(rng.randint(1, 5)):
            pick = rng.random()
            line.append(rng.choice(flags if pick < 0.25 else values if pick < 0.7 else words))
        lines.append(line)
    checked, refused = _check(lines)
    assert 200 < checked - refused < refused


# Regressions the brute force found (each refused or read as argparse does; planner did not)


@pytest.mark.parametrize(
    "extra",
    [
        "--help",  # was listed as a flag not Megatron-LM's, and the line read
        "--help=1",  # argparse: "argument -h/--help: ignored explicit argument '1'"
        "-h",  # was "unrecognized arguments: -h"; argparse prints the usage and exits 0
        "--zz-unknown -h",  # was read: a fork flag's word, but argparse still takes -h
        "--zz-unknown -hx",  # "ignored explicit argument 'x'" (CPython 3.11.7, 3.12.1)
        "--log-interval 5 '-h x'",  # '-h x' matches -h before its space makes it a value
    ],
)
def test_the_help_option_trains_nothing(extra: str) -> None:
    # CPython 3.12 _parse_optional: an option string of the parser ('--help'), or a single-dash
    # word whose first two characters are one ('-h', before the space test); Megatron-LM's
    # parser keeps -h/--help (arguments.py:119-120 @d98e8a64 passes no add_help=False)
    with pytest.raises(InputError, match="help option"):
        _read(extra)


def test_a_help_like_word_is_no_value() -> None:
    # '-h x' is -h with the explicit argument ' x': --lr gets no word ("expected one
    # argument", CPython 3.11.7 and 3.12.1), where it was float('-h x')
    with pytest.raises(InputError, match="--lr: expected one argument"):
        _read("--lr '-h x'")


@pytest.mark.parametrize("word", ["--a b", "-- x", "--lr 1", "--zz y=1"])
def test_a_dashed_word_with_a_space_in_its_name_is_a_value(word: str) -> None:
    # CPython 3.12 _parse_optional: no option string is '--a b' (nor '--a b' before '='), so
    # "if it contains a space, it was meant to be a positional": a str flag takes it
    # (planner read it as a flag of its own, leaving --app-tag-run-name without a value) ...
    assert _read(f"--app-tag-run-name '{word}'").doc["model"]["num_layers"] == 2
    # ... and after a flag's values it is an unrecognized argument (planner listed it)
    with pytest.raises(InputError, match="unrecognized arguments"):
        _read(f"--save-interval 100 '{word}'")


def test_an_equals_sign_after_two_dashes_names_no_option() -> None:
    # '--=1' is no bare '--': argparse takes it for an unknown option ("unrecognized
    # arguments: --=1", CPython 3.11.7), where planner said it ended the options
    with pytest.raises(InputError, match="no option is named '--'"):
        _read("--=1")


# Differences kept on purpose (pinned): each line is one argparse would judge otherwise


def test_a_flag_not_megatrons_is_listed_not_judged() -> None:
    # Megatron-LM's own parser exits ("unrecognized arguments: --zz-unknown 1"), and so does
    # planner on pretrain_gpt.py (pretrain_gpt.py:525-528, arguments.py:129-132); a fork's
    # script or an extra_args_provider may add the flag, so planner lists it there
    with pytest.raises(InputError, match="--zz-unknown: not a Megatron-LM flag"):
        _read("--zz-unknown 1 -v")
    fork = (LINE + "--zz-unknown 1 -v").replace("pretrain_gpt.py", "pretrain_fork.py")
    assert megatron_args.read(fork, "h100-sxm-80gb", 8, "t").unknown == ("--zz-unknown",)


def test_an_unknown_name_with_a_spaced_value_is_read_as_a_flag() -> None:
    # Megatron-LM's parser takes '--zz=a b' for --app-tag-run-name's value (no option --zz,
    # and a space); planner reads it as a fork's --zz=a b, as it reads `--zz a`, and so finds
    # --app-tag-run-name without a value
    with pytest.raises(InputError, match="--app-tag-run-name: expected one argument"):
        _read("--app-tag-run-name '--zz=a b'")


@pytest.mark.parametrize("extra", ["--lr=--", "--log-interval=--"])
def test_an_explicit_double_dash_is_the_word_double_dash(extra: str) -> None:
    # CPython 3.12 since gh-109475: float('--') / int('--') exit "invalid ... value"; the 3.11.7
    # these tests run on drops '--' and stores [] (so does 3.12.1)
    with pytest.raises(InputError, match="got '--'"):
        _read(extra)


@pytest.mark.parametrize("extra", ["--lr -1_000", "--lr -1e-4", "--eval-iters -1_000"])
def test_negative_numbers_argparse_312_takes_for_options(extra: str) -> None:
    # CPython 3.12's `_negative_number_matcher` is `^-\d+$|^-\d*\.\d+$` (3.11.7, 3.12.1 and
    # 3.13.0 alike); the wider one of gh-123945 / gh-124823 is 3.14's (its 3.12 and 3.13
    # backports were closed), so `--lr -1_000` exits "expected one argument" on Megatron-LM
    with pytest.raises(InputError, match="expected one argument"):
        _read(extra)
