"""Bad input named as the user wrote it (the fuzz pass of the QA's report): a torchtitan TOML's
keys, a Megatron-LM line's flags and a NeMo line's keys beside the plan field they were read
into; a table given where a value goes quoted; a torchtitan TOML's 400-digit degrees cut short.

Oracles: the contract (exit 2, the file, the field as written, the value); Megatron-LM's own
argparse flags (megatron_flags.txt, read from arguments.py at d98e8a64) for the flag table;
torchtitan's job_config.py field names at e347b1e5 for the TOML keys.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run
from plan_text import write

from planner.inputs.arch import ModelArch
from planner.inputs.errors import is_section
from planner.inputs.megatron_fields import KEY_OF_FIELD, flag_of_field
from planner.inputs.megatron_flags import megatron_flags
from planner.inputs.nemo_keys import KNOWN
from planner.inputs.plan_parallel import ParallelSection
from planner.inputs.plan_sections import PlanFile, TrainingSection
from planner.inputs.torchtitan import TorchtitanSection
from planner.inputs.torchtitan_keys import KEY_OF_FIELD as TOML_KEY_OF_FIELD

TITAN = """# planner-gpu: h100-sxm-80gb
[model]
name = "{model}"
flavor = "{flavor}"
{converters}
[training]
local_batch_size = 4
global_batch_size = 128
seq_len = 4096

