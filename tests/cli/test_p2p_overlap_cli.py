"""`planner check --megatron-args` on a line with --no-overlap-p2p-communication: read as the
plan's `overlap_p2p_comm` (no longer only for what Megatron refuses), priced and held as the
blocking schedule (planner.model.blocking_p2p, early_receives.held_counts), and drawn so
(`explain --timeline`, planner.cli.timeline).

Oracle: Megatron-LM d98e8a64 training/arguments.py:3118-3120 (the flag), :1000-1009 (pp > 2);
by hand: the same line with and without the flag differs only in the pipeline's messages, so
the peak moves by at most one message a rank (pp 4, vpp 2: 3 held at a middle rank's peak,
not 4), s x h x 2 B = 2048 x 1024 x 2 = 4 MiB at tp 1, times the allocator's 1.10 on
activations (memory.FRAGMENTATION), the JSON's GiB rounded to 0.001; and the step only grows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.cli import timeline
from planner.inputs.plan import load_plan
from planner.model import cost
from planner.search.rules import check_plan

LINE = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 16 --hidden-size 1024 "
    "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
    "--micro-batch-size 1 --global-batch-size 64 --tokenizer-type NullTokenizer "
    "--vocab-size 32000 --bf16 --pipeline-model-parallel-size 4 "
    "--num-layers-per-virtual-pipeline-stage 2"
)


def _check(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str) -> dict:
    script = tmp_path / "train.sh"
    script.write_text(LINE + extra + "\n")
    argv = ["check", "--megatron-args", str(script), "--gpu", "h100-sxm-80gb", "--json"]
    code, out, err = run([*argv, "--num-gpus", "8"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def test_the_flag_is_read_held_and_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on = _check(tmp_path, capsys, "")
    off = _check(tmp_path, capsys, " --no-overlap-p2p-communication")
    assert on["parallel"]["overlap_p2p_comm"] is True
    assert off["parallel"]["overlap_p2p_comm"] is False
    message = 1.10 * 2048 * 1024 * 2 / 2**30  # GiB
    for a, b in zip(on["memory"]["stages"], off["memory"]["stages"], strict=True):
        assert a["total_gib"] - message - 1e-3 <= b["total_gib"] <= a["total_gib"]
    assert off["memory"]["stages"][1]["total_gib"] < on["memory"]["stages"][1]["total_gib"]
    assert off["performance"]["step_time_s"] > on["performance"]["step_time_s"]


def test_pp_2_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "train.sh"
    line = LINE.replace("--pipeline-model-parallel-size 4", "--pipeline-model-parallel-size 2")
    script.write_text(line + " --no-overlap-p2p-communication\n")
    argv = ["check", "--megatron-args", str(script), "--gpu", "h100-sxm-80gb", "--num-gpus", "8"]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert "--no-overlap-p2p-communication" in err and "> 2 (got 2" in err


def test_explain_draws_the_exchanges_in_each_ranks_ops(tmp_path: Path) -> None:
    # the drawn schedule takes the blocking exchanges the step is priced with (in each rank's
    # ops, no hop between ranks), and says so; with the overlap, the hop between ranks
    path = tmp_path / "plan.toml"
    path.write_text(PLAN)
    plan = check_plan(load_plan(path))
    job, lay = plan.job, plan.require_layout()
    off = cost.estimate(job, lay)
    on = cost.estimate(job, lay.with_(overlap_p2p_comm=True))
    assert on.p2p_blocking == () and len(off.p2p_blocking) == 4
    hop = on.p2p_hop  # every rank's neighbours one hop away: the ends send 3 a micro-batch, 4 else
    assert off.p2p_blocking == pytest.approx((3 * hop, 4 * hop, 4 * hop, 3 * hop))
    assert "blocking PP exchanges" in timeline.pipeline_svg(job, lay, off)
    assert "blocking PP exchanges" not in timeline.pipeline_svg(job, lay, on)


PLAN = """
[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 32
[training]
seq_length = 4096
global_batch_size = 64
[parallel]
tp = 2
pp = 4
vpp = 2
overlap_p2p_comm = false
"""
