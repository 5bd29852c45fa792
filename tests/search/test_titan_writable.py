"""suggest --framework torchtitan ranks only layouts some torchtitan target writes: a layout the
TOML target's torchtitan (e347b1e5) raises on is the Python configurations' (b5bcd76c, the module
target), so what that era lacks (tensorwise float8, every-N checkpointing) leaves it to no target
(`rules.torchtitan_era.head_era`). Oracle: the targets' own refusals (`launch.refusals`) of the
plan `suggest --write-plan` writes for each top row.

Regressions (benchmarks/launchable.py --quick, surfaced by 0c862e6's lighter dropout-free
models): llama3.1-70b at fp8 on 16 B200 ranked tp2 pp8 dp1 with every-N checkpointing third
(e347b1e5 models/llama3/infra/parallelize.py: no FSDP at dp 1 cp 1 beside tp and pp; b5bcd76c:
no every-N option); qwen3-30b-a3b ranked pp 2 at fp8 tensorwise (e347b1e5 train.py:218-223: qwen3
has no pipelining; b5bcd76c: rowwise float8 only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan, parse_plan
from planner.search.rules import head_era
from planner.search.space import Space
from planner.search.suggest import search_rows
from planner.search.titan_every import every_job
from planner.search.titan_variants import candidate_job


def _job(model: str, precision: str = "fp8", **training: object) -> Job:
    doc = {
        "model": {"name": model},
        "cluster": {"gpu": "b200-sxm-180gb", "num_gpus": 16},
        "training": {
            "seq_length": 4096,
            "global_batch_size": 128,
            "precision": precision,
            "framework": "torchtitan",
            **training,
        },
    }
    return parse_plan(doc).job


@pytest.mark.parametrize("model", ["llama3.1-70b", "qwen3-30b-a3b"])
def test_top_rows_are_written_by_some_target(model: str, tmp_path: Path) -> None:
    job = _job(model)
    _, rows = search_rows(job, Space(framework="torchtitan"), 3)
    assert len(rows) == 3
    targets = {t for t, fw in launch.FRAMEWORK.items() if fw == "torchtitan"}
    for i, row in enumerate(rows):
        c = row.candidate
        path = tmp_path / f"row{i}.toml"
        path.write_text(plan_writer.render(candidate_job(job, c), c.layout, {"name": model}, []))
        refused = {t for ts in launch.refusals(load_plan(path)).values() for t in ts}
        assert targets - refused, f"row {i + 1} {c.layout.describe()}: no target writes it"


def test_toml_era_layouts_take_the_module_targets_limits() -> None:
    """The two regressions' layouts, as rules: refused where b5bcd76c refuses the job's settings,
    kept where it runs them (bf16 qwen3 at pp 2: the module target writes it)."""
    qwen = _job("qwen3-30b-a3b")
    pp2 = Layout(pp=2, dp=8, zero_stage=3)
    v = head_era(qwen, pp2)
    assert v is not None and v.rule == "tt_head_float8"
    assert head_era(_job("qwen3-30b-a3b", "bf16"), pp2) is None
    llama = _job("llama3.1-70b", "bf16")
    tp2pp8 = Layout(tp=2, pp=8, dp=1, sequence_parallel=True, zero_stage=0)
    assert head_era(llama, tp2pp8) is None  # full recompute: the module target writes it
    v = head_era(every_job(llama, 10), tp2pp8)
    assert v is not None and v.rule == "tt_head_every"
    # a layout e347b1e5 runs keeps every-N (the TOML target writes it)
    assert head_era(every_job(llama, 10), Layout(tp=2, pp=4, dp=2, zero_stage=3)) is None
    gathered = _job("llama3.1-70b", "bf16", cross_entropy="gathered")
    v = head_era(gathered, tp2pp8)  # b5bcd76c components/loss.py:66-75: vocab-parallel under TP
    assert v is not None and v.rule == "tt_head_loss"
    assert head_era(gathered, Layout(tp=2, pp=4, dp=2, zero_stage=3)) is None
