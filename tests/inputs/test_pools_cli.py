"""check / explain / suggest on plans over pools (issue 25), through the CLI.

Oracles: the contract (exit 0 fits, 1 does not fit naming the stage, its pool and the excess,
2 bad input naming the field and value), and hand arithmetic in comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

POOLS = """[model]
name = "llama3.1-8b"
[cluster]
[[cluster.pools]]
name = "fast"
gpu = "h100-sxm-80gb"
num_gpus = 16
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
"""


def write(tmp_path: Path, parallel: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(POOLS + "[parallel]\n" + parallel)
    return path


def test_check_json_names_pool_and_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # stages of tp 2 x dp 8 = 16 GPUs: one per pool, pp 2
    path = write(tmp_path, 'tp = 2\npp = 2\npipeline_model_parallel_layout = "Et*20|t*12L"\n')
    code, out, _ = run(["check", str(path), "--json"], capsys)
    assert code == 0
    stages = json.loads(out)["memory"]["stages"]
    assert [(s["pool"], s["gpu"], s["layers"]) for s in stages] == [
        ("fast", "h100-sxm-80gb", 20),
        ("slow", "a100-sxm-80gb", 12),
    ]


def test_explain_reports_the_slow_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "tp = 2\npp = 2\n")
    code, out, _ = run(["explain", str(path), "--json"], capsys)
    assert code == 0
    link = json.loads(out)["performance"]["between_pools"]
    assert link["crossings"] == 1
    # 10 ms latency per message: at least that much per hop
    assert link["hop_ms"] >= 10.0 and 0 < link["share"] < 1


def test_stage_over_its_gpu_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The slow pool's 80 GB A100 given a 20 GiB memory_gib: its stage cannot hold 16 layers."""
    text = POOLS.replace('gpu = "a100-sxm-80gb"\n', 'gpu = "a100-sxm-80gb"\nmemory_gib = 20.0\n')
    path = tmp_path / "plan.toml"
    path.write_text(text + "[parallel]\ntp = 2\npp = 2\n")
    code, out, _ = run(["check", str(path)], capsys)
    assert code == 1
    assert "stage 1 (pool 'slow', a100-sxm-80gb)" in out and "GiB over" in out


def test_pool_size_not_whole_stages_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pp 1: one stage of tp 2 x dp 16 = 32 GPUs, which no pool of 16 holds
    path = write(tmp_path, "tp = 2\npp = 1\n")
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2
    assert "cluster.pools" in err and "16 GPUs" in err and "= 32" in err


def test_suggest_infeasible_mix_names_binding_stage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama 3.1 70B on 16 GPUs of 20 GiB and 16 of 10 GiB: about 70e9 x 18 bytes of weights,
    gradients and Adam states over 32 GPUs is ~39 GB each before activations: nothing fits;
    exit 1 naming the stage, its pool and the GiB it lacks."""
    text = POOLS.replace("llama3.1-8b", "llama3.1-70b")
    text = text.replace("num_gpus = 16\n[[", "num_gpus = 16\nmemory_gib = 20.0\n[[", 1)
    text = text.replace('gpu = "a100-sxm-80gb"\n', 'gpu = "a100-sxm-80gb"\nmemory_gib = 10.0\n')
    path = tmp_path / "job.toml"
    path.write_text(text)
    code, out, _ = run(["suggest", str(path)], capsys)
    assert code == 1
    flat = " ".join(out.split())
    assert "the closest" in flat and "on stage" in flat and "(pool '" in flat
    assert "GiB more" in flat


def test_one_pool_without_pipelines_checks_and_advises(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One [[cluster.pools]] entry and no layout (the default tp 1 pp 1 dp 16, ZeRO 1, no
    recompute: Llama 3.1 8B at 8,192 tokens does not fit an H800): check exits 1 and ranks its
    advice by step time, which asked the pooled step time of a layout without pipeline sends
    (a fuzzer's IndexError)."""
    plan = tmp_path / "one.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\n[[cluster.pools]]\nname = "p0"\n'
        'gpu = "h800-sxm-80gb"\nnum_gpus = 16\n[training]\nseq_length = 8192\n'
        "global_batch_size = 128\n[parallel]\n"
    )
    code, out, err = run(["check", str(plan)], capsys)
    assert code == 1, err
    assert "internal error" not in err and "saves" in out


