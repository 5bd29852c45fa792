"""Host memory on heterogeneous pools (planner.model.host_memory): each pool's stages against
that pool's own host share, the pool with the least headroom reported, and `check` exiting on it.

Oracle: hand arithmetic. The plan is examples/pools-llama3.1-70b-h100-a100-plan.toml (Llama 3.1
70B, tp 8 pp 2 dp 128 ZeRO 1, layout "Et*21|t*59L": rank 0 on the a100 pool, rank 1 on the h100
pool) with the optimizer wholly offloaded. Llama 3.1 70B (hidden 8192, FFN 28672, 64 query and 8
KV heads of 128, vocabulary 128256), per layer: attention 8192 x 8192 x 2 + 8192 x 1024 x 2 =
150,994,944, MLP 3 x 8192 x 28672 = 704,643,072, split over tp, and two norms of 8192 that every
TP rank holds whole (planner.model.params.replicated_params); the embedding and the untied output
layer, 129024 x 8192 each over tp: the vocabulary padded to a multiple of 128 x tp (Megatron-LM
d98e8a64 megatron/training/vocab_utils.py:58); the final norm's 8192 whole. Per GPU the offloaded
optimizer pins 16 B (host_memory.HOST_OPTIMIZER_BYTES) per parameter of its ZeRO-1 shard (/ dp
128):
- h100 stage, 59 layers + output: 6,443,425,792 / 128 x 16 = 805,428,224 B = 0.750 GiB;
- a100 stage, embedding + 21 layers: 2,378,514,432 / 128 x 16 = 297,314,304 B = 0.277 GiB;
and the round-up of the 8 of those 16 B that are pinned fp32 blocks (the master and the
gradient buffer, a block each a piece, planner.model.host_pinned; the moments are pageable):
each block is under twice its bytes, so each stage pins between 16 B and 24 B a parameter
(`_pinned`; the round-up by hand: tests/model/test_host_pinned.py).
A pool of 260 GiB nodes of 8 GPUs allows 260 / 8 - 32 (HOST_RESERVED_GIB_PER_GPU) = 0.5 GiB; the
catalog's 2 TiB nodes (DGX A100 640GB, DGX H100) 2048 / 8 - 32 = 224 GiB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan, parse_plan
from planner.inputs.units import GIB
from planner.model import host_memory, pools
from planner.model.stage_params import stage_params

EXAMPLE = Path(__file__).parents[2] / "examples" / "pools-llama3.1-70b-h100-a100-plan.toml"
SPLIT = 8192 * 8192 * 2 + 8192 * 1024 * 2 + 3 * 8192 * 28672  # a layer's, over tp
NORMS = 2 * 8192  # a layer's, whole on every TP rank
VOCAB = 129024 * 8192  # the padded embedding or output layer, over tp
H100_PARAMS = (59 * SPLIT + VOCAB) / 8 + 59 * NORMS + 8192  # 8192: the final norm
A100_PARAMS = (21 * SPLIT + VOCAB) / 8 + 21 * NORMS
H100_STAGE = H100_PARAMS / 128 * 16  # bytes a GPU
A100_STAGE = A100_PARAMS / 128 * 16


def _pinned(got: float, exact: float) -> bool:
    """Whether `got` is the offloaded optimizer's bytes of a stage whose 16 B a parameter come
    to `exact`: at least those, less than 24 B a parameter (module docstring)."""
    return exact < got < exact * 24 / 16


def _plan(tmp_path: Path, small_pool: str) -> Path:
    """The example with the optimizer offloaded and `small_pool`'s nodes at 260 GiB."""
    text = EXAMPLE.read_text().replace(
        "[training]\n", "[training]\noptimizer_offload_fraction = 1.0\n", 1
    )
    gpu = {"a100": 'gpu = "a100-sxm-80gb"\n', "h100": 'gpu = "h100-sxm-80gb"\n'}[small_pool]
    assert text.count(gpu) == 1
    text = text.replace(gpu, gpu + "host_memory_gib_per_node = 260\n")
    path = tmp_path / f"{small_pool}260.toml"
    path.write_text(text)
    return path


def test_hand_arithmetic() -> None:
    assert (H100_PARAMS, A100_PARAMS) == (6_443_425_792, 2_378_514_432)
    assert (H100_STAGE, A100_STAGE) == (805_428_224, 297_314_304)


