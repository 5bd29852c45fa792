"""A Megatron-LM command line's words checked as Megatron-LM's argparse takes them, for every flag
of its parser (`megatron_flags.flag_specs`): how many words each takes (`arity_error`), the type
its words are converted with and the choices they must be among (`word_error`,
`invalid_choice`). `planner.inputs.megatron_args` runs `refuse_choices` and `refuse_stray_words`
on a line before reading it: argparse exits on any such word before training starts
(pretrain_gpt.py parses without ignore_unknown_args), so the line is refused rather than judged.

argparse here is Python 3.12's (Megatron-LM d98e8a64 pyproject.toml: requires-python >=3.12; its
CI images run 3.12), built as megatron/training/arguments.py:119 builds it
(`ArgumentParser(allow_abbrev=False)`: a prefix of a flag is no flag). Flags that are not
Megatron-LM's are not judged (`megatron_args` lists them, or refuses a misspelling).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from planner.inputs.errors import InputError
from planner.inputs.megatron_flags import NOT_MODELLED, READ, REFUSED, FlagSpec, flag_specs
from planner.inputs.megatron_line import Run
from planner.inputs.shell_expand import not_known

LOOKED_AT = READ | frozenset(NOT_MODELLED) | frozenset(REFUSED)
"""The flags the reader looks at: a word after one that is still a shell variable is refused
where it could change what the flag takes (the reader must know it); after any other flag it
leaves the flag unjudged."""

NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
"""argparse's `_negative_number_matcher` (CPython 3.12 Lib/argparse.py `_ActionsContainer`): a
word starting with '-' that matches is a value, as Megatron-LM's parser has no option string
that looks like a negative number (megatron_flags.txt's header); any other such word without a
space is taken for an option (`_parse_optional`)."""

NUMBER_314 = re.compile(r"-\.?\d")
"""CPython 3.14's wider matcher (gh-124823): `-1e-4` is a value there, an option in 3.12."""

PATTERN_CHARS = re.compile(r"[^,\d\[\]\(\)\+\*]")
"""arguments.py:250 `_eval_pattern`: a layer pattern holds only these characters, else its type
raises ValueError (argparse: "invalid moe_freq_type value")."""

FREQ_TYPES = frozenset({"moe_freq_type", "la_freq_type", "no_rope_freq_type"})
"""arguments.py:304-375: an integer, or (a word with '[') a list expression `_eval_pattern`
evaluates."""

NAMED_TYPES = frozenset({"enum", "_parse_cuda_graph_modules_arg"})
"""Types that look the word up by name (`Enum[word]`, argument_utils.py:115; arguments.py:256):
another word raises KeyError, which argparse does not catch, and the parser exits."""

NOTHING = ": a variable empty or unset where the file is read expands to no word, as in bash"
"""Why a value may be missing (the caller's environment is not read)."""

EXITS = "Megatron-LM's argparse exits on it"


def _held(word: str) -> bool:
    return "$" in word or "`" in word


def unset_variable(word: str) -> bool:
    """Whether a word still held is only a shell variable (`$EXTRA`, `${ARGS[@]}`), not a
    command's output or arithmetic, which a script runs to print words (`$(parallel_args 2)`:
    flags, most likely)."""
    return "$" in word and "`" not in word and "$(" not in word


def is_option(word: str) -> bool:
    """Whether argparse takes the word for an option rather than a value (CPython 3.12
    `_parse_optional`): a word starting with '-' other than '-' itself, a negative number
    (NEGATIVE_NUMBER) or one with a space; a Megatron-LM flag, or one with `=value`, and the
    help option's `-h...` (`is_help`: even with a space), always."""
    if not word.startswith("-") or len(word) == 1:
        return False
    if word.partition("=")[0] in flag_specs() or is_help(word):
        return True
    return not NEGATIVE_NUMBER.match(word) and " " not in word


HELP = (
    "argparse takes it for the parser's help option (-h, --help: megatron/training/"
    "arguments.py:119 builds the parser without add_help=False): Megatron-LM prints its usage "
    "and exits, or exits on a value given to it (ignored explicit argument), before training "
    "starts"
)
"""Why a line with `-h` (or `--help`) trains nothing."""


def is_help(word: str) -> bool:
    """Whether argparse takes the word for its help option (CPython 3.12 `_parse_optional` and
    `_get_option_tuples`: a single-dash word is matched by its first two characters before
    a space makes it a value): `-h` and `-hh` print the usage and exit 0; `-hx`, `-h=1`,
    `-h-x` and `-h x` exit 2 ("ignored explicit argument", CPython 3.11.7 and 3.12.1)."""
    return word.startswith("-h")


def _words(choices: Iterable[str]) -> str:
    return ", ".join(choices)


def invalid_choice(flag: str, value: str) -> str | None:
    """Why `value` is not one of `flag`'s choices after argparse's conversion (None where it is,
    or the flag has none): an int flag's word is compared as int() reads it."""
    spec = flag_specs().get(flag)
    if spec is None or spec.choices is None:
        return None
    if spec.type in ("int", "float"):
        convert = int if spec.type == "int" else float
        try:
            if convert(value) in [convert(c) for c in spec.choices]:
                return None
        except ValueError:
            what = "an integer" if spec.type == "int" else "a number"
            return f"expected {what}, one of {_words(spec.choices)} (got {value!r})"
    elif value in spec.choices:
        return None
    if flag == "--tokenizer-type":  # megatron_vocab's words for it
        return f"unknown tokenizer {value!r} (Megatron-LM accepts {_words(spec.choices)})"
    return f"expected one of {_words(spec.choices)} (got {value!r})"


def word_error(flag: str, spec: FlagSpec, word: str) -> str | None:
    """Why argparse refuses one word of the flag: its type's conversion (CPython 3.12
    `_get_value`: ValueError or TypeError is "invalid <type> value") or its choices
    (`_check_value`); None where it takes it. arguments.py's own type callables are reproduced
    as written (tuple_type :377, moe_freq_type :327, la_freq_type :352, no_rope_freq_type :304;
    every line, whether or not the reader reads the flag there (it reads --window-attn-skip-freq
    only with a window); a pattern's evaluation is not run)."""
    kind = spec.type
    if kind in ("int", "float"):
        try:
            (int if kind == "int" else float)(word)
        except ValueError:
            what = "an integer" if kind == "int" else "a number"
            return f"expected {what} (got {word!r}): {EXITS} (invalid {kind} value)"
    elif kind == "tuple_type":
        try:
            tuple(int(i) for i in word.strip("()").split(","))
        except ValueError:
            return (
                f"expected integers separated by commas (got {word!r}): {EXITS} (invalid "
                "tuple_type value: arguments.py's tuple_type calls int() on each)"
            )
    elif kind in FREQ_TYPES:  # the reader reads some only where their layers exist
        why = _pattern_error(word)
        if why is not None:
            return f"expected an integer or a list expression (got {word!r}): {why}"
    if spec.choices is None:
        return None
    if kind in NAMED_TYPES:
        if word in spec.choices:
            return None
        return (
            f"expected one of {_words(spec.choices)} (got {word!r}): Megatron-LM's parser "
            "exits on it (its argparse type looks the word up by name: KeyError)"
        )
    why = invalid_choice(flag, word)
    return None if why is None else f"{why}: {EXITS} (invalid choice)"


def _pattern_error(word: str) -> str | None:
    """Why moe_freq_type (and its twins) refuses the word, as far as reading it without running
    it tells: int() of a word without '[', else the characters `_eval_pattern` allows and
    Python's grammar (eval raises SyntaxError, which argparse does not catch)."""
    if "[" not in word:
        try:
            int(word)
        except ValueError:
            return f"{EXITS} (invalid value: int() of a word without '[')"
        return None
    if PATTERN_CHARS.search(word):
        return f"{EXITS} (only digits , [ ] ( ) + * may make up a pattern: arguments.py:250)"
    try:
        ast.parse(word, mode="eval")
    except SyntaxError:
        return "Python cannot parse it: Megatron-LM's parser exits on its SyntaxError (eval)"
    return None


def _missing(flag: str, what: str, cut: str | None) -> str:
    """'expected one argument', and why nothing was found."""
    if cut is None:
        return f"{what} (got nothing{NOTHING})"
    if NUMBER_314.match(cut):
        return (
            f"{what}: Python 3.12's argparse takes {cut!r} for an option, not a value (3.14's "
            f"takes it as a number): write {flag}={cut}"
        )
    return f"{what}: {cut!r} follows it, which argparse takes for an option"


def arity_error(flag: str, values: list[str], explicit: bool = False) -> str | None:
    """Why the words after a Megatron-LM flag (up to the next --flag; the first given after '='
    where `explicit`) cannot be parsed as its argparse action takes them (CPython 3.12
    `consume_optional`, `_match_argument`): too few ("expected one argument"), one it converts
    or checks and refuses (`word_error`), or words no option takes ("unrecognized arguments").
    None where argparse takes them, for a flag not Megatron-LM's, and where a word is still a
    shell variable that bash might expand to more flags or none (refused only after a flag the
    reader looks at, LOOKED_AT)."""
    spec = flag_specs().get(flag)
    if spec is None:
        return None
    given = values[0] if explicit else None
    rest = values[1:] if explicit else values
    cut_at = next((i for i, w in enumerate(rest) if is_option(w)), len(rest))
    following = rest[:cut_at]
    cut = rest[cut_at] if cut_at < len(rest) else None
    n = spec.nargs
    if given is not None and n == "0":
        if given == "":
            return f"takes no value, but an empty word follows it (--flag=, or ''): {EXITS}"
        return (
            f"takes no value, but {flag}={given} gives it one: {EXITS} (ignored explicit "
            f"argument {given!r})"
        )
    looked = flag in LOOKED_AT
    if not looked and any(_held(w) for w in [*following, given or ""]):
        return None
    if given is not None:
        if n not in ("1", "?", "+", "*"):
            return f"expected {n} arguments ({flag}={given} gives one): {EXITS}"
        taken, extra = [given], following
        takes = f"takes only the word after '=' ({given!r})"
    elif n == "0":
        taken, extra, takes = [], following, "takes no value"
    elif n in ("1", "?"):
        if n == "1" and not following:
            return _missing(flag, "expected one argument", cut)
        taken, extra = following[:1], following[1:]
        takes = f"takes one value ({following[0]!r})" if following else "takes one value"
    elif n in ("+", "*"):
        if n == "+" and not following:
            return _missing(flag, "expected at least one argument", cut)
        taken, extra, takes = following, [], ""
    else:
        if len(following) < int(n):
            return _missing(flag, f"expected {n} arguments (got {len(following)})", cut)
        taken, extra, takes = following[: int(n)], following[int(n) :], f"takes {n} values"
    if extra and not any(extra):  # `--switch ""`
        return f"{takes}, but an empty word follows it (--flag=, or ''): {EXITS}"
    held = next((w for w in following if _held(w)), None)
    if n == "0" and given is None and extra and all(unset_variable(w) for w in extra):
        return None  # a switch takes none of them, whatever they expand to (`held_notes`)
    if extra and held is not None:  # bash may expand it to more flags, or to nothing
        return f"{takes}, but {' '.join(extra)!r} follows it: {held!r} is {not_known(held)}"
    for word in taken:
        why = None if _held(word) else word_error(flag, spec, word)
        if why is not None:
            return why
    if cut is not None and is_help(cut):  # before the end of parsing finds stray words
        return f"{cut!r} follows it: {HELP}"
    if extra:
        words = " ".join(extra)
        return f"{takes}, but {words!r} follows it: {EXITS} (unrecognized arguments: {words})"
    if cut is not None and not _held(cut):  # a single-dash word no option of the parser has
        return (
            f"{cut!r} follows it, which argparse takes for an option Megatron-LM's parser does "
            f"not have: {EXITS} (unrecognized arguments: {cut})"
        )
    return None


def refuse_choices(flags: dict[str, list[str]], where: str) -> None:
    """Refuses a value outside the choices Megatron-LM's parser takes for a one-value flag
    (`invalid_choice`): argparse exits on it ("invalid choice"). A value still a shell variable
    or a command's output is left to the flag's reading (which says so, or, for
    --tokenizer-type, reads it by --tiktoken-pattern)."""
    specs = flag_specs()
    for flag, values in flags.items():
        spec = specs.get(flag)
        if spec is None or spec.choices is None or spec.nargs != "1":
            continue
        if not values:
            raise InputError(
                f"{where}: {flag}: expected one argument, one of {_words(spec.choices)} "
                "(Megatron-LM's argparse refuses the flag without it)"
            )
        value = values[0]
        if _held(value) or is_option(value):
            continue
        why = word_error(flag, spec, value)
        if why is not None:
            raise InputError(f"{where}: {flag}: {why}")


def held_notes(runs: Iterable[Run]) -> list[str]:
    """Notes for the words after a Megatron-LM switch that are all still shell variables the
    file does not set (`--sequence-parallel ${EXTRA}`, `unset_variable`): the switch takes none
    of them whatever they expand to, so they cannot change what it takes (`arity_error` lets
    them be); bash expands an unset unquoted one to no word; flags the caller might set in it
    are not read. A command's output there is still refused (it prints words, flags most
    likely)."""
    notes = []
    for run in runs:
        spec = flag_specs().get(run.flag)
        if spec is None or spec.nargs != "0" or run.explicit or not run.values:
            continue
        if all(unset_variable(w) for w in run.values):
            words = " ".join(run.values)
            notes.append(
                f"{run.flag} {words}: {words!r} is {not_known(run.values[0])}, read as no words "
                "(what it may expand to is not read); a switch takes none of them"
            )
    return notes


def refuse_stray_words(runs: Iterable[Run], where: str) -> None:
    """Refuses a Megatron-LM flag whose words its argparse action does not take
    (`arity_error`), at each place it is given (`megatron_line.flag_runs`: argparse parses an
    earlier one too): Megatron-LM exits on them ("unrecognized arguments", "expected one
    argument", "invalid int value"), where the reader would read the flag as given and drop the
    word (`--use-distributed-optimizer 0` as the distributed optimizer on,
    `--tensor-model-parallel-size 2 4` as tp 2). A bare `--` ends the options: argparse takes
    no option's word from it (CPython 3.12 `_get_nargs_pattern` drops '-' for optionals: `--lr
    -- 1e-4` is "expected one argument") and it and every word after it for positionals, which
    Megatron-LM's parser has none of: it exits ("unrecognized arguments: -- ...", CPython 3.11.7,
    3.12.1 and 3.13.0), where the reader would read the flags after it. The help option
    (`--help`, `-h...` anywhere an option may be: `is_help`) trains nothing either, after a
    flag that is not Megatron-LM's too; `--=1` is an option no parser has."""
    for run in runs:
        if run.flag == "--help":
            raise InputError(f"{where}: --help: {HELP}")
        if run.flag == "--" and run.explicit:
            raise InputError(
                f"{where}: --={run.values[0]}: argparse takes it for an option, and no option "
                f"is named '--': {EXITS} (unrecognized arguments)"
            )
        if run.flag == "--":
            raise InputError(
                f"{where}: --: a bare '--' ends argparse's options, and it and the words after "
                "it are positional arguments, which Megatron-LM's parser has none of: "
                f"{EXITS} (unrecognized arguments)"
            )
        why = arity_error(run.flag, run.values, run.explicit)
        helps = run.values[1:] if run.explicit else run.values
        if why is None and run.flag not in flag_specs():  # a fork's flag: -h is still help
            why = next((f"{w!r} follows it: {HELP}" for w in helps if is_help(w)), None)
        if why is not None:
            raise InputError(f"{where}: {run.flag}: {why}")
