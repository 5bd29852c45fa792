"""Each (rank, pool)'s layer cap in the pooled search (`pool_host.layer_caps`, what
`pools.problem` gives the split solver as `most_layers`) is the largest layer count whose host
bytes fit the pool's host, with the offloaded optimizer's pinned blocks rounded up to powers of
two and the checkpoint staging counted (`host_memory`): neither a line through two samples
(which the round-up, neither linear nor monotone in the layers, leaves above or below it) nor
blind to the staging (`pool_host.pins_host`).

Oracle: brute force. For every rank r, every count y and every start s of its layers (the ranks
before it holding s layers, those after it the rest, each at least one), the exact model's host
bytes of rank r (`host_memory.fixed_bytes` of the split applied, `pools.apply`) against the
pool's usable bytes (`host_memory.usable_bytes` of its GPU's share); the cap is the largest y
that fits at some s (0: none). And the search's plans, each judged by `host_memory.estimate`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pool_problems import pool_job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job, parse_plan
from planner.model import host_memory
from planner.model import pools as model_pools
from planner.search import pool_search, pools
from planner.search.solver import PoolSplit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pools-llama3.1-70b-h100-a100.toml"
HEAD = 3.0


def _room(job: Job, k: int) -> float:
    return host_memory.usable_bytes(host_memory.share_bytes(model_pools.pool_job(job, k))[0])


def brute_caps(job: Job, lay: Layout) -> tuple[tuple[int, ...], ...]:
    """The largest count each rank holds within each pool's host (the module docstring)."""
    L, pp, n = job.arch.num_layers, lay.pp, len(job.pools)
    rows = []
    for r in range(pp):
        row = []
        for k in range(n):
            other = (k + 1) % n
            most = 0
            for y in range(1, L - pp + 2):
                for s in range(r, L - (pp - 1 - r) - y + 1):
                    before = [1] * (r - 1) + [s - (r - 1)] if r else []
                    rest = L - s - y
                    after = [rest - (pp - 2 - r)] + [1] * (pp - 2 - r) if r < pp - 1 else []
                    ys = (*before, y, *after)
                    ks = tuple(k if q == r else other for q in range(pp))
                    pj, sl = pools.apply(job, lay, PoolSplit(ys, ks, 0, 0, ()))
                    if host_memory.fixed_bytes(pj, sl, (r,)) <= _room(job, k):
                        most = max(most, y)
                        break
            row.append(most)
        rows.append(tuple(row))
    return tuple(rows)


def _h100_job(gib_per_node: float, offload: float = 1.0) -> Any:
    """The example's Llama 3.1 70B on 64 H100 + 64 A100 (`examples/`), its h100 pool's nodes
    `gib_per_node` of host memory, `offload` of the optimizer on the host."""
    doc = tomllib.loads(EXAMPLE.read_text())
    doc["training"]["optimizer_offload_fraction"] = offload
    for pool in doc["cluster"]["pools"]:
        if pool["name"] == "h100":
            pool["host_memory_gib_per_node"] = gib_per_node
    return parse_plan(doc).job


def _host(job: Job, pool: str, gib_per_node: float) -> Job:
    """`job` with pool `pool`'s nodes holding `gib_per_node` of host memory."""
    doc: dict[str, Any] = {
        "model": {"name": job.arch.name},
        "cluster": {
            "pools": [
                {"name": p.name, "gpu": p.cluster.gpu.name, "num_gpus": p.cluster.num_gpus}
                | ({"host_memory_gib_per_node": gib_per_node} if p.name == pool else {})
                for p in job.pools
            ]
        },
        "training": {
            "seq_length": job.seq_length,
            "global_batch_size": job.global_batch_size,
            "optimizer_offload_fraction": 1.0,
        },
    }
    return parse_plan(doc).job


def test_the_caps_are_the_largest_counts_that_fit_one_kind_of_layer() -> None:
    """Llama 3.1 70B, its h100 pool's host 0.5 GiB usable a GPU (260 GiB nodes of 8), the whole
    optimizer offloaded: every two-stage layout (each count of a rank is one split)."""
    job = _h100_job(260)
    want = ("tp8 pp2 dp128 sp tpov mbs1 zero1", "tp8 pp2 dp64 cp2 sp tpov mbs1 zero1")
    lays = [q for q in pool_search.layouts(job) if q.describe().startswith(want)]
    assert len(lays) == 2
    for lay in lays:
        caps = pools.problem(job, lay, HEAD, False).most_layers
        assert caps == brute_caps(job, lay), lay.describe()
        assert min(caps[r][0] for r in range(2)) > 0  # the small host holds some layers


def test_the_caps_are_the_largest_counts_that_fit_mixed_layers() -> None:
    """DeepSeek-V2-Lite (its first layer dense, the rest MoE) on 16 A100 + 16 H100, the H100
    nodes 272 GiB (2 GiB usable a GPU): the first layout of pp 2 and of pp 4, each without and
    with expert parallelism, every start of a rank's layers tried (the kinds differ by place)."""
    job = _host(pool_job("deepseek-v2-lite"), "h", 272.0)
    assert len(set(job.arch.layer_kinds)) > 1
    lays = pool_search.layouts(job)
    picked = [
        next(q for q in lays if q.pp == pp and (q.ep > 1) == moe) for pp in (2, 4) for moe in (0, 1)
    ]
    for lay in picked:
        caps = pools.problem(job, lay, HEAD, False).most_layers
        assert caps == brute_caps(job, lay), lay.describe()
        assert any(0 < row[1] < job.arch.num_layers - lay.pp + 1 for row in caps)  # h binds


def test_the_staging_alone_caps_the_layers() -> None:
    """Nothing offloaded, the h100 pool's host 0.5 GiB usable a GPU: each save stages a GPU's
    share of the checkpoint in pinned memory (`host_checkpoint`), which caps the h100 stages'
    layers; every plan returned fits both hosts, and the caps are the brute force's."""
    job = _h100_job(260, offload=0.0)
    res = pool_search.search(job, HEAD, top=3)
    assert res.plans
    for p in res.plans:
        assert host_memory.estimate(p.job, p.layout).fits
    lay = next(q for q in pool_search.layouts(job) if q.pp == 2 and q.tp == 8)
    caps = pools.problem(job, lay, HEAD, False).most_layers
    assert caps == brute_caps(job, lay) and caps[0][0] < job.arch.num_layers - 1
