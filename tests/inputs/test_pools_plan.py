"""planner.inputs.pools: `[[cluster.pools]]` read, resolved and refused (issue 25).

Oracles: the contract (exit 2 naming file, field and value), the catalog's own figures, and hand
arithmetic in comments (GCD of pool sizes, stages a pool holds)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from planner.inputs.errors import InputError
from planner.inputs.plan import load_plan, parse_plan

EXAMPLES = Path(__file__).parents[2] / "examples"

DOC: dict[str, Any] = {
    "model": {"name": "llama3.1-70b"},
    "cluster": {
        "pools": [
            {"name": "east", "gpu": "h100-sxm-80gb", "num_gpus": 64},
            {"name": "west", "gpu": "a100-sxm-80gb", "num_gpus": 32, "memory_gib": 70.0},
        ],
        "between_pools": {"bandwidth_gb_per_s_per_gpu": 6.25, "latency_us": 10000},
    },
    "training": {"seq_length": 4096, "global_batch_size": 64},
}


def doc(**cluster: Any) -> dict[str, Any]:
    d = copy.deepcopy(DOC)
    d["cluster"].update(cluster)
    return d


def error(d: dict[str, Any]) -> str:
    with pytest.raises(InputError) as e:
        parse_plan(d, Path("p.toml"))
    return str(e.value)


def test_pools_resolve() -> None:
    job = parse_plan(doc()).job
    assert [p.name for p in job.pools] == ["east", "west"]
    assert [p.cluster.gpu.name for p in job.pools] == ["h100-sxm-80gb", "a100-sxm-80gb"]
    assert job.pools[1].cluster.memory_gib == 70.0  # the pool's override, not the catalog's 80
    assert job.cluster.num_gpus == 96  # 64 + 32: the whole job
    assert job.between_pools is not None and job.between_pools.latency_us == 10000


def test_plain_cluster_has_no_pools() -> None:
    d = copy.deepcopy(DOC)
    d["cluster"] = {"gpu": "h100-sxm-80gb", "num_gpus": 8}
    assert parse_plan(d).job.pools == ()


def test_between_pools_defaults_to_slowest_own_tier() -> None:
    d = doc()
    del d["cluster"]["between_pools"]
    job = parse_plan(d).job
    slowest = min(p.cluster.tiers[-1].bandwidth_gb_per_s_per_gpu for p in job.pools)
    assert job.between_pools is not None
    assert job.between_pools.bandwidth_gb_per_s_per_gpu == slowest


def test_unknown_gpu_exits_2_with_field_and_value() -> None:
    d = doc()
    d["cluster"]["pools"][1]["gpu"] = "h900-imaginary"
    msg = error(d)
    assert "p.toml" in msg and "cluster.pools[1].gpu" in msg and "h900-imaginary" in msg


def test_unreachable_pool_exits_2() -> None:
    """A pool of 64 GPUs whose outermost tier spans 32: half of it cannot reach the other half."""
    d = doc()
    d["cluster"]["pools"][0]["tiers"] = [
        {"name": "nvlink", "span_gpus": 8, "bandwidth_gb_per_s_per_gpu": 450.0},
        {"name": "ib", "span_gpus": 32, "bandwidth_gb_per_s_per_gpu": 50.0},
    ]
    msg = error(d)
    assert "cluster.pools[0].tiers" in msg and "32" in msg and "64" in msg


def test_pool_too_small_for_any_stage_exits_2() -> None:
    """Pools of 1,024 and 4 GPUs: a stage holds at most GCD(1024, 4) = 4 GPUs, so 1,028 GPUs
    need 257 stages, more than the 80 layers of Llama 3.1 70B."""
    d = doc()
    d["cluster"]["pools"][0]["num_gpus"] = 1024
    d["cluster"]["pools"][1]["num_gpus"] = 4
    msg = error(d)
    assert "cluster.pools[1].num_gpus" in msg and "4" in msg and "257" in msg


def test_duplicate_names_and_mixed_forms_exit_2() -> None:
    d = doc()
    d["cluster"]["pools"][1]["name"] = "east"
    assert "cluster.pools[1].name" in error(d)
    assert "cluster.gpu" in error(doc(gpu="h100-sxm-80gb"))


def test_a_pool_name_on_two_lines_and_two_vendors_exit_2() -> None:
    """A pool's name goes on the launch files' comment lines: a line break in it wrote a command
    of its own into the Slurm script (a fuzzer's `bw\necho ...`, run before the #SBATCH lines).
    An AMD pool beside an NVIDIA one was planned and launched as one job: one torch.distributed
    process group cannot hold NCCL and RCCL ranks."""
    d = doc()
    d["cluster"]["pools"][0]["name"] = "bw\necho INJECTED"
    assert "cluster.pools[0].name: 'bw\\necho INJECTED': no line breaks" in error(d)
    d = doc()
    d["cluster"]["pools"][1]["gpu"] = "mi300x-192gb"
    assert "cluster.pools[1].gpu: mi300x-192gb beside h100-sxm-80gb" in error(d)


def test_examples_load() -> None:
    for path in sorted(EXAMPLES.glob("pools-*.toml")):
        job = load_plan(path).job
        assert len(job.pools) == 2
