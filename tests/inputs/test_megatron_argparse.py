"""Every flag of Megatron-LM's parser is checked as its argparse checks it, not only the flags
planner reads: `--log-interval abc`, `--ckpt-format foo`, `--eval-iters 1.5`, `--use-flash-attn
yes` and `--lr` bare were accepted, and Megatron-LM exits on each before training starts.

Oracles: CPython 3.12 Lib/argparse.py (Megatron-LM d98e8a64 pyproject.toml requires-python
>=3.12; its parsing code is the same in the 3.11.7 these tests run on, but for gh-109475:
test_megatron_argparse_words.py): `_parse_optional` (a word starting with '-' is an option unless
it matches `^-\\d+$|^-\\d*\\.\\d+$` or has a space, Megatron having no option string that looks
like a negative number, and '-h' being one even with a space), `consume_optional` (an explicit
`--flag=value` gives the option that word alone; a switch given one exits "ignored explicit
argument"), `_match_argument` ("expected one argument", "expected 3 arguments"), `_get_value`
("invalid int value") and `_check_value` ("invalid choice"), and words no option takes
("unrecognized arguments"). Each flag's arity, type and choices: megatron_flags.txt, which
benchmarks/megatron_flag_table.py writes from Megatron-LM d98e8a64 (checked here against the mirror
where it is present); test_megatron_argparse_words.py builds a real argparse parser from it and
compares over lines of option-like words.
"""

from __future__ import annotations

import pytest
from megatron_mirror import MIRROR

from benchmarks import megatron_flag_table
from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_choices import is_option, refuse_stray_words
from planner.inputs.megatron_flags import flag_specs
from planner.inputs.megatron_line import flag_runs

LINE = (
    "python pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
    "--vocab-size 1000 --seq-length 128 --max-position-embeddings 128 --bf16 "
)


def _read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(LINE + extra, "h100-sxm-80gb", 8, "train.sh")


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_the_shipped_table_is_the_mirrors() -> None:
    """megatron_flags.txt is what the generator reads from Megatron-LM d98e8a64 today."""
    specs = megatron_flag_table.parser_specs(str(MIRROR))
    assert megatron_flag_table.render(specs) == megatron_flag_table.TABLE.read_text()


@pytest.mark.parametrize(
    ("flag", "spec"),
    [
        # LoggerConfig.log_interval: int (training_config.py:247): type int, one word
        ("--log-interval", ("1", "int", None)),
        # arguments.py:2910 add_argument('--use-flash-attn', action='store_true')
        ("--use-flash-attn", ("0", "-", None)),
        # arguments.py:2984 add_argument('--lr', type=float)
        ("--lr", ("1", "float", None)),
        # CheckpointConfig.ckpt_format: Literal[...] (training_config.py:486)
        ("--ckpt-format", ("1", "str", ("torch", "torch_dist", "torch_dcp", "fsdp_dtensor"))),
        # TrainingConfig.rampup_batch_size: list[int] | None, argparse_meta nargs 3 (:20)
        ("--rampup-batch-size", ("3", "int", None)),
        # arguments.py:3255 add_argument('--data-path', nargs='*')
        ("--data-path", ("*", "str", None)),
        # arguments.py:2769 add_argument('--rl-partial-rollouts', BooleanOptionalAction)
        ("--no-rl-partial-rollouts", ("0", "-", None)),
        # TransformerConfig.attention_backend: AttnBackend (enums.py:51): its member names
        ("--attention-backend", ("1", "enum", ("flash", "fused", "unfused", "local", "auto"))),
    ],
)
def test_the_table_holds_each_flags_action(
    flag: str, spec: tuple[str, str, tuple[str, ...] | None]
) -> None:
    got = flag_specs()[flag]
    assert (got.nargs, got.type, got.choices) == spec


@pytest.mark.parametrize(
    ("extra", "flag", "needle"),
    [
        # the five
        ("--log-interval abc", "--log-interval", "expected an integer (got 'abc')"),
        ("--ckpt-format foo", "--ckpt-format", "expected one of torch, torch_dist"),
        ("--eval-iters 1.5", "--eval-iters", "(invalid int value)"),
        ("--use-flash-attn yes", "--use-flash-attn", "unrecognized arguments: yes"),
        ("--lr", "--lr", "expected one argument (got nothing"),
        # an earlier occurrence is parsed too
        ("--log-interval x --log-interval 10", "--log-interval", "got 'x'"),
        ("--use-flash-attn=1", "--use-flash-attn", "ignored explicit argument '1'"),
        ("--no-rl-partial-rollouts yes", "--no-rl-partial-rollouts", "unrecognized arguments"),
        ("--rampup-batch-size 16 16", "--rampup-batch-size", "expected 3 arguments (got 2)"),
        ("--rampup-batch-size=16 16 100", "--rampup-batch-size", "expected 3 arguments"),
        ("--data-path=a b", "--data-path", "unrecognized arguments: b"),
        ("--lr 1e-4 2e-4", "--lr", "unrecognized arguments: 2e-4"),
        ("--lr -x", "--lr", "'-x' follows it, which argparse takes for an option"),
        ("--lr -1e-4", "--lr", "write --lr=-1e-4"),
        ("--moe-aux-loss-coeff 0.1 x", "--moe-aux-loss-coeff", "expected a number (got 'x')"),
        ("--moe-router-load-balancing-type aux_loss x", "--moe-router-load-balancing-type", "x"),
        ("--attention-backend Flash", "--attention-backend", "KeyError"),
        ("--exit-signal SIGFOO", "--exit-signal", "SIGUSR1"),
        ("--cuda-graph-modules attn everything", "--cuda-graph-modules", "'everything'"),
        ("--window-size 4096,x", "--window-size", "tuple_type"),
        ("--no-rope-freq four", "--no-rope-freq", "int() of a word without '['"),
        ("--no-rope-freq [1]*x", "--no-rope-freq", "only digits"),
        ("--no-rope-freq ([1]*4", "--no-rope-freq", "SyntaxError"),
        ("--ckpt-format", "--ckpt-format", "expected one argument, one of torch"),
        ("--log-interval ''", "--log-interval", "(got '')"),
        ("--no-load-optim ''", "--no-load-optim", "an empty word follows it"),
    ],
)
def test_a_word_megatrons_argparse_refuses_is_refused(extra: str, flag: str, needle: str) -> None:
    with pytest.raises(InputError) as info:
        _read(extra)
    msg = str(info.value)
    assert msg.startswith(f"train.sh: {flag}: ") and needle in msg


