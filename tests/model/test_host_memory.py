"""Host memory a GPU's process pins for offloading (planner.model.host_memory) and what check,
explain and suggest do with it.

Oracles: the GPU memory model itself (what whole-layer offloading takes off the GPU is what lands
on the host: Transformer Engine moves the activations, it does not shrink them), the pipeline
schedule's in-flight micro-batches (1F1B's first rank holds pp of them), hand arithmetic for the
pinned allocator's power-of-two blocks and for the shares (NVIDIA's DGX H100: 2 TiB over 8
GPUs), and a brute-force search over the variants (tests/search/brute_force.py's
llama70b-l40s-host-bound problem, in tests/search/test_top_k.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from jobs import job
from plan_text import offload_plan

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.inputs.units import GIB
from planner.model import host_checkpoint, host_memory, memory
from planner.model.fine_offload import copied_bytes
from planner.model.params import params_total
from planner.model.stage_activations import shard

JOB = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64)


def test_pinned_blocks_round_up_to_powers_of_two() -> None:
    # PyTorch's CachingHostAllocator: 3 MiB takes a 4 MiB block, 1 MiB its own size
    assert host_memory.pinned_roundup(3 * 2**20) == pytest.approx(4 / 3)
    assert host_memory.pinned_roundup(2**20) == 1.0
    # Llama 3.1 70B's hidden state at 4096 tokens, bf16, tp 2 with SP: 2048 x 8192 x 2 = 2^25
    assert host_memory.pinned_roundup(2048 * 8192 * 2) == 1.0
    # a 5120-wide model's (Qwen 2.5 14B) at 8192 tokens: 8192 x 5120 x 2 = 80 MiB -> 128 MiB
    assert host_memory.pinned_roundup(8192 * 5120 * 2) == pytest.approx(128 / 80)


def test_whole_layer_offload_moves_what_the_gpu_no_longer_holds() -> None:
    # Llama 3.1 8B, 32 layers, pp 1, one micro-batch of 8192 tokens: its hidden state is
    # 8192 x 4096 x 2 = 2^26 bytes (no round-up), so the host holds exactly the k layers' bytes
    # the GPU gave up (the same per layer: every layer is alike), before the GPU allocator's
    # fragmentation, which the GPU's figure carries
    base = Layout(tp=1, pp=1, dp=8, zero_stage=1)
    plain = memory.estimate(JOB, base).stages[0].activations
    for k in (4, 16, 31):
        lay = base.with_(cpu_offloading_num_layers=k)
        gone = plain - memory.estimate(JOB, lay).stages[0].activations
        moved = gone / memory.fragmentation(JOB)
        assert host_memory.activation_bytes(JOB, lay) == pytest.approx(moved, rel=1e-9)
    # Transformer Engine keeps at least one layer: k >= n offloads n - 1
    last = host_memory.activation_bytes(JOB, base.with_(cpu_offloading_num_layers=31))
    assert last == pytest.approx(
        31 / 16 * host_memory.activation_bytes(JOB, base.with_(cpu_offloading_num_layers=16))
    )


def test_fine_grained_offload_holds_every_micro_batch_in_flight() -> None:
    # 1F1B on 4 ranks: rank 0 runs 4 forwards before its first backward, so its host holds 4
    # micro-batches' offloaded groups of its 8 layers (m = 64 / (2 x 1) = 32 >= 4), what the
    # groups copy (the attention output too, which the bf16 projection keeps on the GPU)
    lay = Layout(tp=1, pp=4, dp=2, zero_stage=1, offload_modules=("qkv_linear", "core_attn"))
    per = copied_bytes(JOB.arch, False, shard(JOB, lay), frozenset(lay.offload_modules))
    assert per > 0
    want = 4 * 8 * per * host_memory.pinned_roundup(8192 * 4096 * 2)
    assert host_memory.activation_bytes(JOB, lay) == pytest.approx(want, rel=1e-9)


def test_shares_and_the_process_reserve() -> None:
    # DGX H100: 2 TiB over 8 GPUs = 256 GiB a GPU, 224 usable past the process's 32
    # (nothing offloaded: only the checkpoint staging is pinned, tests/model/test_host_pinned.py)
    h = host_memory.estimate(JOB, Layout(tp=1, pp=1, dp=8))
    assert (h.share / GIB, h.capacity / GIB, h.assumed, h.activations + h.optimizer, h.fits) == (
        256.0,
        256.0 - host_memory.HOST_RESERVED_GIB_PER_GPU,
        False,
        0.0,
        True,
    )
    # a plan's 512 GiB a node of 8: 64 a GPU
    small = replace(JOB, cluster=JOB.cluster.model_copy(update={"host_memory_gib_per_node": 512}))
    assert host_memory.share_bytes(small) == (64 * GIB, False)
    # no source gives an L40S server's host memory: the least sourced share, marked assumed
    l40s = job("llama3.1-8b", "l40s-48gb", 8, 8192, 64)
    assert host_memory.share_bytes(l40s) == (host_memory.ASSUMED_GIB_PER_GPU * GIB, True)


def test_the_offloaded_optimizer_takes_the_budget_first() -> None:
    # Llama 3.1 8B at ZeRO 1 over dp 8 (tp 1, pp 1): an eighth of its 8.03e9 parameters a GPU,
    # 16 bytes each on the host: 16.06e9 bytes, 14.96 GiB, and at most twice the 8 pinned bytes
    # (a block is under twice what it holds; the round-up itself: tests/model/test_host_pinned.py)
    off = replace(JOB, optimizer_offload_fraction=1.0)
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=1)
    opt = host_memory.optimizer_bytes(off, lay)
    exact = params_total(JOB.arch) / 8 * 16
    assert exact < opt < exact * 24 / 16
    assert host_memory.optimizer_bytes(replace(off, optimizer_offload_fraction=0.5), lay) == (
        pytest.approx(opt / 2)
    )
    share, _ = host_memory.share_bytes(off)
    reserve = host_memory.HOST_RESERVED_GIB_PER_GPU * GIB
    staged = host_checkpoint.staging_bytes(off, lay)
    assert host_memory.activation_budget(off, lay) == pytest.approx(share - reserve - opt - staged)


def test_check_fails_a_plan_over_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 24 layers of 8192 tokens offloaded (about 1.1 GiB each): more than the 16 GiB a
    # GPU may pin out of 48 (32 reserved), well within the 992 of 8 TiB a node of 8
    lay = Layout(tp=1, pp=1, dp=8, zero_stage=1, cpu_offloading_num_layers=24)
    need = host_memory.activation_bytes(JOB, lay) / GIB
    assert 16 < need < 992
    tight = offload_plan(tmp_path, 8 * 48, 24)  # 48 GiB a GPU, 16 usable
    code, out, _ = run(["check", str(tight)], capsys)
    assert code == 1 and "does not fit in host memory" in out and "fits in GPU memory" in out
    code, out, _ = run(["check", str(tight), "--json"], capsys)
    data = json.loads(out)
    host = data["memory"]["host"]
    assert code == 1 and data["fits"] is False and host["fits"] is False
    # with the save's staging, which every Megatron plan pins (planner.model.host_checkpoint)
    staged = host_checkpoint.staging_bytes(JOB, lay) / GIB
    assert host["total_gib"] == pytest.approx(need + staged, abs=1e-3)
    assert host["capacity_gib"] == 16.0
    roomy = offload_plan(tmp_path, 8 * 1024, 24)
    code, out, _ = run(["check", str(roomy)], capsys)
    assert code == 0 and "host memory:" in out
    code, out, _ = run(["explain", str(roomy)], capsys)
    assert code == 0 and "host memory:" in out


def test_suggest_keeps_to_the_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every suggested layout fits the job's host memory, and a job whose host is small gets
    no deeper offload than fits it."""
    path = tmp_path / "job.toml"
    path.write_text(
        """
[model]
name = "llama3.1-70b"
[cluster]
gpu = "l40s-48gb"
num_gpus = 64
host_memory_gib_per_node = 576
[training]
seq_length = 4096
global_batch_size = 512
"""
    )
    plan = tmp_path / "plan.toml"
    argv = ["suggest", str(path), "--json", "--top", "10", "--write-plan", str(plan)]
    code, out, _ = run(argv, capsys)
    data = json.loads(out)
    assert code == 0 and data["candidates"]
    for c in data["candidates"]:
        assert c["memory"]["host"]["fits"] and c["fits"]
        assert c["memory"]["host"]["total_gib"] <= 40.0  # 576 / 8 = 72 a GPU, less 32
    # the plan keeps the job's host memory, and check agrees with suggest
    assert load_plan(plan).job.cluster.host_memory_gib_per_node == 576
    assert run(["check", str(plan)], capsys)[0] == 0
