"""Plan-file text for the tests of planner.inputs.plan: the four tables, written into tmp_path so
the file name in an error message is known, and the error a bad plan raises where a command reads
it (the plan file, then Megatron-LM's rules on its layout)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from paths import REPO

from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan
from planner.search.rules import check_plan

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"
PLANS = REPO / "tests" / "data" / "plans"
HF = REPO / "tests" / "data" / "hf"

MODEL = '[model]\nname = "llama3.1-8b"\n'
CLUSTER = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
TRAINING = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
PARALLEL = "[parallel]\ntp = 1\npp = 1\n"


def write(tmp_path: Path, text: str, name: str = "plan.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def plan_text(
    model: str = MODEL, cluster: str = CLUSTER, training: str = TRAINING, parallel: str = PARALLEL
) -> str:
    return "\n".join([model, cluster, training, parallel])


def load_error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        check_plan(load_plan(path))
    return str(info.value)