@pytest.mark.parametrize(
    "extra",
    [
        "--log-interval 1_000",  # int('1_000') is 1000
        "--log-interval ' 3'",  # int(' 3'): a word with a space is a value, int() strips it
        "--lr inf",  # float('inf')
        "--lr=-1e-4",  # an explicit argument may start with '-'
        "--lr -0.5 --min-lr -1",  # negative numbers are values (no option looks like one)
        "--eval-iters -1",
        "--data-path a b c --data-path",  # nargs '*': any number of words, none too
        "--rampup-batch-size 16 16 1000",
        "--rl-partial-rollouts --no-rl-partial-rollouts",
        "--use-flash-attn",
        "--ckpt-format=torch_dist",
        "--attention-backend flash",
        "--exit-signal SIGUSR1",
        "--cuda-graph-impl local --cuda-graph-modules attn mlp",
        "--window-size 4096,0",
        "--window-size (4096,0)",
        "--no-rope-freq 4",
        "--no-rope-freq '([0]*3+[1])*8'",
        "--onnx-safe no",  # type=bool: bool('no') is True, never refused
        "--moe-router-load-balancing-type aux_loss seq_aux_loss",
        "--log-interval $LOG_INTERVAL",  # left: a variable the file does not set
        "--save-interval 100 $EXTRA_ARGS",  # bash may expand it to more flags
        # (a flag not Megatron-LM's exits 2 on pretrain_gpt.py, listed on a fork's script:
        # test_megatron_entry_parser.py)
    ],
)
def test_forms_argparse_takes_still_read(extra: str) -> None:
    assert _read(extra).doc["model"]["num_layers"] == 2


def test_a_bare_double_dash_ends_the_options() -> None:
    """`--` gives no option a word (CPython 3.12 `_get_nargs_pattern` drops '-' from an
    optional's pattern: `--lr -- 1e-4` exits "expected one argument", checked on 3.12.1 and
    3.13.0); the words after it are positionals, which planner leaves as it leaves flags that
    are not Megatron-LM's; it and they are "unrecognized arguments" (CPython 3.11.7, 3.12.1,
    3.13.0: a parser with --lr alone exits on `--lr 1 --`, `--lr 1 -- --x` and `--lr 1 -- 2`)."""
    with pytest.raises(InputError, match="--lr: expected one argument"):
        refuse_stray_words(flag_runs(["--lr", "--", "1e-4"]), "x")
    for tail in ([], ["--use-flash-attn", "yes"], ["--tensor-model-parallel-size", "2"]):
        with pytest.raises(InputError, match="unrecognized arguments"):
            refuse_stray_words(flag_runs(["--lr", "1", "--", *tail]), "x")


@pytest.mark.parametrize(
    "words",
    [
        ["--adam-beta1", "0.9", "-x"],
        ["--bf16", "-v"],
        ["--data-path", "a", "-1e-4"],
        ["--recompute-modules", "core_attn", "-x"],
    ],
)
def test_a_single_dash_word_after_a_flags_values_is_unrecognized(words: list[str]) -> None:
    # CPython 3.11.7: a parser with --lr alone exits "unrecognized arguments: -x" on
    # `--lr 1 -x`; an option-like word no option has is an unknown option, not a value
    with pytest.raises(InputError, match="unrecognized arguments"):
        refuse_stray_words(flag_runs(words), "x")


def test_option_like_words() -> None:
    assert not is_option("-1") and not is_option("-0.5") and not is_option("-.5")
    assert not is_option("-") and not is_option("") and not is_option("-a b")
    assert is_option("-1e-4") and is_option("-x") and is_option("-inf")
    assert is_option("--lr=-1") and is_option("--zz-unknown")
    # '-h x': _get_option_tuples matches -h by its first two characters before the space test
    assert is_option("-h x") and is_option("-hx") and not is_option("-x y")


@pytest.mark.parametrize(
    "extra",
    [
        "--window-attn-skip-freq none",
        "--window-attn-skip-freq 2.5",
        "--linear-attention-freq x",
    ],
)
def test_a_pattern_flag_is_checked_where_the_reader_does_not_read_it(extra: str) -> None:
    # moe_freq_type / la_freq_type (arguments.py:304-375 @d98e8a64) call int() on a word without
    # '[': argparse exits ("invalid ... value"), with or without the layers the flag describes
    with pytest.raises(InputError, match="expected an integer or a list expression"):
        _read(extra)
