"""`#SBATCH --segment` (planner.emit.slurm.segment_nodes): a plan priced on part of each
multi-node NVLink domain (`ClusterSpec.domain_used`) asks Slurm for that placement, in nodes of
one block per segment; 8-GPU-node plans and plans on whole domains write none.

Oracle: hand arithmetic from the catalog (hardware_catalog/gpus/gb200-nvl72.toml: 4 GPUs a
node, 72-GPU racks, 64 used of each by a multi-rack job: NVIDIA's MLPerf SEGMENT=16,
mlcommons/training_results_v5.1 @4da2d1cd config_GB300_128x4x1xtp2pp1cp4_8b.sh:23-25)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from paths import PLANS
from shell_check import check_script

from planner.emit import slurm, torchtitan_run
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan, load_plan, parse_plan


def _plan(num_gpus: int, **cluster: Any) -> Plan:
    return parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": "gb200-nvl72", "num_gpus": num_gpus, **cluster},
            "training": {"seq_length": 8192, "global_batch_size": 128, "precision": "bf16"},
            "parallel": {"tp": 4, "pp": 1, "micro_batch_size": 1, "zero_stage": 1},
        },
        Path("seg.toml"),
    )


def _segment(text: str) -> list[str]:
    return re.findall(r"^#SBATCH --segment=(\S+)$", text, flags=re.M)


@pytest.mark.parametrize(
    ("num_gpus", "cluster", "want"),
    [
        (128, {}, ["16"]),  # the default 64 of each rack: 64 / 4 = 16 nodes
        (128, {"gpus_per_domain_used": 16}, ["4"]),  # 16 / 4
        (32, {"gpus_per_domain_used": 64}, ["8"]),  # the job within one segment: 32 / 4 nodes
        (144, {}, []),  # 144 is no multiple of 64: whole racks, default 72 = the span
        (72, {}, []),  # one rack, all of it
        (128, {"gpus_per_domain_used": 72}, []),  # whole racks asked for
    ],
)
def test_segment_is_the_used_share_in_nodes(
    num_gpus: int, cluster: dict[str, int], want: list[str], tmp_path: Path
) -> None:
    plan = _plan(num_gpus, **cluster)
    text = slurm.render(plan, "seg")
    assert _segment(text) == want
    assert _segment(torchtitan_run.render_slurm(plan, "seg")) == want
    script = tmp_path / "train.sbatch"
    script.write_text(text)
    check_script(script)


def test_8_gpu_nodes_write_no_segment() -> None:
    for path in sorted(PLANS.glob("launch-*.toml")):  # the golden plans: H100 / H800 nodes
        assert _segment(slurm.render(load_plan(path), "g")) == []


@pytest.mark.parametrize(
    ("num_gpus", "used", "what"),
    [
        (96, 64, "the job's 24 nodes are not whole segments of 16"),  # 24 % 16
    ],
)
def test_no_segment_places_it_exit_2_naming_field_and_value(
    num_gpus: int, used: int, what: str
) -> None:
    with pytest.raises(InputError, match=r"seg\.toml: cluster\.gpus_per_domain_used: ") as e:
        slurm.render(_plan(num_gpus, gpus_per_domain_used=used), "seg")
    assert what in str(e.value)


def test_each_hetjob_component_writes_its_pools_segment() -> None:
    """Two GB200 pools of 128 GPUs, pipeline stage 0 on each: the first at the catalog's 64 of
    each rack (16 nodes), the second at 16 (4 nodes)."""
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {
                "pools": [
                    {"name": "a", "gpu": "gb200-nvl72", "num_gpus": 128},
                    {
                        "name": "b",
                        "gpu": "gb200-nvl72",
                        "num_gpus": 128,
                        "gpus_per_domain_used": 16,
                    },
                ],
                "between_pools": {"bandwidth_gb_per_s_per_gpu": 25.0, "latency_us": 10.0},
            },
            "training": {"seq_length": 8192, "global_batch_size": 128, "precision": "bf16"},
            "parallel": {"tp": 4, "pp": 2, "micro_batch_size": 1, "zero_stage": 1},
        },
        Path("pools.toml"),
    )
    text = slurm.render(plan, "het")
    components = text.split("#SBATCH hetjob\n")
    assert [_segment(c) for c in components] == [["16"], ["4"]]


@pytest.mark.parametrize(
    ("gpu", "num_gpus", "used", "what"),
    [
        # 18 GPUs of a GB200 rack are 4.5 four-GPU trays: no Slurm segment of whole nodes
        ("gb200-nvl72", 128, 18, "must be whole nodes of gpus_per_node (4)"),
        # an H100 domain is its node: 4 of its 8 would be priced, all 8 launched (QA)
        ("h100-sxm-80gb", 16, 4, "an NVLink domain of 8 GPUs is one node here"),
    ],
)
def test_a_share_no_launch_places_exits_2_at_input(
    gpu: str, num_gpus: int, used: int, what: str
) -> None:
    with pytest.raises(InputError, match=r"seg\.toml: cluster: gpus_per_domain_used") as e:
        parse_plan(
            {
                "model": {"name": "llama3.1-8b"},
                "cluster": {"gpu": gpu, "num_gpus": num_gpus, "gpus_per_domain_used": used},
                "training": {"seq_length": 8192, "global_batch_size": 128},
                "parallel": {"tp": 4},
            },
            Path("seg.toml"),
        )
    assert what in str(e.value)
