"""Tests for planner.cli.timeline (`explain --timeline`) and Performance.stages, which it draws.

Oracles: the step-time identity of planner.model.cost (the slowest stage's time per micro-batch
times m, plus the bubble, the exposed DP traffic, the optimizer and the fixed cost), the 1F1B
schedule's own counts (every rank runs each micro-batch's forward and backward once), and the SVG's
geometry."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from paths import EXAMPLES
from rich.console import Console

from planner.cli import render, timeline
from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, load_plan
from planner.model import cost, memory, schedule
from planner.search.rules import check_plan

SVG = "{http://www.w3.org/2000/svg}"
PLAN = EXAMPLES / "llama3.1-8b-h100.toml"


def job(gbs: int = 64) -> Job:
    gpu = catalog.get_gpu("h100-sxm-80gb")
    cluster = ClusterSpec(gpu=gpu, num_gpus=32, gpus_per_node=8, memory_gib=80.0, tiers=gpu.tiers)
    arch = catalog.get_model("llama3.1-8b")
    return Job(arch=arch, cluster=cluster, seq_length=4096, global_batch_size=gbs)


# 32 layers in uneven stages; the last also runs the output layer
UNEVEN = Layout(tp=2, pp=4, dp=4, pipeline_layers=(6, 9, 9, 8), sequence_parallel=True)


def test_stages_rebuild_the_step_time() -> None:
    perf = cost.estimate(job(), UNEVEN)
    b = perf.breakdown
    per_mb = [f + bw for f, bw in perf.stages]
    assert len(per_mb) == 4
    assert all(0 < f < bw for f, bw in perf.stages)  # a backward is about two forwards
    m = UNEVEN.num_microbatches(64)
    steady, bubble = schedule.pipeline_time(per_mb, m)
    assert bubble == pytest.approx(b.bubble)
    tail = b.dp_comm_exposed + b.optimizer + b.other
    assert steady + bubble + tail == pytest.approx(perf.step_time_s)


def _rects(svg: str) -> list[ET.Element]:
    return list(ET.fromstring(svg).iter(f"{SVG}rect"))


@pytest.mark.parametrize(("gbs", "shown"), [(64, 16), (512, timeline.MAX_OPS)])
def test_svg_draws_every_rank_and_micro_batch(gbs: int, shown: int) -> None:
    j = job(gbs)
    perf = cost.estimate(j, UNEVEN)
    svg = timeline.pipeline_svg(j, UNEVEN, perf)
    m = UNEVEN.num_microbatches(gbs)
    # a shorter step is drawn (the steady state repeats), not the first micro-batches of this one
    assert (
        "all 16 micro-batches" if m == shown else f"a step of {shown} (of the {m} it runs)"
    ) in svg
    titled = [(r, r.findtext(f"{SVG}title") or "") for r in _rects(svg)]
    forwards = [r for r, t in titled if t.startswith("forward of micro-batch")]
    backwards = [r for r, t in titled if t.startswith("backward of micro-batch")]
    assert len(forwards) == len(backwards) == 4 * shown
    # to scale: every block inside the plot, the last (the DP/optimizer tail) at its right edge
    ends = [float(r.get("x", 0)) + float(r.get("width", 0)) for r, t in titled if "micro" in t]
    assert min(float(r.get("x", 0)) for r, _ in titled if r in forwards) >= timeline.LEFT
    tail = next(r for r, t in titled if t.startswith("DP traffic"))
    right = float(tail.get("x", 0)) + float(tail.get("width", 0))
    assert max(ends) <= right + 1e-6
    assert right == pytest.approx(timeline.WIDTH - timeline.RIGHT, abs=0.01)
    # a block's width is its duration: rank 0's first forward lasts stages[0][0] seconds
    first = forwards[0]
    seconds = re.findall(r"([\d.]+)-([\d.]+) s", first.findtext(f"{SVG}title") or "")[0]
    assert float(seconds[1]) - float(seconds[0]) == pytest.approx(perf.stages[0][0], abs=1e-4)


def test_svg_draws_the_interleaving() -> None:
    # 32 layers on pp 4 x vpp 2 chunks of 4; gbs 64 / (dp 4 x mbs 1) = 16 micro-batches, of which
    # whole groups of pp fit in MAX_OPS / vpp = 16 forwards per rank: all 16 are drawn
    lay = Layout(tp=2, pp=4, dp=4, vpp=2, sequence_parallel=True)
    j = job()
    perf = cost.estimate(j, lay)
    svg = timeline.pipeline_svg(j, lay, perf)
    assert (
        "interleaved 1F1B schedule drawn with all 16 micro-batches, 2 model chunks per rank" in svg
    )
    titles = [r.findtext(f"{SVG}title") or "" for r in _rects(svg)]
    for kind in ("forward", "backward"):
        for chunk in (0, 1):
            blocks = [t for t in titles if t.startswith(kind) and f"chunk {chunk}:" in t]
            assert len(blocks) == 4 * 16  # every rank, every micro-batch, once per chunk
    # a chunk's forward is half its stage's: rank 0's first block
    first = next(t for t in titles if t.startswith("forward of micro-batch 0, chunk 0"))
    start, end = map(float, re.findall(r"([\d.]+)-([\d.]+) s", first)[0])
    assert end - start == pytest.approx(perf.stages[0][0] / 2, abs=1e-4)
    # the odd chunks in the lighter shade
    fills = {r.get("fill") for r in _rects(svg) if "chunk 1:" in (r.findtext(f"{SVG}title") or "")}
    assert fills == {timeline.LIGHT_BLUE, timeline.LIGHT_GREEN}


def test_cli_explain_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_svg = tmp_path / "step.svg"
    code, out, err = run(["explain", str(PLAN), "--timeline", str(out_svg)], capsys)
    assert code == 0, err
    assert f"wrote {out_svg}" in out
    ET.fromstring(out_svg.read_text())
    code, out, err = run(["explain", str(PLAN), "--json", "--timeline", str(out_svg)], capsys)
    assert code == 0, err
    assert json.loads(out)["timeline"] == str(out_svg)
    # only SVG is drawn: bad input, exit 2, before any work
    code, out, err = run(["explain", str(PLAN), "--timeline", str(tmp_path / "step.png")], capsys)
    assert code == 2
    assert "--timeline" in err and "step.png" in err


def test_a_plans_own_group_size_is_drawn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interleaved schedule in groups of 5 micro-batches per virtual stage on 4 stages (8
    GPUs / pp 4 = dp 2, so 40 / (4 x 2) = 5 micro-batches: one whole group) is drawn in its own
    groups (`schedule.op_order`'s group; it raised on 5 micro-batches, not a multiple of 4: a
    fuzzer's internal error). explain draws the four ranks; --timeline writes the SVG."""
    line = tmp_path / "run.sh"
    line.write_text(
        "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 12 --hidden-size 512 "
        "--num-attention-heads 8 --micro-batch-size 4 --global-batch-size 40 --seq-length 1024 "
        "--max-position-embeddings 1024 --pipeline-model-parallel-size 4 "
        "--num-layers-per-virtual-pipeline-stage 1 --bf16 --vocab-size 32000 "
        "--tokenizer-type NullTokenizer --microbatch-group-size-per-virtual-pipeline-stage 5\n"
    )
    argv = ["explain", "--megatron-args", str(line), "--gpu", "h100-sxm-80gb"]
    code, out, err = run(argv, capsys)
    assert code == 0, err
    assert "schedule not drawn" not in out
    assert "interleaved 1F1B (3 chunks per rank)" in out, out
    svg = tmp_path / "t.svg"
    code, out, err = run([*argv, "--timeline", str(svg)], capsys)
    assert code == 0, err
    titles = [r.findtext(f"{SVG}title") or "" for r in _rects(svg.read_text())]
    # 12 layers / (pp 4 x 1 a virtual stage) = 3 chunks: every rank runs each of the 5
    # micro-batches' 3 chunks forward and backward once, 4 x 5 x 3 = 60 of each
    for kind in ("forward", "backward"):
        assert sum(t.startswith(f"{kind} of micro-batch") for t in titles) == 60


