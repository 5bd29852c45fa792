"""A torchtitan job config TOML read as torchtitan e347b1e5 reads it
(planner.inputs.torchtitan_toml).

Oracles: torchtitan e347b1e5's own behaviour, from its source (planner/inputs/
torchtitan_job_config_schema.json: every field of config/job_config.py; config/manager.py refuses a
name a section lacks; components/quantization/float8.py registers its converter as
"quantize.linear.float8"; llama3/infra/parallelize.py turns async TP on only where tp > 1; the
compile of the loss alone leaves the model eager), and the same job spelt the way planner
already read right (the read plans equal, field by field)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan

BASE = """[model]
name = "llama3"
flavor = "8B"
{model}
[training]
local_batch_size = 1
seq_len = 8192
{training}
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = {tp}
{parallelism}
[activation_checkpoint]
mode = "selective"
selective_ac_option = {ac}
[compile]
enable = true
{compile}
"""


def read(tmp_path: Path, tp: int = 1, **tables: str) -> Plan:
    text = BASE.format(
        tp=tp,
        model=tables.get("model", ""),
        training=tables.get("training", ""),
        parallelism=tables.get("parallelism", ""),
        compile=tables.get("compile", ""),
        ac=tables.get("ac", '"op"'),
    )
    path = tmp_path / "job.toml"
    path.write_text(text + tables.get("extra", ""))
    return torchtitan_config.load(path, "h100-sxm-80gb", 8)


@pytest.mark.parametrize(
    ("tables", "needle"),
    [
        # an older torchtitan's names for the degree and the batch: read as tp 1 and batch 8
        ({"training": "tensor_parallel_degree = 8"}, "training.tensor_parallel_degree: torch"),
        ({"training": "batch_size = 2"}, "training.batch_size: torchtitan e347b1e5 has no such"),
        ({"training": "compile = true"}, "training.compile: torchtitan e347b1e5 has no such"),
        ({"parallelism": "tensor_parallel_degre = 8"}, "parallelism.tensor_parallel_degre"),
        ({"extra": "[float8]\nenable_fsdp_float8_all_gather = true\n"}, "float8: torchtitan"),
        ({"extra": "[quantize.dense.float8]\nemulate = true\n"}, "quantize.dense: torchtitan"),
        # fields of torchtitan's planner does not model, off their defaults
        ({"training": "enable_cpu_offload = true"}, "training.enable_cpu_offload: true: planner"),
        ({"training": 'dtype = "bfloat16"'}, 'training.dtype: "bfloat16": planner models'),
        ({"parallelism": "pipeline_parallel_layers_per_stage = 4"}, "(unset)"),
        ({"model": 'converters = ["quantize.linear.mx"]'}, "float8 linear converter"),
        # a fuzzer's internal errors: components not a list ('in' on an int), a superscript
        # digit that str.isdigit takes and int() does not
        ({"compile": "components = 3"}, "compile.components: expected a list of names"),
        ({"ac": '"²"'}, "selective_ac_option: expected 'op' or a non-negative integer"),
    ],
)
def test_what_torchtitan_refuses_or_planner_does_not_model_exits_2(
    tmp_path: Path, tables: dict[str, str], needle: str
) -> None:
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        read(tmp_path, **tables)


def test_logging_and_checkpoint_fields_of_older_torchtitans_are_let_be(tmp_path: Path) -> None:
    """`job.print_args` and `checkpoint.enable_checkpoint` (older torchtitans' names) change no
    memory or time: the job reads as without them."""
    extra = "[job]\nprint_args = false\n[checkpoint]\nenable_checkpoint = false\n"
    assert read(tmp_path, extra=extra) == read(tmp_path)


def test_the_float8_converter_goes_by_its_registered_name(tmp_path: Path) -> None:
    """e347b1e5 registers the float8 linear converter as "quantize.linear.float8" (it was read
    as bf16, 13% slower). "float8", its name before 8a2686c4, is no key of that registry
    (components/quantization/float8.py:238-239, mx.py:171-172 register the four names there):
    ModelConvertersContainer indexes the registry with it and raises KeyError
    (protocols/model_converter.py:61-63), so the job never trains: refused, naming the field,
    the value and the registered name (it was accepted as fp8 before)."""
    assert read(tmp_path, model='converters = ["quantize.linear.float8"]').job.precision == "fp8"
    needle = 'model.converters: "float8": torchtitan e347b1e5 registers no converter'
    with pytest.raises(InputError, match=needle) as raised:
        read(tmp_path, model='converters = ["float8"]')
    assert str(tmp_path / "job.toml") in str(raised.value)
    assert "write 'quantize.linear.float8'" in str(raised.value)


def test_compiling_the_loss_alone_leaves_the_model_eager(tmp_path: Path) -> None:
    loss_only = read(tmp_path, compile='components = ["loss"]')
    eager = read(tmp_path, compile="").job.titan.model_copy(update={"compile": False})
    assert loss_only.job.titan == eager


def test_async_tp_at_tp_1_is_what_torchtitan_ignores(tmp_path: Path) -> None:
    """Refused before ("needs tp > 1"), where torchtitan runs the job without it."""
    flag = "enable_async_tensor_parallel = true"
    assert read(tmp_path, parallelism=flag) == read(tmp_path)
    assert read(tmp_path, tp=2, parallelism=flag).job.titan.async_tp
