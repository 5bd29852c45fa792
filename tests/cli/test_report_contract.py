"""What suggest, check and explain say of the same plan agrees (a QA pass over ~14,000 random
plans found these four places where it did not).

Oracles: the commands themselves, each against another (a row of suggest against check of the
plan it stands for; explain's text against its JSON and check's exit code), and DESIGN.md's
contract for `performance.mfu` (tests/model/test_mfu_labels.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from cli_run import run

JOB = (
    '[model]\nname = "{model}"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = {n}\n'
    "[training]\nseq_length = {seq}\nglobal_batch_size = {gbs}\n"
)


def _job(tmp_path: Path, model: str, n: int, seq: int, gbs: int, extra: str = "") -> Path:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(model=model, n=n, seq=seq, gbs=gbs) + extra)
    return path


def test_every_rows_plan_parallel_checks_as_it_was_scored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """suggest --json's `plan_parallel` of each row, as a plan's [parallel] table, checks at the
    row's peak and step (the row's `parallel` is the resolved layout, with fields a plan refuses
    beside each other: recompute_method with recompute = "none")."""
    job = _job(tmp_path, "llama3.1-8b", 8, 4096, 32)
    code, out, err = run(["suggest", str(job), "--top", "4", "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)["candidates"]
    assert len(rows) == 4
    for k, row in enumerate(rows):
        table = "".join(f"{key} = {json.dumps(v)}\n" for key, v in row["plan_parallel"].items())
        plan = tmp_path / f"row{k}.toml"
        plan.write_text(job.read_text() + "[parallel]\n" + table)
        tomllib.loads(plan.read_text())
        code, out, err = run(["check", str(plan), "--json"], capsys)
        assert code == 0, err
        back = json.loads(out)
        assert back["memory"]["peak_gib"] == row["memory"]["peak_gib"]
        code, out, err = run(["explain", str(plan), "--json"], capsys)
        assert json.loads(out)["performance"]["step_time_s"] == row["performance"]["step_time_s"]


def test_a_graphed_job_is_refused_for_torchtitan_before_the_search(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """suggest --framework torchtitan on a job with cuda_graphs = true searched without the
    graphs and wrote a plan check refused (exit 2): the job is refused up front, as a job file
    saying framework = "torchtitan" is, and no plan is written."""
    job = _job(tmp_path, "llama3.1-8b", 8, 4096, 32, "cuda_graphs = true\n")
    written = tmp_path / "out.toml"
    argv = ["suggest", str(job), "--framework", "torchtitan", "--write-plan", str(written)]
    code, _, err = run(argv, capsys)
    assert code == 2 and "training.cuda_graphs" in err and not written.exists()


def test_explain_names_the_gpu_memory_when_the_host_is_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """8 layers and the whole optimizer offloaded on H200 with 300 GiB of host memory per node:
    the GPU fits, the host does not; explain's text said "fits", its JSON `fits: false`, check
    exit 1."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h200-sxm-141gb"\nnum_gpus = 8\n'
        "host_memory_gib_per_node = 300\n[training]\nseq_length = 8192\n"
        "global_batch_size = 128\noptimizer_offload_fraction = 1.0\n"
        'optimizer_state_dtype = "bf16"\n'
        "[parallel]\nzero_stage = 1\ncpu_offloading_num_layers = 8\n"
    )
    code, out, _ = run(["explain", str(plan)], capsys)
    assert code == 0 and "fits in GPU memory" in out and "does not fit in host memory" in out
    code, out, _ = run(["explain", str(plan), "--json"], capsys)
    assert json.loads(out)["fits"] is False
    code, _, _ = run(["check", str(plan)], capsys)
    assert code == 1


def test_a_plan_ranked_at_another_headroom_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """suggest --headroom 0 ranks a 79.4 GiB layout first (80 GiB H100); check at its default
    3% then says it does not fit: the written plan's header says which headroom to check at."""
    job = _job(tmp_path, "llama3.1-70b", 16, 8192, 64)
    written = tmp_path / "plan.toml"
    argv = ["suggest", str(job), "--headroom", "0", "--top", "1", "--write-plan", str(written)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    assert "# ranked with --headroom 0: run planner check --headroom 0" in written.read_text()
    code, _, _ = run(["check", str(written), "--headroom", "0"], capsys)
    assert code == 0


def test_sparse_attention_mfu_is_labelled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSeek-V3.2's model FLOPs are Megatron-LM's count, dense causal MLA over all 131,072
    keys, while its sparse attention reads 2,048 keys a query: at 128k the best layout on 1,024
    H100 passes 100% MFU against the bf16 peak, and the JSON says why; DeepSeek-V3's (dense MLA)
    does not carry the label."""
    for model, sparse in (("deepseek-v3.2", True), ("deepseek-v3", False)):
        job = _job(tmp_path, model, 1024, 131072, 64)
        code, out, err = run(["suggest", str(job), "--top", "1", "--json"], capsys)
        assert code == 0, err
        perf = json.loads(out)["candidates"][0]["performance"]
        assert perf["sparse_attention_counted_dense"] is sparse
        assert (perf["mfu"] > 1.0) is sparse  # above what a GPU computes: the count, not the run


def test_check_reports_the_checkpoint_staging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every Megatron save at ZeRO 1 stages a GPU's share of the checkpoint in pinned host memory
    (Megatron-LM d98e8a64 filesystem_async.py:243, `planner.model.host_checkpoint`); a
    synchronous ZeRO 2 save does not: check --json's `memory.host` names it apart, within its
    total (nothing else is pinned: no offload), and the text names it too."""
    base = (
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\n"
        "[parallel]\ntp = 2\nzero_stage = {z}\n"
    )
    plan = tmp_path / "plan.toml"
    staged = {}
    for z in (1, 2):
        plan.write_text(base.format(z=z))
        code, out, _ = run(["check", str(plan), "--json"], capsys)
        host = json.loads(out)["memory"]["host"]
        assert code == 0 and host["activations_gib"] == host["optimizer_gib"] == 0
        assert host["checkpoint_staging_gib"] == host["total_gib"]
        staged[z] = host["checkpoint_staging_gib"]
    # 8.03e9 parameters over tp 2 x dp 4: 2 B of bf16 weights a parameter alone is 1.87 GiB
    assert staged[1] > 2 * 8.03e9 / 8 / 2**30 and staged[2] == 0
    plan.write_text(base.format(z=1))
    code, out, _ = run(["check", str(plan)], capsys)
    assert code == 0 and "checkpoint staging" in out