@pytest.mark.parametrize("columns", [1, 9, 10, 11])
def test_a_terminal_too_narrow_for_the_text_schedule(columns: int) -> None:
    """explain's text schedule takes the terminal's width less 10 for the rank labels: 10
    columns left none (a division by zero) and 9 a negative width (IndexError), a fuzzer's
    internal errors on `COLUMNS=10 planner explain` of a pipelined plan. It is drawn
    MIN_TIMELINE_WIDTH wide at least, and the terminal wraps it."""
    plan = check_plan(load_plan(EXAMPLES / "deepseek-v3-h800.toml"))
    j, lay = plan.job, plan.require_layout()
    assert lay.pp > 1
    text = io.StringIO()
    console = Console(file=text, width=columns, markup=False, emoji=False, soft_wrap=True)
    render.print_explain(console, j, lay, memory.estimate(j, lay), cost.estimate(j, lay))
    rows = re.findall(r"^rank +\d+ ([FBfb.]+)$", text.getvalue(), re.M)
    assert len(rows) == lay.pp
    assert all(len(r) >= render.MIN_TIMELINE_WIDTH for r in rows)


def test_the_ep_overlap_runs_one_more_warm_up_forward() -> None:
    """schedules.py:966-970 (d98e8a64): under --overlap-moe-expert-parallel-comm each rank's
    warm-up is one forward longer, so that no merged pair runs a micro-batch's forward with its
    own backward. By hand for pp 2, vpp 2, 4 micro-batches (groups of pp 2): rank 1's warm-up
    (2 - 1 - 1) x 2 + (2 - 1) x 2 = 2 becomes 3, rank 0's 4 becomes 5; without pipelining
    (combined_1f1b_schedule_for_no_pipelining) F0, then F1 beside B0."""
    rank1 = schedule.op_order(2, 4, 2, 1, ep_overlap=True)
    text = [f"{k}{i}.{c}" for k, i, c in rank1[:8]]
    assert text == ["F0.0", "F1.0", "F0.1", "F1.1", "B0.1", "F2.0", "B1.1", "F3.0"]
    rank0 = schedule.op_order(2, 4, 2, 0, ep_overlap=True)
    assert [f"{k}{i}.{c}" for k, i, c in rank0[:7]] == [
        "F0.0", "F1.0", "F0.1", "F1.1", "F2.0", "F3.0", "B0.1",
    ]  # fmt: skip
    assert [f"{k}{i}" for k, i, _ in schedule.op_order(1, 3, 1, 0, ep_overlap=True)] == [
        "F0", "F1", "B0", "F2", "B1", "B2",
    ]  # fmt: skip
    # the cost model's unmerged share is that warm-up over the rank's forwards
    assert schedule.unmerged_share(2, 2, 1, 4) == pytest.approx(3 / 8)