[parallelism]
data_parallel_shard_degree = {shard}
pipeline_parallel_degree = {pp}
{parallelism}
[activation_checkpoint]
mode = "full"
{extra}"""
FLOAT8 = 'converters = ["quantize.linear.float8"]'


def _titan(tmp_path: Path, capsys: pytest.CaptureFixture[str], **kw: str) -> tuple[int, str]:
    fields = {"model": "llama3", "flavor": "8B", "converters": "", "shard": "8", "pp": "1"}
    fields.update({"parallelism": "", "extra": "", **kw})
    path = tmp_path / "job.toml"
    path.write_text(TITAN.format(**fields))
    code, _, err = run(["check", "--torchtitan-config", str(path)], capsys)
    return code, err.replace(str(path), "FILE")


ZBV_SIX = ", ".join(f'["layers.{i}"]' for i in range(6))


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        # the QA's table: each named the plan field alone on a18f1ea
        (
            {"pp": "2", "shard": "4", "parallelism": 'pipeline_parallel_schedule = "bogus"'},
            "FILE: parallelism.pipeline_parallel_schedule (torchtitan.pipeline_schedule): Input "
            'should be "1F1B"',
        ),
        (
            {"converters": FLOAT8, "extra": '[quantize.linear.float8]\nrecipe_name = "bogus"\n'},
            "FILE: quantize.linear.float8.recipe_name (training.fp8_recipe): ",
        ),
        (
            {
                "converters": FLOAT8,
                "extra": "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = 1\n",
            },
            "FILE: quantize.linear.float8.enable_fsdp_float8_all_gather "
            "(torchtitan.float8_all_gather): Input should be a valid boolean (got 1)",
        ),
        (  # six stages at pp 2 under ZBV: vpp 3, which the V-shaped schedule refuses
            {
                "pp": "2",
                "shard": "4",
                "parallelism": 'pipeline_parallel_schedule = "ZBVZeroBubble"\n'
                f"module_fqns_per_model_part = [{ZBV_SIX}]",
            },
            "FILE: parallelism.module_fqns_per_model_part (parallel.vpp): vpp 3: ",
        ),
        (  # ep 3 does not divide the expert mesh of 16 (a rule of the plan's, after reading)
            {
                "model": "qwen3",
                "flavor": "30B-A3B",
                "shard": "16",
                "parallelism": "expert_parallel_degree = 3",
            },
            "FILE: parallelism.expert_parallel_degree (parallel.ep): expert_parallel_degree x "
            "etp (3 x 1) must divide",
        ),
        # a 400-digit degree: refused as at most a cluster's GPUs, the value cut short (on
        # a18f1ea quoted whole inside the seq_len or batch rule it broke)
        (
            {"parallelism": f"tensor_parallel_degree = {10**400}"},
            "FILE: parallelism.tensor_parallel_degree: at most 16,777,216 (got 100000000000... "
            "(401 characters))",
        ),
        (
            {"shard": str(10**400)},
            "FILE: parallelism.data_parallel_shard_degree: at most 16,777,216 (got ",
        ),
    ],
)
def test_a_torchtitan_toml_error_names_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tables: dict[str, str], needle: str
) -> None:
    code, err = _titan(tmp_path, capsys, **tables)
    assert code == 2 and needle in err, err
    assert str(10**400) not in err


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (
            "--recompute-granularity full --recompute-method block --recompute-num-layers 0",
            "--recompute-num-layers (parallel.recompute_num_layers): Input should be greater "
            "than 0 (got 0)",
        ),
        (
            "--optimizer muon --muon-num-ns-steps 1001",  # plan_counts.MAX_NS_STEPS: 1000
            "--muon-num-ns-steps (training.muon_ns_steps): Input should be less than or equal "
            "to 1000 (got 1001)",
        ),
    ],
)
def test_a_megatron_line_error_names_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, needle: str
) -> None:
    path = tmp_path / "train.sh"
    path.write_text(
        "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
        "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
        f"--micro-batch-size 1 --global-batch-size 8 --bf16 {line}\n"
    )
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb"], capsys)
    assert code == 2 and f"{path}: {needle}" in err, err


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (
            "model.config.recompute_granularity=selective model.config.recompute_method=block",
            'model.config.recompute_method (parallel.recompute_method): "block" needs recompute',
        ),
        (
            "model.config.activation_offload_fraction=1.5",
            "model.config.activation_offload_fraction (parallel.activation_offload_fraction): "
            "Input should be less than or equal to 1 (got 1.5)",
        ),
        (  # a model field: ModelArch.ffn_hidden_size is a PositiveInt (arch_fields.py)
            "model.config.ffn_hidden_size=-5",
            "model.config.ffn_hidden_size (model.ffn_hidden_size): Input should be greater than 0",
        ),
    ],
)
def test_a_nemo_line_error_names_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: str, needle: str
) -> None:
    path = tmp_path / "run.sh"
    path.write_text(
        "nemo llm pretrain -y --factory llama3_8b trainer.strategy.tensor_model_parallel_size=2 "
        f"{overrides}\n"
    )
    argv = ["check", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and f"{path}: {needle}" in err, err


def test_the_name_tables_hold_real_flags_keys_and_fields() -> None:
    """Every flag of `flag_of_field` is one of Megatron-LM's (its argparse, megatron_flags.txt),
    every key of the NeMo table one planner reads, and every field a plan field (the model's
    fields of [model]); the flag table covers the fields the QA's messages named."""
    flags = megatron_flags()
    sections = {"training": TrainingSection, "parallel": ParallelSection}
    sections["torchtitan"] = TorchtitanSection
    fields = {f"{s}.{f}" for s, model in sections.items() for f in model.model_fields}
    flag_of = flag_of_field()
    for field, flag in flag_of.items():
        assert flag in flags, (field, flag)
        assert field.startswith("model.") or field in fields, field
    for field, key in KEY_OF_FIELD.items():
        model_field = field.startswith("model.") and field[6:] in ModelArch.model_fields
        assert key in KNOWN and (model_field or field in fields), (field, key)
    for field in TOML_KEY_OF_FIELD:
        assert field in fields, field
    assert len(flag_of) > 60  # 9 on a18f1ea (megatron_line.FLAG_OF_FIELD)
    for field in ("training.muon_ns_steps", "training.weight_hash_interval"):
        assert field in flag_of


def test_a_table_given_for_a_value_is_quoted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loss_fusion = {}` (a switch given a table) says what it got (on a18f1ea nothing); a
    table where a section's own rule fails is not reprinted."""
    plan = '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
    training = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
    path = write(tmp_path, plan + training + "loss_fusion = {}\n[parallel]\ntp = { a = [1] }\n")
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2
    assert "training.loss_fusion: Input should be a valid boolean (got {})" in err
    assert "parallel.tp: Input should be a valid integer (got { a = [1] })" in err
    path = write(tmp_path, plan.replace("8\n", "8\npower_limit_w = 900.0\n") + training)
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2 and "above h100-sxm-80gb's TDP" in err and "(got" not in err


def test_is_section() -> None:
    """The tables of the plan file: the file, its sections, a pool; not a leaf field."""
    assert is_section(PlanFile, ())
    assert is_section(PlanFile, ("training",))
    assert is_section(PlanFile, ("cluster", "pools", 0))
    assert is_section(PlanFile, ("model",))  # a free table
    assert not is_section(PlanFile, ("training", "loss_fusion"))
    assert not is_section(PlanFile, ("parallel", "tp"))
    assert not is_section(TrainingSection, ("vision_encoder", 1))
