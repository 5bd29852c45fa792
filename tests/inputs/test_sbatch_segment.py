"""`#SBATCH --segment` read back (planner.inputs.sbatch): `check --megatron-args` on a Slurm
script sets `[cluster] gpus_per_domain_used` to the segment's nodes x the GPUs per node, so the
script `launch --target slurm` wrote (planner.emit.slurm) is checked as its plan was priced.

Oracle: the plan the script came from (round trip), and hand arithmetic (4 GPUs a GB200 node,
hardware_catalog/gpus/gb200-nvl72.toml; a 72-GPU rack)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.emit import slurm
from planner.inputs import megatron_args, sbatch
from planner.inputs.errors import InputError
from planner.inputs.plan import parse_plan

PLAN = {
    "model": {"name": "llama3.1-8b"},
    "training": {"seq_length": 8192, "global_batch_size": 128, "precision": "bf16"},
    "parallel": {"tp": 4, "pp": 1, "micro_batch_size": 1, "zero_stage": 1},
}


def _script(used: int | None) -> str:
    cluster = {"gpu": "gb200-nvl72", "num_gpus": 128}
    if used is not None:
        cluster["gpus_per_domain_used"] = used
    return slurm.render(parse_plan({**PLAN, "cluster": cluster}, Path("p.toml")), "rt")


@pytest.mark.parametrize(("used", "read"), [(16, 16), (32, 32), (None, 64)])
def test_round_trip(used: int | None, read: int) -> None:
    reading = megatron_args.read(_script(used), "gb200-nvl72", None, "train.sbatch")
    assert reading.doc["cluster"]["gpus_per_domain_used"] == read
    assert parse_plan(reading.doc).job.cluster.domain_used == read
    assert any(n.startswith("#SBATCH --segment=") for n in reading.notes)


def test_whole_racks_and_8_gpu_nodes_set_nothing() -> None:
    text = _script(72)  # whole racks: no --segment written
    assert (
        "gpus_per_domain_used" not in megatron_args.read(text, "gb200-nvl72", None).doc["cluster"]
    )
    # on H100 a node is the NVLink domain: a segment does not move a rank's domain
    h100 = "#!/bin/bash\n#SBATCH --nodes=4 --segment=2\n#SBATCH --gpus-per-node=8\n"
    assert sbatch.domain_used(h100, "h100-sxm-80gb", "x") is None


@pytest.mark.parametrize(
    ("text", "used"),
    [
        ("#!/bin/bash\n#SBATCH --segment 4\n", 16),  # --name value; the catalog's 4 per node
        ("#SBATCH --gres=gpu:gb200:4 --segment=2  # two trays\n", 8),
        ("#SBATCH --segment=2\n#SBATCH --segment=3\n", 12),  # the later one
        ("#SBATCH --nodes=2\necho hi\n#SBATCH --segment=9\n", None),  # after the first command
        ("#SBATCH --segment=2\n#SBATCH hetjob\n#SBATCH --segment=3\n", None),  # a hetjob
    ],
)
def test_directives(text: str, used: int | None) -> None:
    got = sbatch.domain_used(text, "gb200-nvl72", "x")
    assert (got and got[0]) == used


@pytest.mark.parametrize(
    ("line", "field", "value"),
    [
        ("--segment=0", "#SBATCH --segment", "'0'"),
        ("--segment=${SEGMENT}", "#SBATCH --segment", "'${SEGMENT}'"),
        ("--segment=4x", "#SBATCH --segment", "'4x'"),
        ("--segment=19", "#SBATCH --segment", "19 nodes of 4 GPUs (76 GPUs)"),  # > 72
        ("--segment=2 --gpus-per-node=four", "#SBATCH --gpus-per-node", "'four'"),
    ],
)
def test_bad_values_exit_2_naming_file_field_and_value(
    line: str, field: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InputError) as e:
        sbatch.domain_used(f"#SBATCH {line}\n", "gb200-nvl72", "train.sbatch")
    assert str(e.value).startswith(f"train.sbatch: {field}") and value in str(e.value)
    path = tmp_path / "train.sbatch"
    path.write_text(_script(16).replace("--segment=4", line))
    code, _, err = run(["check", "--megatron-args", str(path), "--gpu", "gb200-nvl72"], capsys)
    assert code == 2 and f"{path}: {field}" in err and value in err and "Traceback" not in err
