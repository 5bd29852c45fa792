"""planner.emit.pools: launch files of a plan over pools (issue 25).

Oracles: Megatron-LM's rank order tp-cp-ep-dp-pp by hand (pipeline rank r holds global ranks
[r s, (r + 1) s), s = tp x cp x dp), torchrun's global rank = node_rank x nproc + local_rank, and
bash -n / shellcheck on every script."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from shell_check import check_script

from planner.emit import launch
from planner.inputs.plan import parse_plan

TEXT = """[model]
name = "llama3.1-8b"
[cluster]
[[cluster.pools]]
name = "fast one"
gpu = "h100-sxm-80gb"
num_gpus = 32
[[cluster.pools]]
name = "slow"
gpu = "a100-sxm-80gb"
num_gpus = 16
[cluster.between_pools]
bandwidth_gb_per_s_per_gpu = 6.25
latency_us = 10000
[training]
seq_length = 4096
global_batch_size = 64
[parallel]
# stages of tp 2 x dp 8 = 16 GPUs: 2 on the first pool, 1 on the second
tp = 2
pp = 3
pipeline_model_parallel_layout = "Et*12|t*12|t*8L"
"""
DOC: dict[str, Any] = tomllib.loads(TEXT)


def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "pools.toml"
    path.write_text(TEXT)
    return path


def test_hetjob_components_and_rank_order(tmp_path: Path) -> None:
    path = plan_file(tmp_path)
    launch.launch(path, "slurm", tmp_path / "out")
    text = (tmp_path / "out" / "train.sbatch").read_text()
    # one component per pool, in pipeline order: 32 / 8 = 4 nodes, then 16 / 8 = 2
    assert re.findall(r"#SBATCH --nodes=(\d+)", text) == ["4", "2"]
    assert text.count("#SBATCH hetjob") == 1
    assert "--het-group=0,1" in text and '--node-rank "$SLURM_PROCID"' in text
    # rank order by hand: s = 16, pool 1 holds pipeline ranks 0-1 = global ranks 0-31 = nodes
    # 0-3; pool 2 pipeline rank 2 = global ranks 32-47 = nodes 4-5
    assert "pipeline ranks 0-1, global ranks 0-31, node ranks 0-3" in text
    assert "pipeline ranks 2-2, global ranks 32-47, node ranks 4-5" in text
    assert "tp-cp-ep-dp-pp" in text
    assert "'Et*12|t*12|t*8L'" in text  # the per-stage layers, quoted
    check_script(tmp_path / "out" / "train.sbatch")


def test_torchrun_per_pool(tmp_path: Path) -> None:
    path = plan_file(tmp_path)
    launch.launch(path, "torchrun", tmp_path / "out")
    first = (tmp_path / "out" / "train-0-fast-one.sh").read_text()
    second = (tmp_path / "out" / "train-1-slow.sh").read_text()
    # node rank = the pool's first node rank + NODE_INDEX: 0 and 4
    assert "NODE_RANK=$(( 0 + ${NODE_INDEX:?" in first
    assert "NODE_RANK=$(( 4 + ${NODE_INDEX:?" in second
    for text in (first, second):
        assert "--nnodes 6" in text and "--nproc-per-node 8" in text
    for name in ("train-0-fast-one.sh", "train-1-slow.sh"):
        check_script(tmp_path / "out" / name)


def test_plan_round_trip(tmp_path: Path) -> None:
    """plan_writer writes the pools back; the plan reads the same."""
    from planner.inputs import plan_writer

    plan = parse_plan(DOC)
    assert plan.layout is not None
    text = plan_writer.render(plan.job, plan.layout, {"name": "llama3.1-8b"}, ["t"])
    again = tmp_path / "again.toml"
    again.write_text(text)
    from planner.inputs.plan import load_plan

    back = load_plan(again)
    assert back.job.pools == plan.job.pools
    assert back.job.between_pools == plan.job.between_pools
    assert back.layout == plan.layout


def test_targets_that_cannot_place_ranks_exit_2(tmp_path: Path) -> None:
    import pytest

    from planner.inputs.errors import InputError

    with pytest.raises(InputError, match=r"cluster.pools: --target k8s"):
        launch.launch(plan_file(tmp_path), "k8s")