def test_h100_stage_over_its_own_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the h100 stage's 0.75 GiB against the h100 pool's 0.5 GiB: over, whatever the a100 allows
    plan = load_plan(_plan(tmp_path, "h100"))
    host = host_memory.estimate(plan.job, plan.require_layout())
    assert (host.pool, host.gpu) == ("h100", "h100-sxm-80gb")
    assert _pinned(host.optimizer, H100_STAGE)
    assert host.share == 32.5 * GIB
    assert host.capacity == 0.5 * GIB
    assert not host.fits
    code, out, _ = run(["check", str(_plan(tmp_path, "h100")), "--json"], capsys)
    assert code == 1
    got = json.loads(out)["memory"]["host"]
    assert (got["capacity_gib"], got["share_gib"], got["fits"]) == (0.5, 32.5, False)


def test_a100_stage_fits_its_own_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the a100 stage's 0.28 GiB fits its pool's 0.5; the h100 stage's 0.75 its 224: it fits, and
    # the a100 pool (0.22 GiB left against 223.25) is the one reported
    plan = load_plan(_plan(tmp_path, "a100"))
    host = host_memory.estimate(plan.job, plan.require_layout())
    assert host.pool == "a100"
    assert _pinned(host.optimizer, A100_STAGE)
    assert host.capacity == 0.5 * GIB
    assert host.fits
    code, out, _ = run(["check", str(_plan(tmp_path, "a100"))], capsys)
    assert code == 0
    assert "in pool 'a100'" in " ".join(out.split())


def test_each_pool_with_its_ranks(tmp_path: Path) -> None:
    # brute force: the per-pool figures are the per-rank ones, and their most the whole plan's
    plan = load_plan(_plan(tmp_path, "h100"))
    job, lay = plan.job, plan.require_layout()
    per_rank = [host_memory.optimizer_bytes(job, lay, {r}) for r in range(lay.pp)]
    assert _pinned(per_rank[0], A100_STAGE) and _pinned(per_rank[1], H100_STAGE)
    assert host_memory.optimizer_bytes(job, lay) == max(per_rank)


def test_replicas_across_pools_each_against_its_own() -> None:
    # the data-parallel replicas across two pools (Layout.dp_pools): every pool runs the whole
    # stage, its optimizer sharded over its own instance of dp / 2 = 8 GPUs (pools.replica_views);
    # pool p1's 264 GiB nodes allow 264 / 8 - 32 = 1 GiB, p0's 1024 GiB 96 GiB: p1 binds, with the
    # bytes a brute force over its view gives (16 B x its GPU's parameters / 8)
    doc = {
        "model": {
            "name": "small",
            "num_layers": 8,
            "hidden_size": 2048,
            "ffn_hidden_size": 8192,
            "num_attention_heads": 16,
            "vocab_size": 32000,
            "position_embedding_type": "rope",
        },
        "cluster": {
            "pools": [
                {
                    "name": "p0",
                    "gpu": "h100-sxm-80gb",
                    "num_gpus": 8,
                    "host_memory_gib_per_node": 1024,
                },
                {
                    "name": "p1",
                    "gpu": "a100-sxm-80gb",
                    "num_gpus": 8,
                    "host_memory_gib_per_node": 264,
                },
            ],
            "between_pools": {
                "bandwidth_gb_per_s_per_gpu": 10.0,
                "latency_us": 1000.0,
                "allow_data_parallel": True,
            },
        },
        "training": {
            "seq_length": 2048,
            "global_batch_size": 32,
            "optimizer_offload_fraction": 1.0,
        },
    }
    job = parse_plan(doc).job
    lay = Layout(tp=1, pp=1, dp=16, micro_batch_size=1, zero_stage=1, dp_pools=2)
    host = host_memory.estimate(job, lay)
    _, (view, vlay) = pools.replica_views(job, lay)
    dense, expert = stage_params(view, vlay, 0, vlay.chunk_layers(8)[0])
    assert (host.pool, host.gpu, host.capacity) == ("p1", "a100-sxm-80gb", 1 * GIB)
    assert _pinned(host.optimizer, 16 * (dense + expert) / 8)
    assert host.fits == (host.total <= GIB)
