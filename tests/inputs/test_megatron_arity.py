"""Words after a Megatron-LM flag the reader reads that the flag does not take are refused, naming
the flag and the word (QA s30 item 4: `--use-distributed-optimizer 0` was read as ZeRO 1,
`--sequence-parallel no` turned sequence parallelism on, `--tensor-model-parallel-size 2 4` read
tp 2, the stray word dropped).

Oracle: Megatron-LM d98e8a64's argparse. pretrain_gpt.py:525 calls parse_and_validate_args
without ignore_unknown_args, so megatron/training/arguments.py:132 runs `parser.parse_args()`,
which exits 2 on a word no option takes ("unrecognized arguments: 0") and on an option without
its value ("expected one argument"). The flags' arity: `action='store_true'` / `'store_false'`
(--use-distributed-optimizer arguments.py:3156), a config dataclass's bool field, which
ArgumentGroupFactory makes store_true / store_false (argument_utils.py
`_build_argparse_kwargs_from_field`; ModelParallelConfig.sequence_parallel), `nargs`
(--cp-comm-type nargs='+' arguments.py:3221), a list field (nargs '+'), else one value
(ModelParallelConfig.tensor_model_parallel_size: int). Where the Megatron-LM mirror is on this
machine, the words megatron_flags.txt gives each flag the reader looks at are checked against
those sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from cli_run import run
from megatron_mirror import MIRROR, source

from planner.inputs import megatron_args
from planner.inputs.errors import InputError
from planner.inputs.megatron_choices import arity_error
from planner.inputs.megatron_flags import NOT_MODELLED, READ, REFUSED, flag_specs
from tests.inputs.test_megatron_args import LLAMA3_8B


def _read(extra: str) -> megatron_args.Reading:
    text = LLAMA3_8B.replace("--bf16", f"--bf16 {extra}")
    return megatron_args.read(text, "h100-sxm-80gb", 16, where="train.sh")


@pytest.mark.parametrize(
    ("extra", "flag", "word"),
    [
        ("--use-distributed-optimizer 0", "--use-distributed-optimizer", "0"),
        ("--sequence-parallel no", "--sequence-parallel", "no"),
        ("--tensor-model-parallel-size 2 4", "--tensor-model-parallel-size", "4"),
        ("--swiglu true", "--swiglu", "true"),
        ("--micro-batch-size 1 2", "--micro-batch-size", "2"),
    ],
)
def test_a_stray_word_after_a_read_flag_is_refused(extra: str, flag: str, word: str) -> None:
    with pytest.raises(InputError) as info:
        _read(extra)
    msg = str(info.value)
    assert msg.startswith(f"train.sh: {flag}: ") and repr(word) in msg
    assert "unrecognized arguments" in msg


def test_a_switch_given_a_value_after_equals_is_refused() -> None:
    """`--sequence-parallel=no`: argparse hands a store_true action the explicit argument and
    exits, "ignored explicit argument 'no'" (CPython 3.12 Lib/argparse.py `consume_optional`:
    a double-dash option whose action takes no argument)."""
    with pytest.raises(InputError) as info:
        _read("--sequence-parallel=no")
    msg = str(info.value)
    assert msg.startswith("train.sh: --sequence-parallel: ") and "--sequence-parallel=no" in msg
    assert "ignored explicit argument 'no'" in msg


def test_a_read_flag_without_its_value_is_refused() -> None:
    with pytest.raises(InputError, match=r"train\.sh: --micro-batch-size: expected one argument"):
        _read("--micro-batch-size")
    with pytest.raises(InputError, match=r"--recompute-modules: expected at least one argument"):
        _read("--recompute-modules")


def test_an_unset_variable_after_a_switch_is_named() -> None:
    # the switch takes none of it, whatever it expands to: read, and named in a note
    # (test_megatron_arity_switch.py: bash and argparse run it)
    notes = _read("--sequence-parallel $SP").notes
    assert any(n.startswith("--sequence-parallel $SP: '$SP' is a shell variable") for n in notes)


def test_lists_and_good_lines_still_read() -> None:
    doc = _read("--recompute-modules core_attn mlp --cp-comm-type p2p --spec").doc
    assert doc["parallel"]["tp"] == 2
    assert _read("").doc["parallel"]["sequence_parallel"] is True


def test_arity_of_other_megatron_flags_is_judged_too() -> None:
    """Flags planner ignores are Megatron-LM's all the same: their arity comes from
    megatron_flags.txt (--log-interval: LoggerConfig.log_interval, an int field, one value;
    --eval-iters: ValidationConfig.eval_iters, likewise); a flag that is not Megatron-LM's is
    not judged."""
    why = arity_error("--log-interval", ["10", "20"])
    assert why is not None and "unrecognized arguments: 20" in why
    why = arity_error("--eval-iters", [])
    assert why is not None and why.startswith("expected one argument")
    assert arity_error("--zz-fork-only", ["1", "2"]) is None


@pytest.mark.parametrize(
    ("extra", "flag", "word"),
    [
        ("--use-distributed-optimizer 0", "--use-distributed-optimizer", "0"),
        ("--sequence-parallel no", "--sequence-parallel", "no"),
        ("--tensor-model-parallel-size 2 4", "--tensor-model-parallel-size", "4"),
    ],
)
def test_the_cli_exits_2_naming_flag_and_word(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, flag: str, word: str
) -> None:
    path = tmp_path / "train.sh"
    path.write_text(LLAMA3_8B.replace("--bf16", f"--bf16 {extra}"))
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
    code, out, err = run(argv, capsys)
    assert code == 2, err
    assert str(path) in err and flag in err and repr(word) in err
    assert "Traceback" not in err and out == ""


def _kind(kw: dict[str, ast.expr]) -> str:
    """'0' (no value), a nargs ('+', '*'), or '1' for add_argument's keywords."""
    if "action" in kw:
        return "0"
    if "nargs" in kw:
        return str(ast.literal_eval(kw["nargs"]))
    return "1"


