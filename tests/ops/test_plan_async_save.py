"""The plan's own asynchronous save (`training.async_save`) in every operations figure: explain,
scale, suggest's goodput and cost objectives and the launch files' header and save interval
(`planner.ops.assumptions.for_job`, the one place the job and --async-checkpoint meet). QA: a
plan with async_save = true launched `--async-save --use-persistent-ckpt-worker` under a header
saying "sync, blocks 113.0 s" and the synchronous save interval, 5,071 steps instead of 358.

Oracles: hand arithmetic (Young's interval with its inputs written out below); Megatron-LM's
launch flags (planner.emit.megatron writes --async-save for training.async_save); the
--async-checkpoint option's own figures (the same job priced by either route); torchtitan's
launch, which does not read async_save (`planner.inputs.inert.MEGATRON_TRAINING`).

Llama 3.1 8B on one node of 8 H100 (examples/llama3.1-8b-h100.toml, tp 2, ZeRO 1):
    checkpoint  8,030,261,248 params x 14 B           = 112,423,657,472 B
    write C     112.42 GB / (1 node x 1 GB/s)          = 112.424 s
    host copy H 112.42 GB / 8 GPUs / 25 GB/s           = 0.562118 s (all an async save blocks)
    MTBF M      86,400 / (419 / (54 x 16,384) x 8)     = 22,804,651 s
    Young       sqrt(2 x H x M) = sqrt(2 x 0.562118 x 22,804,651) = 5,063.38 s
                / the plan's 14.14 s step              = 358.07 steps -> 358
(the asynchronous model past the write, M e^((R + C)/M) (e^((tau + H)/M) - 1) / tau, is
least within a step of Young's first-order optimum here: Daly's correction moves it 0.4 s).
Synchronously the same plan checkpoints every ~5,071 steps (H + C = 112.99 s blocking).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from operations_jobs import EXAMPLE

from planner.emit.launch import render
from planner.emit.prediction import predict
from planner.inputs.plan import load_plan
from planner.model import cost
from planner.ops import assumptions
from planner.ops import operations as ops
from planner.ops.assumptions import OpsParams
from planner.search import scaling

CHECKPOINT_B = 8_030_261_248 * 14
HOST_COPY_S = CHECKPOINT_B / 8 / 25e9  # 0.562118 s
MTBF_S = 86_400 / (419 / (54 * 16_384) * 8)  # 22,804,651 s
YOUNG_S = math.sqrt(2 * HOST_COPY_S * MTBF_S)  # 5,063.38 s


def _plan(tmp_path: Path, async_save: bool = True) -> Path:
    """The example plan with `async_save = true` under [training] (or as it is)."""
    text = EXAMPLE.read_text()
    if async_save:
        text = text.replace("[training]\n", "[training]\nasync_save = true\n")
    path = tmp_path / f"plan-{'async' if async_save else 'sync'}.toml"
    path.write_text(text)
    return path


def _explain(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code, out, err = run(["explain", *argv, "--tokens", "1T", "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def test_explain_prices_the_plans_asynchronous_save(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _explain([str(_plan(tmp_path))], capsys)
    o, step = data["operations"], data["performance"]["step_time_s"]
    assert o["async_checkpoint"] is True
    assert o["checkpoint_blocking_s"] == pytest.approx(HOST_COPY_S, rel=1e-5)
    assert math.isclose(YOUNG_S, 5063.38, rel_tol=1e-5)
    assert o["checkpoint_interval_steps"] == round(YOUNG_S / step) == 358
    # the same plan saving synchronously: blocks H + C, every ~5,071 steps
    sync = _explain([str(_plan(tmp_path, async_save=False))], capsys)["operations"]
    assert sync["async_checkpoint"] is False
    assert sync["checkpoint_blocking_s"] == pytest.approx(
        HOST_COPY_S + CHECKPOINT_B / 1e9, rel=1e-5
    )
    assert sync["checkpoint_interval_steps"] > 5000


def test_the_option_is_a_what_if_on_a_synchronous_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--async-checkpoint on a plan that saves synchronously: the figures save asynchronously
    (as the plan with async_save would), the launch file does not (no --async-save)."""
    path = _plan(tmp_path, async_save=False)
    asked = _explain([str(path), "--async-checkpoint"], capsys)["operations"]
    own = _explain([str(_plan(tmp_path))], capsys)["operations"]
    assert asked == own
    _, text = render(load_plan(path), "torchrun")
    assert "--async-save" not in text
    code, out, _ = run(["explain", "--help"], capsys)
    assert code == 0 and "what-if" in out


def test_the_launch_header_and_save_interval_follow_the_plan(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path))
    p = predict(plan)
    assert p.checkpoint_interval_steps == 358  # Young above
    assert any("(async, " in line for line in p.operations)
    _, text = render(plan, "torchrun")
    assert "--async-save" in text and 'SAVE_INTERVAL="${SAVE_INTERVAL:-358}"' in text


def test_suggests_objectives_take_the_jobs_asynchronous_save(tmp_path: Path) -> None:
    """objective_value (suggest's --objective goodput / cost) of the job with async_save equals
    the synchronous job's under --async-checkpoint, and differs from it without."""
    plan = load_plan(_plan(tmp_path))
    job, lay = plan.job, plan.require_layout()
    sync = replace(job, async_save=False)
    perf = cost.estimate(job, lay)
    for objective in ("goodput", "cost"):
        own = ops.objective_value(job, perf, objective, None, lay.zero_stage)
        asked = ops.objective_value(
            sync, perf, objective, OpsParams(async_checkpoint=True), lay.zero_stage
        )
        assert own == asked
        assert own < ops.objective_value(sync, perf, objective, None, lay.zero_stage)


def test_scale_takes_the_job_files_asynchronous_save(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job file (no [parallel]) with async_save: each size's checkpoint blocks for the host
    copy alone, size / 8 GPUs / 25 GB/s (of the size the layout's ZeRO stage saves)."""
    job_text = EXAMPLE.read_text().split("[parallel]")[0]
    path = tmp_path / "job.toml"
    path.write_text(job_text.replace("[training]\n", "[training]\nasync_save = true\n"))
    argv = ["scale", str(path), "--num-gpus", "8", "--tokens", "1T", "--json"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    o = json.loads(out)["points"][0]["operations"]
    assert o["async_checkpoint"] is True
    assert o["checkpoint_blocking_s"] == pytest.approx(o["checkpoint_gb"] / 8 / 25, rel=1e-5)
    # and the search's own figures (`scaling.scale`, the function under it) with a given layout
    plan = load_plan(_plan(tmp_path))
    lay = plan.require_layout()
    curve = scaling.scale(plan.job, [8], lambda j: (lay, cost.estimate(j, lay)), 10**12)
    point = curve.points[0].operations
    assert point is not None and point.resilience.async_checkpoint
    assert point.resilience.interval_steps == 358


def test_torchtitan_does_not_read_async_save(tmp_path: Path) -> None:
    """torchtitan's launch never saves asynchronously for the setting (it is inert there):
    the figures stay synchronous; the option still asks for them."""
    job = replace(load_plan(_plan(tmp_path)).job, framework="torchtitan")
    assert assumptions.for_job(job).async_checkpoint is False
    assert assumptions.for_job(job, OpsParams(async_checkpoint=True)).async_checkpoint is True
    assert assumptions.for_job(replace(job, framework="megatron")).async_checkpoint is True
