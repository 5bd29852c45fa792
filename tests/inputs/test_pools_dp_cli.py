"""A plan whose data-parallel replicas span the pools (issue 25) through the plan file, check,
explain, suggest and launch.

Oracles: the plan-file contract (a field written is read back the same; bad input exits 2 naming
the field), Megatron-LM's rank order tp-cp-ep-dp-pp with one distributed-optimizer instance per
pool (instance k = data-parallel ranks [k dp / P, (k + 1) dp / P) of every stage, worked by hand
below), torchrun's global rank = node_rank x nproc + local_rank, and bash / shellcheck."""

from __future__ import annotations

import json
import subprocess
import tomllib
from pathlib import Path

import pytest
from cli_run import run
from shell_check import check_script

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan
from planner.search.rules import check_plan

TEXT = """[model]
name = "llama3.1-8b"
[cluster]
[[cluster.pools]]
name = "east"
gpu = "h100-sxm-80gb"
num_gpus = 16
[[cluster.pools]]
name = "west"
gpu = "h100-sxm-80gb"
num_gpus = 16
[cluster.between_pools]
bandwidth_gb_per_s_per_gpu = 50.0
latency_us = 5.0
allow_data_parallel = true
[training]
seq_length = 4096
global_batch_size = 64
[parallel]
# stages of tp 2 x dp 8 = 16 GPUs; each pool holds 4 of the 8 replicas: 8 GPUs of each stage
tp = 2
pp = 2
dp_pools = 2
"""


def plan_file(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


def test_round_trip(tmp_path: Path) -> None:
    plan = check_plan(parse_plan(tomllib.loads(TEXT)))
    lay = plan.require_layout()
    assert (lay.dp, lay.dp_pools, plan.job.pools_data_parallel) == (8, 2, True)
    text = plan_writer.render(plan.job, lay, {"name": "llama3.1-8b"}, ["t"])
    assert "allow_data_parallel = true" in text and "dp_pools = 2" in text
    back = load_plan(plan_file(tmp_path, text))
    assert back.layout == lay and back.job.pools_data_parallel


def test_bad_input_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="allow_data_parallel"):
        load_plan(plan_file(tmp_path, TEXT.replace("= true", "= 1")))
    with pytest.raises(InputError, match="allow_data_parallel = true"):
        check_plan(load_plan(plan_file(tmp_path, TEXT.replace("allow_data_parallel = true", ""))))


def test_check_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(plan_file(tmp_path))
    code, out, _ = run(["check", path], capsys)
    assert code == 0 and "dp-over-2-pools" in out
    code, out, _ = run(["explain", path], capsys)
    words = " ".join(out.split())  # as printed, wrapped at the terminal's width
    assert code == 0 and "only the gradient all-reduce between the instances crosses" in words
    code, out, _ = run(["explain", path, "--json"], capsys)
    link = json.loads(out)["performance"]["between_pools"]
    assert link["crossing"] == "data-parallel gradient all-reduce"
    assert link["data_parallel_on_link_s"] > 0 and 0 <= link["share"] < 1


def test_suggest_says_which_kind_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = TEXT.split("[parallel]")[0]
    path = str(plan_file(tmp_path, job))
    code, out, _ = run(["suggest", path, "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["across_pools"]["faster"] in ("pipeline", "data")
    code, out, _ = run(["suggest", path], capsys)
    words = " ".join(out.split())
    assert "across pools:" in words and " wins (" in words
    # without the permission: the output as before (no comparison, no dp_pools anywhere)
    off = str(plan_file(tmp_path, job.replace("allow_data_parallel = true", "")))
    code, out, _ = run(["suggest", off, "--json"], capsys)
    assert "across_pools" not in out and "dp_pools" not in out


def node_ranks(script: str, nodes: int) -> list[int]:
    """NODE_RANK of each NODE_INDEX, as bash computes it from the script's line."""
    line = next(x for x in script.splitlines() if x.startswith("NODE_RANK="))
    out = []
    for i in range(nodes):
        done = subprocess.run(
            ["bash", "-c", f"NODE_INDEX={i}; {line}; echo $NODE_RANK"],
            capture_output=True,
            text=True,
            check=True,
        )
        out.append(int(done.stdout))
    return out


def test_launch_places_each_pools_replicas(tmp_path: Path) -> None:
    path = plan_file(tmp_path)
    launch.launch(path, "torchrun", tmp_path / "t")
    east = (tmp_path / "t" / "train-0-east.sh").read_text()
    west = (tmp_path / "t" / "train-1-west.sh").read_text()
    # by hand: s = tp x dp = 16 GPUs a stage, 2 nodes; stage r = nodes 2r, 2r + 1; instance
    # (pool) k = dp ranks [4k, 4k + 4) = global ranks [16 r + 8 k, 16 r + 8 k + 8) = node 2r + k
    assert node_ranks(east, 2) == [0, 2]
    assert node_ranks(west, 2) == [1, 3]
    # the header says so: one node a replica of a stage (it printed "r x 2 + 0 .. r x 2 + 0")
    assert "node rank r x 2 + 0 for stage r" in east and "node rank r x 2 + 1 for stage r" in east
    assert "--num-distributed-optimizer-instances 2" in east
    for name in ("train-0-east.sh", "train-1-west.sh"):
        check_script(tmp_path / "t" / name)
    launch.launch(path, "slurm", tmp_path / "s")
    sbatch = (tmp_path / "s" / "train.sbatch").read_text()
    expr = sbatch.split('--node-rank "$(( ')[1].split(" ))")[0]
    # one srun step numbers the nodes pool after pool: SLURM_PROCID 0, 1 east, 2, 3 west
    ranks = [eval(expr.replace("SLURM_PROCID", str(p)).replace("/", "//")) for p in range(4)]
    assert ranks == [0, 2, 1, 3]
    check_script(tmp_path / "s" / "train.sbatch")