def test_the_drawn_step_ends_at_the_step_time() -> None:
    """The FP8 weight casts (once a step, in `compute`) were left out of the drawing: at pp 1
    the pipeline plus its tail is the whole step exactly (no bubble approximation)."""
    j = replace(job(), precision="fp8")
    lay = Layout(tp=2, pp=1, dp=16, sequence_parallel=True)
    perf = cost.estimate(j, lay)
    assert perf.unscheduled_s > 0  # the casts
    ops = schedule.simulate(1, lay.num_microbatches(64), *zip(*perf.stages, strict=True))
    b = perf.breakdown
    tail = b.dp_comm_exposed + b.optimizer + b.other + perf.unscheduled_s
    assert max(o.end for o in ops[0]) + tail == pytest.approx(perf.step_time_s)


def test_torchtitans_other_schedules_are_not_drawn_as_megatrons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPipe or zero-bubble plan was drawn (and labelled) as 1F1B: exit 2 before the work."""
    text = (EXAMPLES / "torchtitan-llama3.1-405b-h100.toml").read_text()
    plan = tmp_path / "gpipe.toml"
    plan.write_text(text.replace("[torchtitan]", '[torchtitan]\npipeline_schedule = "GPipe"', 1))
    code, _, err = run(["explain", str(plan), "--timeline", str(tmp_path / "s.svg")], capsys)
    assert code == 2 and "torchtitan's GPipe" in err
    assert not (tmp_path / "s.svg").exists()
