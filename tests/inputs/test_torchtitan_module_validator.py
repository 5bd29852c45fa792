"""A torchtitan Python configuration's validator read into the plan, as a TOML's `[validation]`
is (planner.inputs.torchtitan_batches).

Oracles: pytorch/torchtitan b5bcd76c components/validate.py:81 (Validator.Config.enable, default
False), :212 (validate under torch.no_grad), :230-300 (num_pp_microbatches batches a pipelined
eval step); trainer.py:558 and :593-617 (the validator built with seq_len =
training.max_context_length and num_tokens_per_batch = num_tokens_per_microbatch_per_dp_rank);
llama3/config_registry.py:267-302 (llama3_70b: 8 x 8192 tokens per micro-batch per DP rank,
context 8192, tp 8, its Validator.Config(freq=500, steps=1200) without enable); validate.py:40-43
and :102-104 (Validator.Config's __post_init__ checks of freq and steps), trainer.py:113 (the
validator a Validator.Config). Hand arithmetic in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan
from planner.model import titan_validation

HEAD = (
    "from torchtitan.components.validate import Validator\n"
    "from torchtitan.config import ParallelismConfig\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b\n\n\n"
    "def job():\n"
    "    config = llama3_70b()\n"
)


def _load(tmp_path: Path, body: str) -> Plan:
    path = tmp_path / "job.py"
    path.write_text(HEAD + body + "    return config\n")
    return torchtitan_config.load(path, "h100-sxm-80gb", 64)


def test_the_baselines_validator_is_off(tmp_path: Path) -> None:
    # llama3_70b's Validator.Config(freq=500, steps=1200) leaves enable at False
    assert _load(tmp_path, "").job.titan.validation_batch == 0


def test_an_enabled_validator_runs_the_micro_batchs_tokens(tmp_path: Path) -> None:
    # enable set on the baseline's record, or a whole record: the validator's batch is the
    # training micro-batch's tokens, 8 x 8192 = 65,536 at a context of 8192 (trainer.py:558):
    # local_batch_size 8, seq_len 8192
    for body in (
        "    config.validator.enable = True\n",
        "    config.validator = Validator.Config(enable=True, freq=100)\n",
    ):
        plan = _load(tmp_path, body)
        titan = plan.job.titan
        assert (titan.validation_batch, titan.validation_seq_len) == (8, 8192), body
        lay = plan.require_layout()
        assert titan_validation.tokens(plan.job, lay) == 8 * 8192


def test_under_pipelining_one_eval_schedule_runs_every_micro_batch(tmp_path: Path) -> None:
    # pp 2 with 4 micro-batches of 8 x 8192 tokens (num_pp_microbatches 4): the eval step takes
    # 4 batches of 65,536 tokens (validate.py:250-262) through one schedule; the rank holds one
    # micro-batch's 65,536 tokens at a time: local_batch_size 8 x 4 = 32, over 4 micro-batches
    body = (
        "    config.parallelism = ParallelismConfig(tensor_parallel_degree=8, "
        "pipeline_parallel_degree=2, num_pp_microbatches=4)\n"
        "    config.training.disable_cuda_graphs = True\n"
        "    config.validator.enable = True\n"
    )
    plan = _load(tmp_path, body)
    assert plan.job.titan.validation_batch == 32
    assert titan_validation.tokens(plan.job, plan.require_layout()) == 8 * 8192


@pytest.mark.parametrize(
    "value",
    [
        "make_validator()",  # a helper's result: not read
        "helpers.validator(enable=True)",  # a call the reader does not know as Validator.Config
        "Trainer.Config(enable=True)",  # another class's record
        "3",
        "None",  # trainer.py:594 reads config.validator.enable: AttributeError on None
    ],
)
def test_a_validator_not_built_by_validator_config_exits_2(tmp_path: Path, value: str) -> None:
    # Trainer.Config's validator is a Validator.Config (trainer.py:113 at b5bcd76c); the reader
    # reads it as it reads the other sections it needs (SECTION_CLASSES), so anything else
    # names the line rather than reading the validator as on or off
    with pytest.raises(InputError, match=r"job\.py:\d+: config\.validator: planner reads "):
        _load(tmp_path, f"    config.validator = {value}\n")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        # BaseValidator.Config.__post_init__ raises on freq <= 0 (validate.py:40-43)
        ("    config.validator = Validator.Config(enable=True, freq=0)\n", r"freq: 0: .*:40-43"),
        ("    config.validator.enable = True\n    config.validator.freq = -3\n", r"freq: -3"),
        # Validator.Config.__post_init__ asserts steps > 0 or steps == -1 (validate.py:102-104)
        ("    config.validator = Validator.Config(steps=0)\n", r"steps: 0: .*:102-104"),
        ("    config.validator.steps = -2\n", r"steps: -2: .*\(or -1\)"),
        # freq is an int (validate.py:37): should_validate takes step % freq (:57)
        (
            "    config.validator.enable = True\n    config.validator.freq = 'x'\n",
            r"freq: expected int",
        ),
    ],
)
def test_a_validator_torchtitan_refuses_exits_2(tmp_path: Path, body: str, needle: str) -> None:
    with pytest.raises(InputError, match=r"config\.validator\." + needle):
        _load(tmp_path, body)


def test_the_validators_own_bounds_are_accepted(tmp_path: Path) -> None:
    # steps -1 (the default, validate.py:84) or positive, freq positive: no refusal, enabled
    for body in (
        "    config.validator = Validator.Config(enable=True, freq=1, steps=-1)\n",
        "    config.validator = Validator.Config(enable=True, freq=500, steps=1)\n",
    ):
        assert _load(tmp_path, body).job.titan.validation_batch == 8, body
