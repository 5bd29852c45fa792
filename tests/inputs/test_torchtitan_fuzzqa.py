"""torchtitan configurations the fuzz QA found read wrong (planner.inputs.torchtitan_config,
torchtitan_module, torchtitan_tables): a parallelism degree below 1 read as 1, a chain of
products in a Python configuration that never finished, and training.mixed_precision_reduce
never checked.

Oracles: torchtitan's ParallelDims, which asserts every degree but dp_shard >= 1
(torchtitan/distributed/parallel_dims.py:45-46 at e347b1e5, :175-176 at b5bcd76c: "Parallelism
degree should be >= 1, except for dp_shard"); its mixed_precision_reduce, Literal["float32"]
(config/job_config.py:290 at e347b1e5, config/configs.py:102 at b5bcd76c); and the contract
(bad input exits 2 naming the file, the field or line, and the value; never a hang)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.torchtitan_values import MAX_MAGNITUDE

GPU = "h100-sxm-80gb"
QWEN = 'name = "qwen3"\nflavor = "30B-A3B"\n'


def _toml(tmp_path: Path, parallelism: str, training: str = "", model: str = QWEN) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f"[model]\n{model}[training]\nlocal_batch_size = 8\nseq_len = 4096\n{training}"
        f"[parallelism]\ndata_parallel_shard_degree = 8\n{parallelism}"
    )
    return path


HEAD = (
    "from torchtitan.config import ParallelismConfig\n"
    "from torchtitan.models.llama3.config_registry import llama3_70b\n\n\n"
    "def job():\n"
    "    config = llama3_70b()\n"
)


def _module(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "job.py"
    path.write_text(HEAD + body + "    return config\n")
    return path


def _refused(path: Path, num_gpus: int | None = None) -> str:
    with pytest.raises(InputError) as info:
        torchtitan_config.load(path, GPU, num_gpus)
    return str(info.value)


@pytest.mark.parametrize("value", [0, -1, -8])
@pytest.mark.parametrize("key", ["expert_parallel_degree", "expert_tensor_parallel_degree"])
def test_toml_expert_degrees_below_one_exit_2_naming_the_field(
    tmp_path: Path, key: str, value: int
) -> None:
    extra = "expert_parallel_degree = 2\n" if key == "expert_tensor_parallel_degree" else ""
    path = _toml(tmp_path, f"{extra}{key} = {value}\n")
    msg = _refused(path)
    assert msg.startswith(f"{path}: parallelism.{key}: ") and f"(got {value})" in msg
    assert "parallel.etp" not in msg


@pytest.mark.parametrize("value", [0, -3])
def test_module_expert_degree_below_one_exit_2_naming_the_field(tmp_path: Path, value: int) -> None:
    path = _module(tmp_path, f"    config.parallelism.expert_parallel_degree = {value}\n")
    msg = _refused(path, 64)
    assert f"parallelism.expert_parallel_degree: must be at least 1 (got {value})" in msg
    assert str(path) in msg


def test_expert_degree_one_and_more_still_read(tmp_path: Path) -> None:
    plan = torchtitan_config.load(_toml(tmp_path, "expert_parallel_degree = 2\n"), GPU, None)
    assert plan.require_layout().ep == 2
    plan = torchtitan_config.load(_toml(tmp_path, "expert_parallel_degree = 1\n"), GPU, None)
    assert plan.require_layout().ep == 1


def _chain(steps: int) -> str:
    lines = ["    a0 = 3\n"]
    lines += [f"    a{i + 1} = a{i} * a{i}\n" for i in range(steps)]
    return "".join(lines) + f"    config.training.num_tokens_per_train_step = a{steps}\n"


def test_a_chain_of_products_exits_2_naming_its_line(tmp_path: Path) -> None:
    """3 squared 8 times is 3**256 (407 bits): the line whose product passes 2**63 (a6 = a5 *
    a5: 3**64, 102 bits) is named; before, the number was carried on (and 60 squarings hung)."""
    path = _module(tmp_path, _chain(8))
    msg = _refused(path, 64)
    # HEAD is 6 lines, `a0 = 3` the 7th, a{i+1} = a{i} * a{i} line 8 + i: a6 is line 13
    field = "config.training.num_tokens_per_train_step"
    assert msg.startswith(f"{path}:13: {field}: ") and "a5 * a5: a number of 102 bits" in msg
    assert "2**63" in msg


def test_a_chain_the_plan_does_not_need_is_read_past(tmp_path: Path) -> None:
    """As any value the plan does not need (the module's contract): not an error."""
    body = _chain(60).replace("    config.training.num_tokens_per_train_step = a60\n", "")
    assert torchtitan_config.load(_module(tmp_path, body), GPU, 64).require_layout().tp == 8


def test_the_fuzzers_chain_ends_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _module(tmp_path, _chain(60))
    code, _, err = run(
        ["check", "--torchtitan-config", str(path), "--gpu", GPU, "--num-gpus", "64"], capsys
    )
    assert code == 2 and f"{path}:13:" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "expr",
    [
        "9223372036854775807 + 2",
        "-9223372036854775807 - 2",
        "1e300 * 1e300",
        "4294967296 * 4294967296",
    ],
)
def test_every_operator_is_bounded(tmp_path: Path, expr: str) -> None:
    path = _module(tmp_path, f"    config.training.num_tokens_per_train_step = {expr}\n")
    assert _refused(path, 64).startswith(f"{path}:7: ")


def test_numbers_up_to_the_bound_compute(tmp_path: Path) -> None:
    assert MAX_MAGNITUDE == 2**62 * 2
    body = "    config.training.num_tokens_per_train_step = 64 * 8192 + 8192 - 8192\n"
    plan = torchtitan_config.load(_module(tmp_path, body), GPU, 64)
    assert plan.job.global_batch_size == 64


@pytest.mark.parametrize("value", ["[]", "nan", '"bfloat16"', "16"])
def test_toml_mixed_precision_reduce_other_than_float32_exits_2(tmp_path: Path, value: str) -> None:
    path = _toml(
        tmp_path, "", f"mixed_precision_reduce = {value}\n", 'name = "llama3"\nflavor = "8B"\n'
    )
    msg = _refused(path)
    assert msg.startswith(f"{path}: training.mixed_precision_reduce: ") and "float32" in msg


def test_mixed_precision_reduce_float32_reads(tmp_path: Path) -> None:
    path = _toml(
        tmp_path, "", 'mixed_precision_reduce = "float32"\n', 'name = "llama3"\nflavor = "8B"\n'
    )
    assert torchtitan_config.load(path, GPU, None).job.seq_length == 4096
    body = '    config.training.mixed_precision_reduce = "float32"\n'
    assert torchtitan_config.load(_module(tmp_path, body), GPU, 64).job.seq_length == 8192


def test_module_mixed_precision_reduce_other_than_float32_exits_2(tmp_path: Path) -> None:
    path = _module(tmp_path, '    config.training.mixed_precision_reduce = "bfloat16"\n')
    msg = _refused(path, 64)
    assert 'config.training.mixed_precision_reduce: "bfloat16"' in msg and "float32" in msg