def _hand_written() -> dict[str, str]:
    """Flag -> kind for arguments.py's add_argument calls, and post-training arguments.py's
    (add_modelopt_args, which pretrain_gpt.py's parser takes where ModelOpt imports)."""
    out: dict[str, str] = {}
    for path in ("megatron/post_training/arguments.py", "megatron/training/arguments.py"):
        for node in ast.walk(ast.parse(source(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                kw = {k.arg: k.value for k in node.keywords if k.arg}
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        out[arg.value] = _kind(kw)
    return out


def _generated() -> dict[str, str]:
    """Flag -> kind for the config dataclasses' fields, as ArgumentGroupFactory spells them."""
    out: dict[str, str] = {}
    for path in (
        "megatron/core/model_parallel_config.py",
        "megatron/core/transformer/transformer_config.py",
        "megatron/training/config/training_config.py",
        "megatron/training/config/common_config.py",
    ):
        for cls in ast.parse(source(path)).body:
            if not isinstance(cls, ast.ClassDef):
                continue
            for st in cls.body:
                if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
                    continue
                name, ann = st.target.id, ast.unparse(st.annotation)
                value, meta = st.value, {}
                if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field":
                    kws = {k.arg: k.value for k in value.keywords}
                    value = kws.get("default")
                    md = kws.get("metadata")
                    if isinstance(md, ast.Dict):
                        for k, v in zip(md.keys, md.values, strict=True):
                            if isinstance(k, ast.Constant) and isinstance(v, ast.Dict):
                                meta = {
                                    str(kk.value): vv
                                    for kk, vv in zip(v.keys, v.values, strict=True)
                                    if isinstance(kk, ast.Constant)
                                }
                names = ["--" + name.replace("_", "-")]
                if ann in ("bool", "Optional[bool]", "bool | None"):
                    kind = "0"
                    if value is not None and ast.unparse(value) == "True":
                        names = [f"--no-{names[0][2:]}", f"--disable-{names[0][2:]}"]
                else:
                    kind = "+" if "list[" in ann.lower() else "1"
                if "arg_names" in meta:
                    names = [ast.literal_eval(n) for n in meta["arg_names"].elts]  # type: ignore[attr-defined]
                if "action" in meta or "nargs" in meta:
                    kind = _kind(meta)
                for n in names:
                    out.setdefault(n, kind)
    return out


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Megatron-LM mirror on this machine")
def test_arity_matches_megatrons_parser_source() -> None:
    """Each flag the reader looks at: the words megatron_flags.txt says it takes (none for a
    switch, a list's nargs, else one value) are what the parser's source says; a hand-written
    add_argument wins over a dataclass field of the same name (arguments.py excludes those
    fields)."""
    kinds = {**_generated(), **_hand_written()}
    for flag in READ | set(NOT_MODELLED) | set(REFUSED):
        expected = flag_specs()[flag].nargs  # the data file's: 0, 1, or a list's nargs
        assert kinds[flag] == expected, flag


def test_a_flag_left_without_its_value_says_why_it_may_be() -> None:
    """bash drops an unquoted expansion of an empty or unset variable (`--vocab-file ${VOCAB}`
    with VOCAB unset leaves `--vocab-file` bare), and argparse then exits "expected one
    argument": the message says both (Megatron-LM d98e8a64 pretrain_gpt.py parses without
    ignore_unknown_args)."""
    why = arity_error("--tensor-model-parallel-size", [])
    assert why is not None and why.startswith("expected one argument (got nothing")
    assert "unset" in why and "expands to no word" in why


@pytest.mark.parametrize("word", ["--sequence-parallel=", "--use-distributed-optimizer="])
def test_a_switch_given_an_empty_explicit_value_is_refused(word: str) -> None:
    """`--sequence-parallel=$SP` with SP empty passes argparse `--sequence-parallel=`, on which it
    exits ("ignored explicit argument ''", Python 3.11 argparse `consume_optional` for a
    store_true action given an explicit argument); planner read the switch as on."""
    with pytest.raises(InputError, match="an empty word follows it"):
        megatron_args.read(LLAMA3_8B + " " + word, "h100-sxm-80gb", 8, "train.sh")
