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


def titan_job(gbs: int = 32, num_gpus: int = 8) -> str:
    """Llama 3.1 8B on `num_gpus` H100 under torchtitan, 8k sequences, `gbs` a step: the job the
    torchtitan pipeline tests plan (their [parallel] and [torchtitan] tables follow it)."""
    cluster = CLUSTER.replace("num_gpus = 8", f"num_gpus = {num_gpus}")
    training = (
        f'[training]\nframework = "torchtitan"\nseq_length = 8192\nglobal_batch_size = {gbs}\n'
    )
    return MODEL + cluster + training


def titan_pp2_vpp2(schedule: str, recompute: str = "none", split: str = "") -> str:
    """`titan_job` at pp 2 x vpp 2 (4 stages) with FSDP2 (ZeRO 3) under torchtitan's pipeline
    `schedule`, `split` a [parallel] line setting the stages (none: torchtitan's own split)."""
    parallel = f'pp = 2\nvpp = 2\nzero_stage = 3\nrecompute = "{recompute}"\n{split}'
    schedule_line = f'[torchtitan]\npipeline_schedule = "{schedule}"\n'
    return titan_job() + "[parallel]\n" + parallel.rstrip("\n") + "\n" + schedule_line


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


def offload_plan(tmp_path: Path, host_gib_per_node: float, layers: int) -> Path:
    """Llama 3.1 8B on 8 H100 at 8192 tokens, tp 1 pp 1 ZeRO 1, `layers` layers' activations
    offloaded to the host (`cpu_offloading_num_layers`), on nodes of `host_gib_per_node` GiB
    (the host-memory tests: planner.model.host_memory, planner.search.host_advice)."""
    return write(
        tmp_path,
        f"""
        [model]
        name = "llama3.1-8b"
        [cluster]
        gpu = "h100-sxm-80gb"
        num_gpus = 8
        host_memory_gib_per_node = {host_gib_per_node}
        [training]
        seq_length = 8192
        global_batch_size = 64
        [parallel]
        tp = 1
        pp = 1
        micro_batch_size = 1
        zero_stage = 1
        cpu_offloading_num_layers = {layers}
        """,
    )
