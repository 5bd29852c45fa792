"""`[training] async_save`: Megatron-LM's --async-save with its persistent checkpoint worker, a
process of its own on every GPU, started at initialisation (Megatron-LM d98e8a64
megatron/training/initialize.py:79-80) and calling torch.cuda.set_device there
(megatron/core/dist_checkpointing/strategies/async_utils.py:565): one more CUDA context per GPU
for the whole run, outside PyTorch's allocator.

Oracles: validate_args drops --async-save without --use-persistent-ckpt-worker for a distributed
checkpoint (d98e8a64 megatron/training/arguments.py:1814-1820); Megatron-Bridge 067f987d
training/config.py:601-603 (CheckpointConfig.async_save asserts the persistent worker, which
defaults on, :516); the memory delta is `buffers.ASYNC_SAVE_WORKER_BYTES` on every stage, by
hand: 600 MiB = 629,145,600 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from planner.emit.launch import render
from planner.emit.megatron import arguments, training_args
from planner.inputs import megatron_args, megatron_log, megatron_log_args
from planner.inputs.plan import load_plan, parse_plan
from planner.model import buffers, memory

SMALL = (
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 --vocab-size 32000 "
    "--tokenizer-type NullTokenizer --pipeline-model-parallel-size 2 "
)
PLAN = (
    '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
    "[training]\nseq_length = 8192\nglobal_batch_size = 64\n{extra}[parallel]\ntp = 8\n"
)


def read(extra: str) -> megatron_args.Reading:
    return megatron_args.read(SMALL + extra, "h100-sxm-80gb", 8, "train.sh")


def _plan(tmp_path: Path, extra: str = "async_save = true\n", framework: str = "") -> Path:
    path = tmp_path / "p.toml"
    path.write_text(PLAN.format(extra=extra + framework))
    return path


def test_the_worker_is_read_only_beside_the_persistent_flag() -> None:
    """--async-save alone is turned off by validate_args (arguments.py:1814-1820): no worker,
    read off with a note; with --use-persistent-ckpt-worker the worker starts (initialize.py:79)."""
    both = read("--async-save --use-persistent-ckpt-worker")
    assert both.doc["training"]["async_save"] is True
    alone = read("--async-save")
    assert "async_save" not in alone.doc["training"]
    assert any("--use-persistent-ckpt-worker" in n for n in alone.notes)
    assert parse_plan(read("").doc).job.async_save is False


def test_the_worker_costs_one_more_context_on_every_gpu() -> None:
    """By hand: 600 MiB more outside the allocator on each pipeline stage, nothing allocated."""
    on = parse_plan(read("--async-save --use-persistent-ckpt-worker").doc)
    off = parse_plan(read("").doc)
    lay = on.require_layout()
    a, b = memory.estimate(on.job, lay).stages, memory.estimate(off.job, lay).stages
    assert len(a) == 2
    delta = [x.other - y.other for x, y in zip(a, b, strict=True)]
    assert delta == pytest.approx([629_145_600.0] * 2, abs=1e-3)  # summed in another order
    kept = [x.allocated - y.allocated for x, y in zip(a, b, strict=True)]
    assert kept == pytest.approx([0.0, 0.0], abs=1e-3)  # none of it in the allocator's count
    assert buffers.ASYNC_SAVE_WORKER_BYTES == 600 * 2**20


def test_megatron_targets_write_the_worker_with_the_flag(tmp_path: Path) -> None:
    """The plan's async_save launches as --async-save --use-persistent-ckpt-worker (without the
    second Megatron would drop the first); a plan without it writes neither."""
    words = [w for arg in training_args(load_plan(_plan(tmp_path))) for w in arg]
    assert "--async-save" in words and "--use-persistent-ckpt-worker" in words
    plain = [w for arg in training_args(load_plan(_plan(tmp_path, ""))) for w in arg]
    assert "--async-save" not in plain and "--use-persistent-ckpt-worker" not in plain


def test_bridge_writes_checkpoint_async_save(tmp_path: Path) -> None:
    """Megatron-Bridge's CheckpointConfig.async_save (use_persistent_ckpt_worker defaults True,
    067f987d training/config.py:516); no checkpoint table without it (and without FSDP)."""
    doc = yaml.safe_load(render(load_plan(_plan(tmp_path)), "megatron-bridge")[1])
    assert doc["checkpoint"] == {"async_save": True}
    plain = yaml.safe_load(render(load_plan(_plan(tmp_path, "")), "megatron-bridge")[1])
    assert "checkpoint" not in plain


def test_a_plan_with_the_worker_survives_its_launch_line_and_log(tmp_path: Path) -> None:
    """plan -> launch's Megatron-LM flags -> read back (as a line, and as a log's printed
    arguments: async_save True, use_persistent_ckpt_worker True) -> the same field and memory."""
    from benchmarks.megatron_logs import Step, log_text

    plan = load_plan(_plan(tmp_path))
    job, lay = plan.job, plan.require_layout()
    flat = arguments(plan).flat()
    line = megatron_args.read(" ".join(flat), "h100-sxm-80gb", 8, "train.sh")
    text = log_text(flat, 8, [Step(1, 1.0), Step(2, 1.0)])
    (run,) = megatron_log.parse(text, Path("x.log")).runs
    logged = megatron_log_args.reading(run, "h100-sxm-80gb", 8)
    want = [s.other for s in memory.estimate(job, lay).stages]
    for back in (parse_plan(line.doc), parse_plan(logged.doc)):
        assert back.job.async_save is True
        assert [s.other for s in memory.estimate(back.job, lay).stages] == want


def test_a_torchtitan_plan_starts_no_megatron_worker(tmp_path: Path) -> None:
    """The worker is Megatron-LM's (and Bridge's): a torchtitan job's memory does not count it."""
    titan = 'framework = "torchtitan"\n'
    job = load_plan(_plan(tmp_path, "async_save = true\n", titan)).job
    assert buffers.async_save_worker_bytes(job) == 0.0
