"""NeMo 2.0 `nemo llm pretrain` lines that are bad input: each names the key and value (exit 2),
and what NeMo-Run itself does with a word planner dropped.

Oracles: NeMo's own definitions, restated by hand in each test (NVIDIA/NeMo 8cfedd72: the recipe
defaults of nemo/collections/llm/recipes/<factory>.py, MegatronStrategy's and TransformerConfig's
field names, llm.api._validate_config) and NeMo-Run's parsing of the command line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import run
from nemo_lines import HEAD, doc, read

from planner.inputs import nemo_args
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (HEAD + "trainer.strategy.foo=3", r"trainer.strategy.foo=3: not a NeMo 2 override"),
        (
            HEAD + "trainer.strategy.tensor_model_paralel_size=2",
            r"did you mean trainer.strategy.tensor_model_parallel_size",
        ),
        (
            HEAD + "optim.config.use_precision_aware_optimizer=True",
            r"changes memory or layout \(Megatron-LM --use-precision-aware-optimizer\)",
        ),
        ("trainer.devices=8 data.seq_length=2048", r"name no model.*--nemo-model NAME"),
        ("nemo llm pretrain --factory llama3_8bb data.seq_length=1", r"did you mean llama3_8b"),
        ("nemo llm pretrain --factory 'llama3_8b(num_nodes=2)' data.seq_length=1", "arguments"),
        ("nemo llm finetune --factory llama3_8b data.seq_length=1", "nemo llm finetune"),
        (HEAD + "trainer.plugins.precision=32", r"precision='32'|precision=32"),
        (HEAD + "model.config.num_layers=twelve", r"num_layers"),
    ],
)
def test_bad_lines_say_which_key_and_value(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        d = doc(text)
        parse_plan(d, Path("run.sh"))


def test_the_factory_named_twice_must_agree() -> None:
    with pytest.raises(InputError, match="differs from --nemo-model gemma2_2b"):
        read(HEAD + "data.seq_length=1", nemo_model="gemma2_2b")
    # the recipe's model, its vocabulary unpadded as GPTConfig takes a set vocab_size (nemo_args
    # _vocabulary), so named as changed: a zoo name beside other fields is refused (plan_resolve)
    model = read("data.seq_length=2048", nemo_model="gemma2_2b").doc["model"]
    assert model["name"] == "gemma2-2b+overrides"
    assert "make_vocab_size_divisible_by=1" in model["source"]
    with pytest.raises(InputError, match="only for NeMo"):
        read(
            "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 8", nemo_model="x"
        )


def test_megatron_lines_are_not_nemo_lines() -> None:
    # pretrain_gpt.py looks dotted but is no NeMo root; a Megatron flag makes a Megatron line
    assert not nemo_args.is_nemo_line(["pretrain_gpt.py", "--num-layers", "2"])
    assert not nemo_args.is_nemo_line(["--num-layers", "2", "model.config.x=1"])
    assert nemo_args.is_nemo_line(
        ["nemo", "llm", "pretrain", "--factory", "x", "data.seq_length=1"]
    )


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "run.sh"
    path.write_text("trainer.num_nodes=1 trainer.devices=8 data.seq_length=2048 \\\n  log.x=1\n")
    base = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(base, capsys)
    assert code == 2 and "name no model" in err
    code, out, err = run([*base, "--nemo-model", "gemma2_2b", "--verbose"], capsys)
    assert code == 0 and "gemma2-2b+overrides on 8 x h100-sxm-80gb" in out  # its vocabulary
    assert "ignored NeMo overrides (they do not change memory or layout): log.x" in err
    code, _, err = run(["check", "plan.toml", "--nemo-model", "gemma2_2b"], capsys)
    assert code == 2 and "--nemo-model: only with --megatron-args" in err


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        # a fuzzer's internal errors: a degree compared as text ('>' of str and int), a vocabulary
        # formatted with ',' before its check
        ("--factory llama31_70b trainer.strategy.tensor_model_parallel_size=x",
         "trainer.strategy.tensor_model_parallel_size='x': expected an integer"),
        ("--factory llama3_8b model.config.vocab_size=abc",
         "model.config.vocab_size='abc': expected a positive integer"),
        ("--factory llama3_8b trainer.plugins.grad_reduce_in_fp32=maybe",
         "trainer.plugins.grad_reduce_in_fp32='maybe': expected True or False"),
    ],
)  # fmt: skip
def test_values_of_the_wrong_kind_are_named(overrides: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        read(f"nemo llm pretrain -y {overrides}", 64)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        # NeMo-Run parse_factory swaps the whole model (nemo_run cli_parser.py): the 70B, which
        # planner sized as the recipe's 8B ("fits")
        ("model=llama3_70b", "model=llama3_70b: the whole model swapped"),
        ("trainer=llama3_70b", "trainer=llama3_70b: the whole trainer swapped"),
        # the operator overrides (cli_parser.py: += -= *= /= |= &=), dropped before
        ("data.seq_length*=2", "data.seq_length*=2: NeMo-Run's operator override"),
        # no root of llm.pretrain: NeMo-Run refuses "No parameter named 'strategy'"
        ("strategy.tensor_model_parallel_size=2", "no parameter 'strategy'"),
        # llm.api._validate_config asserts the batch and the sequence
        ("data.micro_batch_size=None", "data.micro_batch_size=None: NeMo needs a value"),
        # plugins/mixed_precision.py: "Getting conflicting values for fp8_params and
        # fp8_param_gather"
        (
            "trainer.plugins.fp8=hybrid trainer.plugins.fp8_params=True "
            "trainer.plugins.fp8_param_gather=False",
            "conflicts with trainer.plugins.fp8_param_gather",
        ),
    ],
)
def test_what_nemo_run_does_with_a_word_planner_dropped(extra: str, says: str) -> None:
    with pytest.raises(InputError, match=re.escape(says)):
        read(f"{HEAD}{extra}")


def test_a_position_table_past_the_bound_names_seq_length() -> None:
    # NeMo sizes the table by model.config.seq_length (NeMo GPT model base.py:399); planner's
    # bound on every size is 2^53 = 9,007,199,254,740,992 (arch.MAX_SIZE): the line's key is
    # named, not the plan's max_position_embeddings, which the line does not hold
    for value in ("1000000000000000000000", "9007199254740996"):
        with pytest.raises(InputError) as info:
            read(f"{HEAD}model.config.seq_length={value}")
        assert f"model.config.seq_length={value}: must be at most 2^53" in str(info.value)
        assert "max_position_embeddings" not in str(info.value)
    assert (
        read(f"{HEAD}model.config.seq_length=8192").doc["model"]["max_position_embeddings"] == 8192
    )


def test_mixtrals_own_max_position_embeddings_must_be_an_int() -> None:
    # MixtralConfig.max_position_embeddings: int = 4096 (NeMo 8cfedd72 GPT model mixtral.py:52):
    # NeMo-Run parses the value by that annotation, so a word is refused, an int only noted
    line = "nemo llm pretrain -y --factory mixtral_8x7b model.config.max_position_embeddings="
    with pytest.raises(InputError, match=r"max_position_embeddings='abc': expected an integer"):
        read(line + "abc", 64)
    notes = read(line + "65536", 64).notes
    assert any("max_position_embeddings=65536" in n for n in notes)


def test_a_models_field_is_named_by_the_lines_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # ModelArch refuses num_layers "abc" (an int field); the line wrote model.config.num_layers,
    # which the error names beside the plan field, as it names trainer.strategy.* keys
    path = tmp_path / "run.sh"
    path.write_text(HEAD + "model.config.num_layers=abc\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "model.config.num_layers (model.num_layers): " in err