def test_a_rule_no_layout_meets_is_named_not_a_memory_excess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPT 7.1B has learned absolute positions for 4,096 tokens: no layout trains 16,384 (the
    max_positions rule, Megatron's validate_args), on any pools. suggest refuses the job as bad
    input (exit 2, as check does) naming the field; it once said the closest layout 'needs -4.3
    GiB more' (it fits its memory)."""
    path = tmp_path / "rules.toml"
    path.write_text(
        '[model]\nname = "gpt-mcore-7.1b"\n[cluster]\n[[cluster.pools]]\nname = "h100"\n'
        'gpu = "h100-sxm-80gb"\nnum_gpus = 8\n[[cluster.pools]]\nname = "a40"\n'
        'gpu = "a100-sxm-40gb"\nnum_gpus = 8\n[training]\nseq_length = 16384\n'
        "global_batch_size = 32\n"
    )
    code, _, err = run(["suggest", str(path)], capsys)
    assert code == 2, err
    flat = " ".join(err.split())
    assert f"{path}: training.seq_length" in flat and "max_position_embeddings (4096)" in flat
    assert "GiB more" not in flat


def test_write_plan_over_pools_notes_what_launch_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pools of 8-GPU and 4-GPU nodes: torchrun (and Slurm) start the same number of workers
    on every node, so `launch` refuses those targets (planner.emit.pools); suggest --write-plan
    says so on stderr as the one-kind suggest does, before anyone launches it."""
    path = tmp_path / "mixed.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\n[[cluster.pools]]\nname = "h100"\n'
        'gpu = "h100-sxm-80gb"\nnum_gpus = 16\n[[cluster.pools]]\nname = "a100x4"\n'
        'gpu = "a100-sxm-40gb"\ngpus_per_node = 4\nnum_gpus = 16\n[training]\n'
        "seq_length = 8192\nglobal_batch_size = 32\n"
    )
    plan = tmp_path / "plan.toml"
    code, _, err = run(["suggest", str(path), "--write-plan", str(plan)], capsys)
    assert code == 0, err
    flat = " ".join(err.split())
    assert "note: launch --target torchrun, slurm refuses this plan" in flat
    assert "gpus_per_node differs between pools" in flat
    code, _, err = run(["launch", str(plan), "--target", "torchrun"], capsys)
    assert code == 2 and "gpus_per_node differs between pools" in " ".join(err.split())


def test_one_pool_is_searched_as_its_one_kind_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One [[cluster.pools]] entry is one GPU kind: suggest gives what the same [cluster] gives
    (the brute-force-checked one-kind search: every ZeRO stage, pp 1 too), not the pooled
    search's ZeRO 1 pipelines (it ranked a ZeRO 1 layout first, 2% slower than ZeRO 2's)."""
    train = "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
    model = '[model]\nname = "llama3.1-8b"\n'
    one = tmp_path / "one.toml"
    one.write_text(
        model + '[cluster]\n[[cluster.pools]]\nname = "a"\ngpu = "h100-sxm-80gb"\n'
        "num_gpus = 16\n" + train
    )
    plain = tmp_path / "plain.toml"
    plain.write_text(model + '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n' + train)
    rows, notes = [], []
    for path in (one, plain):
        code, out, err = run(["suggest", str(path), "--json"], capsys)
        assert code == 0, err
        rows.append([(c["parallel"], c["performance"]) for c in json.loads(out)["candidates"]])
        notes.append("one pool ('a') is one GPU kind" in " ".join(err.split()))
    assert rows[0] == rows[1]
    assert notes == [True, False]
