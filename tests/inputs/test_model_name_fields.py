"""`[model]` is exactly one of: a zoo name (or model file) alone, hf_config, or the architecture
fields inline (README's plan file, DESIGN.md's public contract). A zoo model's name beside fields
that change it used to build an inline model silently shown under the zoo's name; it exits 2
naming the file, the fields and the rule. The inline fields are a model file's, so they may carry
a name of their own (what `suggest --write-plan` writes for a model read from a file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cli_run import run
from plan_text import CLUSTER, PARALLEL, TRAINING, write

from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.inputs.plan_writer import toml_value

RULE = "give exactly one of name (a zoo model or a model file, alone), hf_config, or the"


def _model(fields: dict[str, Any]) -> str:
    return "[model]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items())


def _zoo_fields(name: str) -> dict[str, Any]:
    """Every field the zoo's model file gives (its labels aside)."""
    arch = catalog.get_model(name)
    fields = arch.model_dump(exclude_defaults=True, exclude={"name", "source", "display_name"})
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def _plan(tmp_path: Path, model: str) -> Path:
    return write(tmp_path, "\n".join([model, CLUSTER, TRAINING, PARALLEL]))


@pytest.mark.parametrize(
    ("changed", "value"),
    [
        ("num_layers", 16),  # Llama 3.1 8B has 32 layers (model_zoo/llama3.1-8b.toml)
        ("vocab_size", 32000),  # and 128,256 tokens
    ],
)
def test_a_zoo_name_beside_fields_that_change_it_exits_2(
    changed: str, value: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {"name": "llama3.1-8b", **_zoo_fields("llama3.1-8b"), changed: value}
    path = _plan(tmp_path, _model(fields))
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2, err
    assert f"{path}: model: name = \"llama3.1-8b\" is a zoo model, and ['{changed}']" in err
    assert RULE in err and "Traceback" not in err


def test_a_zoo_name_beside_one_field_names_the_rule_not_the_missing_fields(
    tmp_path: Path,
) -> None:
    # what a user meaning "the zoo model with 16 layers" writes: before, the missing hidden_size
    # and the rest were named, as if the name had not been read
    path = _plan(tmp_path, '[model]\nname = "llama3.1-8b"\nnum_layers = 16\n')
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert str(info.value).startswith(f'{path}: model: name = "llama3.1-8b" is a zoo model')
    assert "['num_layers']" in str(info.value) and "hidden_size" not in str(info.value)


def test_a_model_file_beside_fields_exits_2(tmp_path: Path) -> None:
    path = _plan(tmp_path, '[model]\nname = "my_model.toml"\nnum_layers = 16\n')
    with pytest.raises(InputError) as info:
        load_plan(path)
    assert str(info.value).startswith(f'{path}: model: name = "my_model.toml" is a model file')
    assert RULE in str(info.value)


def test_a_zoo_name_beside_its_own_fields_is_that_model(tmp_path: Path) -> None:
    # the fields of the zoo's own file, as a reader that copies them writes them: nothing is
    # shown under a name it is not
    fields = {"name": "llama3.1-8b", **_zoo_fields("llama3.1-8b")}
    arch = load_plan(_plan(tmp_path, _model(fields))).job.arch
    zoo = catalog.get_model("llama3.1-8b")
    assert arch.name == zoo.name and arch.model_dump(exclude={"source", "display_name"}) == (
        zoo.model_dump(exclude={"source", "display_name"})
    )


def test_a_model_named_after_no_zoo_model_reads_back_from_suggest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # suggest --model FILE writes the file's name beside its fields (plan_writer.model_table);
    # check must read that plan back (the name is no zoo model's)
    fields = {"name": "my-8b", **_zoo_fields("llama3.1-8b"), "num_layers": 16}
    model = tmp_path / "my-8b.toml"
    model.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items()))
    plan = tmp_path / "plan.toml"
    argv = ["suggest", "--model", str(model), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run([*argv, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    assert 'name = "my-8b"\nnum_layers = 16\n' in plan.read_text()
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 0, err
    assert load_plan(plan).job.arch.num_layers == 16


def test_a_zoo_named_model_file_changed_reads_back_from_suggest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a model file copied from the zoo and edited, its name kept: suggest reads it (a model file
    # names itself), and the plan it writes must read back: plan_writer labels the changed model
    # "<name>+modified", which is no zoo model's, rather than the zoo's name beside other fields
    fields = {"name": "llama3.1-8b", **_zoo_fields("llama3.1-8b"), "num_layers": 16}
    model = tmp_path / "m16.toml"
    model.write_text("".join(f"{k} = {toml_value(v)}\n" for k, v in fields.items()))
    plan = tmp_path / "plan.toml"
    argv = ["suggest", "--model", str(model), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run([*argv, "--write-plan", str(plan)], capsys)
    assert code == 0, err
    assert 'name = "llama3.1-8b+modified"\n' in plan.read_text()
    code, _, err = run(["check", str(plan)], capsys)
    assert code in (0, 1), err
    assert load_plan(plan).job.arch.num_layers == 16
