"""Every integer field of the plan's sections set to a 400-digit value: refused where the plan is
read (`planner.inputs.plan_counts`), never an OverflowError or MemoryError in the model, on a plan
file, a Megatron-LM line, a NeMo line and a torchtitan TOML.

Oracles: the contract (exit 2 naming the file, the field as the user wrote it and the value, no
traceback); pydantic's own models, introspected, for the list of fields; and the value itself: a
message that quotes the 400 digits whole prints what nobody can read (`errors.SPELLED_DIGITS`).
"""

from __future__ import annotations

import types
import typing
from pathlib import Path

import pytest
import typer
from cli_run import run
from plan_text import write
from pydantic import BaseModel

from planner.cli import check as check_command
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.errors import PlannerError
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.plan_sections import TrainingSection
from planner.inputs.torchtitan import TorchtitanSection

BIG = 10**400
SECTIONS: dict[str, type[BaseModel]] = {
    "training": TrainingSection,
    "parallel": ParallelSection,
    "cluster": ClusterSection,
    "torchtitan": TorchtitanSection,
}
BASE = {
    "cluster": {"gpu": '"h100-sxm-80gb"', "num_gpus": "8"},
    "training": {"seq_length": "8192", "global_batch_size": "128"},
    "parallel": {"tp": "1", "pp": "1"},
}


def _arity(tp: typing.Any) -> int | None:
    """0 for an integer annotation, n for a tuple of integers (1 for `tuple[int, ...]`), None
    for anything else (X | None and Annotated looked through)."""
    origin = typing.get_origin(tp)
    if tp is int:
        return 0
    if origin is typing.Annotated:
        return _arity(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        found = [_arity(a) for a in typing.get_args(tp) if a is not type(None)]
        return next((a for a in found if a is not None), None)
    if origin is tuple:
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return len(args) if args and all(_arity(a) == 0 for a in args) else None
    return None


def int_fields() -> list[tuple[str, str, int]]:
    """(section, field, arity) of every integer field of the plan's sections."""
    return [
        (section, name, arity)
        for section, model in SECTIONS.items()
        for name, info in model.model_fields.items()
        if (arity := _arity(info.annotation)) is not None
    ]


def _plan(section: str, key: str, literal: str) -> str:
    tables = {s: dict(v) for s, v in BASE.items()}
    if section == "torchtitan":  # its fields need the framework and FSDP (zero_stage 3)
        tables["training"]["framework"] = '"torchtitan"'
        tables["parallel"]["zero_stage"] = "3"
    tables.setdefault(section, {})[key] = literal
    text = '[model]\nname = "llama3.1-8b"\n'
    for name, fields in tables.items():
        text += f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items())
    return text


def _check(path: Path) -> tuple[int, str]:
    """`planner check PATH` in-process (as test_plan_bad_input_sweep's `_check_exit`): its exit
    code and a PlannerError's message; any other exception fails the test (the CLI would print
    it as an internal error)."""
    try:
        check_command.check(path)
    except PlannerError as e:
        return e.exit_code, str(e)
    except typer.Exit as e:
        return e.exit_code, ""
    raise AssertionError(f"check {path} returned without raising its exit code")


def test_the_sweep_finds_the_fields_that_crashed() -> None:
    """The introspection sees the fields the fuzz pass crashed on (a tuple's items too)."""
    found = {(s, f) for s, f, _ in int_fields()}
    crashed = {
        ("training", "muon_ns_steps"),
        ("training", "weight_hash_interval"),
        ("parallel", "ddp_bucket_size"),
        ("parallel", "ddp_num_buckets"),
        ("training", "rl_inference_parallel"),
        ("training", "vision_encoder"),
    }
    assert crashed <= found
    assert len(found) >= 35


@pytest.mark.parametrize(("section", "key", "arity"), int_fields())
def test_every_int_field_at_400_digits_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, key: str, arity: int
) -> None:
    """Each integer field at 10^400 on a plan that is otherwise clean: exit 2 naming the file
    and the field, the value cut short; never an exception (OverflowError: the model's floats;
    MemoryError: a rollout model's degrees). On a18f1ea weight_hash_interval, ddp_bucket_size,
    ddp_num_buckets, rl_inference_parallel, vision_encoder and t5_encoder raised."""
    literal = str(BIG) if arity == 0 else "[" + ", ".join([str(BIG)] * arity) + "]"
    path = write(tmp_path, _plan(section, key, literal))
    code, err = _check(path)
    capsys.readouterr()
    assert code == 2, (key, err)
    assert str(path) in err and f"{section}.{key}" in err, err
    assert str(BIG) not in err  # the first digits and the count (errors.abbreviated)


@pytest.mark.parametrize(
    ("flags", "named", "cap"),
    [
        ("--optimizer muon --muon-num-ns-steps BIG", "--muon-num-ns-steps", "1000"),
        (
            "--check-weight-hash-across-dp-replicas-interval BIG",
            "--check-weight-hash-across-dp-replicas-interval",
            "1000000000000",
        ),
        ("--ddp-bucket-size BIG", "--ddp-bucket-size", "1000000000000"),
        ("--ddp-num-buckets BIG", "--ddp-num-buckets", "1000000000000"),
        ("--num-distributed-optimizer-instances BIG", "--num-distributed-optimizer-instances", ""),
        ("--swiglu --hidden-size BIG --ffn-hidden-size 4", "hidden_size", ""),
        ("--swiglu --hidden-size BIG", "hidden_size", ""),  # its default FFN size: no float
        ("--seq-length BIG", "--seq-length", ""),
    ],
)
def test_a_megatron_line_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: str, named: str, cap: str
) -> None:
    """The same values on a Megatron-LM line: exit 2 naming the flag (with the plan field where
    the plan refuses it), the cap and the value cut short; on a18f1ea the first four raised
    OverflowError and --swiglu --hidden-size too, with or without --ffn-hidden-size
    (megatron_model's default FFN size, int(4h x 2/3 / 64) x 64 in floats, sized either way)."""
    path = tmp_path / "train.sh"
    path.write_text(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
        "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
        f"--micro-batch-size 1 --global-batch-size 8 --bf16 {flags.replace('BIG', str(BIG))}\n"
    )
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"], capsys)
    assert code == 2 and "internal error" not in err, err
    assert str(path) in err and named in err and cap in err, err
    assert str(BIG) not in err and "100000000000... (401 characters)" in err, err


@pytest.mark.parametrize(
    ("key", "field"),
    [
        ("trainer.strategy.ddp.bucket_size", "parallel.ddp_bucket_size"),
        ("trainer.strategy.ddp.num_buckets", "parallel.ddp_num_buckets"),
    ],
)
def test_a_nemo_line_names_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, field: str
) -> None:
    """A NeMo line's DDP bucket keys at 10^400 (the QA's n20.sh, n21.sh): exit 2 naming the
    key beside the field; on a18f1ea an internal OverflowError."""
    path = tmp_path / "run.sh"
    path.write_text(
        "nemo llm pretrain -y --factory llama3_8b trainer.strategy.tensor_model_parallel_size=2 "
        f"{key}={BIG}\n"
    )
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and f"{path}: {key} ({field}): " in err, err
    assert "less than or equal to 1000000000000" in err and str(BIG) not in err
