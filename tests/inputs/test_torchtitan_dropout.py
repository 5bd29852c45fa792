"""torchtitan jobs keep no dropout masks: its models have no dropout (`git grep -i dropout`
finds none in pytorch/torchtitan e347b1e5's torchtitan/models/llama3, qwen3, deepseek_v3 and moe,
nor in b5bcd76c's models/common), unless the plan's [training] says so; Megatron keeps its
defaults (--hidden-dropout / --attention-dropout 0.1)."""

from __future__ import annotations

from pathlib import Path

from plan_text import CLUSTER, plan_text, write

from planner.inputs.plan import load_plan, reframe

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 128\n"
MEGATRON = "[training]\nseq_length = 8192\nglobal_batch_size = 128\n"
MODEL = '[model]\nname = "llama3.1-8b"\n'


def plan(tmp_path: Path, training: str) -> Path:
    text = plan_text(training=training, cluster=CLUSTER, parallel="[parallel]\n", model=MODEL)
    return write(tmp_path, text)


def test_torchtitan_jobs_have_no_dropout(tmp_path: Path) -> None:
    job = load_plan(plan(tmp_path, TITAN)).job
    assert not job.hidden_dropout and not job.attention_dropout


def test_a_stated_dropout_stays(tmp_path: Path) -> None:
    job = load_plan(plan(tmp_path, TITAN + "hidden_dropout = true\n")).job
    assert job.hidden_dropout and not job.attention_dropout


def test_reframed_to_torchtitan_drops_dropout(tmp_path: Path) -> None:
    job = load_plan(plan(tmp_path, MEGATRON)).job
    assert job.hidden_dropout and job.attention_dropout
    titan = reframe(job, "torchtitan")
    assert not titan.hidden_dropout and not titan.attention_dropout
