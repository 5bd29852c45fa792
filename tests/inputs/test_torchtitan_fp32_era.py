"""torchtitan e347b1e5 (the TOML era) trains tp or pp without FSDP in fp32: no fully_shard (llama3
and qwen3 apply it only where fsdp_enabled, dp_shard > 1 or cp > 1: models/llama3/infra/
parallelize.py:125, distributed/parallel_dims.py:334-335) and no autocast beside tp or pp
(distributed/utils.py:251-256 maybe_enable_amp: "Mixed precision training with TP or PP is only
supported when FSDP/HSDP/CP is enabled"). planner models bf16 FSDP2 (b5bcd76c, whose
parallelize installs the policy whatever the degrees), so such a TOML exits 2 naming the field
and the line, and the TOML launch target refuses such a plan (the module target writes it).

Oracle: the e347b1e5 source lines above, by hand per case. Each refusal read (exit 0) or was
written before the fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.emit.launch import launch
from planner.inputs import torchtitan_config
from planner.inputs.errors import InputError


def _toml(tmp_path: Path, parallelism: str, model: str = "llama3", flavor: str = "8B") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(
        f'[model]\nname = "{model}"\nflavor = "{flavor}"\n'
        "[training]\nlocal_batch_size = 8\nseq_len = 8192\n"
        f'[parallelism]\n{parallelism}[activation_checkpoint]\nmode = "full"\n'
    )
    return path


def _read(path: Path, gpus: int) -> object:
    return torchtitan_config.load(path, "h100-sxm-80gb", gpus)


@pytest.mark.parametrize(
    ("parallelism", "gpus"),
    [
        ("data_parallel_shard_degree = 1\ntensor_parallel_degree = 8\n", 8),
        ("tensor_parallel_degree = 8\n", 8),  # shard -1: the GPUs tp leaves, 1
        ("data_parallel_shard_degree = 1\npipeline_parallel_degree = 2\n", 2),
    ],
)
def test_tp_or_pp_without_fsdp_exits_2_naming_the_field(
    tmp_path: Path, parallelism: str, gpus: int
) -> None:
    with pytest.raises(InputError) as info:
        _read(_toml(tmp_path, parallelism), gpus)
    msg = str(info.value)
    assert "parallelism.data_parallel_shard_degree: 1:" in msg
    assert "distributed/utils.py:251-256" in msg and "fp32" in msg


@pytest.mark.parametrize(
    ("parallelism", "gpus", "model", "flavor"),
    [
        ("data_parallel_shard_degree = 2\ntensor_parallel_degree = 8\n", 16, "llama3", "8B"),
        ("context_parallel_degree = 2\ntensor_parallel_degree = 8\n", 16, "llama3", "8B"),
        ("data_parallel_shard_degree = 1\n", 1, "llama3", "8B"),  # autocast: no tp, no pp
        # gpt_oss/infra/parallelize.py:125: fully_shard with expert parallelism alone too
        (
            "data_parallel_shard_degree = 1\ntensor_parallel_degree = 8\n"
            "expert_parallel_degree = 8\n",
            8,
            "gpt_oss",
            "20b",
        ),
    ],
)
def test_with_fsdp_or_without_tp_and_pp_it_reads(
    tmp_path: Path, parallelism: str, gpus: int, model: str, flavor: str
) -> None:
    _read(_toml(tmp_path, parallelism, model, flavor), gpus)


def test_the_toml_target_refuses_such_a_plan_and_the_module_target_writes_it(
    tmp_path: Path,
) -> None:
    text = plan_text(
        model='[model]\nname = "llama3.1-8b"\n',
        training="[training]\nframework = 'torchtitan'\nseq_length = 8192\n"
        "global_batch_size = 32\n",
        parallel="[parallel]\ntp = 8\nsequence_parallel = true\nzero_stage = 0\n",
    )
    path = write(tmp_path, text)
    words = "parallel.dp: 1: with cp 1 beside tp 8 and pp 1 torchtitan e347b1e5 applies no FSDP"
    with pytest.raises(InputError, match=rf"{re.escape(words)}.*fp32.*torchtitan-module"):
        launch(path, "torchtitan")
    assert "tensor_parallel_degree=8" in launch(path, "torchtitan-module").text.replace(" ", "")
