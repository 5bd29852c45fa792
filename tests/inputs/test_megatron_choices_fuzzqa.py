"""A Megatron-LM command line whose flag has a value outside the choices Megatron's parser takes
exits 2 naming the flag, the value and the choices (fuzz QA: `--recompute-granularity selctive`
was read as no recompute, `--cross-entropy-fusion-impl tee` as te, `--transformer-impl abc`
accepted).

Oracle: Megatron-LM d98e8a64's argparse, which refuses such a value ("invalid choice") before
training starts: the hand-written `add_argument(..., choices=[...])` calls of
megatron/training/arguments.py and the flags ArgumentGroupFactory generates from Literal / Enum
fields (megatron/training/argument_utils.py `_extract_type`: TransformerConfig
recompute_granularity Literal['full', 'selective'] :532, ModelParallelConfig
cross_entropy_fusion_impl Literal['native', 'te'] :325, TransformerConfig transformer_impl
Literal['local', 'transformer_engine', 'inference_optimized'] :1314). Where the Megatron-LM
mirror is on this machine, `choices_table()` (below, read from megatron_flags.txt) is
checked against those sources."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cli_run import run
from megatron_mirror import MIRROR, source

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_choices import LOOKED_AT, invalid_choice
from planner.inputs.megatron_flags import NOT_MODELLED, READ, flag_specs, megatron_flags
from planner.inputs.megatron_vocab import TOKENIZERS
from tests.inputs.test_megatron_args import LLAMA3_8B


def choices_table() -> dict[str, tuple[str, ...]]:
    """The choices of each flag the reader looks at whose parser action has them (argparse's
    `choices`: add_argument's, a config field's Literal values or Enum member names,
    megatron_flags.txt), as `megatron_args` refuses others up front."""
    out = {}
    for flag in sorted(LOOKED_AT):
        spec = flag_specs()[flag]
        if spec.choices is not None and spec.type in ("str", "int", "float", "enum"):
            out[flag] = spec.choices
    return out


BASE = LLAMA3_8B.replace("--recompute-granularity selective ", "")


def _read(extra: str) -> megatron_args.Reading:
    text = BASE.replace("--bf16", f"--bf16 {extra}")
    return megatron_args.read(text, "h100-sxm-80gb", 8, where="train.sh")


@pytest.mark.parametrize(
    ("extra", "flag", "value", "choices"),
    [
        (
            "--recompute-granularity selctive",
            "--recompute-granularity",
            "selctive",
            "full, selective",
        ),
        ("--cross-entropy-fusion-impl tee", "--cross-entropy-fusion-impl", "tee", "native, te"),
        (
            "--transformer-impl abc",
            "--transformer-impl",
            "abc",
            "local, transformer_engine, inference_optimized",
        ),
        ("--attention-backend flash3", "--attention-backend", "flash3", "flash, fused, unfused"),
        ("--fp8-recipe Delayed", "--fp8-recipe", "Delayed", "tensorwise, delayed, mxfp8"),
        ("--moe-token-dispatcher-type a2a", "--moe-token-dispatcher-type", "a2a", "allgather"),
        ("--ckpt-format zarr", "--ckpt-format", "zarr", "torch, torch_dist"),
        ("--exp-avg-dtype fp64", "--exp-avg-dtype", "fp64", "fp32, fp16, bf16, fp8"),
        ("--flash-attention-version 5", "--flash-attention-version", "5", "2, 3, 4"),
        ("--optimizer adamw", "--optimizer", "adamw", "adam, sgd, muon"),
    ],
)
def test_a_value_outside_megatrons_choices_is_refused(
    extra: str, flag: str, value: str, choices: str
) -> None:
    with pytest.raises(InputError) as info:
        _read(extra)
    msg = str(info.value)
    assert msg.startswith("train.sh: ") and f"{flag}: " in msg
    assert repr(value) in msg and choices in msg and "argparse" in msg


@pytest.mark.parametrize("name", ["ce.txt", "rg.txt", "impl.txt"])
def test_the_cli_exits_2_naming_file_flag_and_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The QA's files: the line planner's own launch writes, one flag misspelt."""
    bad = {
        "ce.txt": "--cross-entropy-fusion-impl tee",
        "rg.txt": "--recompute-granularity selctive",
        "impl.txt": "--transformer-impl abc",
    }[name]
    path = tmp_path / name
    path.write_text(BASE.replace("--bf16", f"--bf16 {bad}"))
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"], capsys)
    flag, value = bad.split()
    assert code == 2, err
    assert str(path) in err and flag in err and repr(value) in err
    assert "Traceback" not in err


def test_every_choice_is_taken() -> None:
    for flag, choices in choices_table().items():
        for choice in choices:
            assert invalid_choice(flag, choice) is None, (flag, choice)
        assert invalid_choice(flag, "not-a-choice") is not None
    assert invalid_choice("--flash-attention-version", "03") is None  # int("03") is 3
    assert invalid_choice("--num-layers", "anything") is None  # no choices


def test_the_read_flags_are_the_ones_checked() -> None:
    """Every `choices_table` flag is a Megatron-LM flag the reader reads (or notes)."""
    known = megatron_flags()
    for flag in choices_table():
        assert flag in known and (flag in READ or flag in NOT_MODELLED), flag
    assert choices_table()["--tokenizer-type"] == TOKENIZERS


def test_good_values_and_shell_variables_still_read() -> None:
    reading = _read(
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
    )
    assert reading.doc["parallel"]["recompute"] == "full"
    assert _read("--cross-entropy-fusion-impl te").doc  # a valid choice
    with pytest.raises(InputError, match=r"\$IMPL.* shell variable"):
        _read("--transformer-impl $IMPL")  # left to the reading, which says what it is


def _literal_choices(source: str) -> dict[str, tuple[str, ...]]:
    """field name -> the values of its Literal annotation, for every class of the file."""
    out: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        literal = next(
            (
                n
                for n in ast.walk(node.annotation)
                if isinstance(n, ast.Subscript) and getattr(n.value, "id", "") == "Literal"
            ),
            None,
        )
        if literal is None:
            continue
        values = literal.slice.elts if isinstance(literal.slice, ast.Tuple) else [literal.slice]
        out[node.target.id] = tuple(str(ast.literal_eval(v)) for v in values)
    return out


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_choices_match_megatrons_parser_source() -> None:
    """Every flag the reader reads that has choices in Megatron-LM d98e8a64's parser is in
    `choices_table()`, with the same values: arguments.py's add_argument(choices=...) and the
    Literal fields ArgumentGroupFactory turns into choices."""
    read = READ | set(NOT_MODELLED)
    expected: dict[str, tuple[str, ...]] = {}
    src = source("megatron/training/arguments.py")
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            kw = {k.arg: k.value for k in node.keywords}
            if "choices" not in kw:
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and arg.value in read:
                    expected[arg.value] = tuple(str(v) for v in ast.literal_eval(kw["choices"]))
    for path in (
        "megatron/core/transformer/transformer_config.py",
        "megatron/core/model_parallel_config.py",
        "megatron/training/config/training_config.py",
    ):
        for field, values in _literal_choices(source(path)).items():
            flag = "--" + field.replace("_", "-")
            flag = {"--fp8": "--fp8-format", "--fp4": "--fp4-format"}.get(flag, flag)
            if flag in read and flag not in expected:
                expected[flag] = values
    expected["--attention-backend"] = ("flash", "fused", "unfused", "local", "auto")  # the Enum
    table = choices_table()
    assert {f: set(v) for f, v in expected.items()} == {f: set(v) for f, v in table.items()}
