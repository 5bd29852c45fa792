"""`planner scale` against its oracles: `planner suggest`'s own first row at the same size
(torchtitan jobs included), hand arithmetic for failures and figures, and the CLI contract
(exit 2 naming the option and value for bad input, never a traceback).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_run import run

from planner.cli import render_scale

TITAN_JOB = """\
[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 64
[training]
framework = "torchtitan"
seq_length = 8192
global_batch_size = 128
"""


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


@pytest.mark.parametrize("n", [8, 64])
def test_torchtitan_scale_is_suggests_first_row(
    n: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Oracle: `planner suggest --top 1` at the same size. scale searched the layouts alone
    (`top_k.search`), not torchtitan's settings: at 8 GPUs it reported tp1 pp2 dp2 cp2 at
    14.74 s a step where suggest's first row, tp1 pp1 dp4 cp2 with reshard_after_forward
    "never", takes 14.41 s (QA repro_1). The point says which settings it assumed (those of
    suggest's first row off the job's defaults: "never" until FSDP2's per-micro-batch gathers
    under it at pp 1 were charged, 2026-12-06, none since)."""
    job = tmp_path / "tt.toml"
    job.write_text(TITAN_JOB)
    point = _json(["scale", str(job), "--num-gpus", str(n)], capsys)["points"][0]
    first = _json(["suggest", str(job), "--num-gpus", str(n), "--top", "1"], capsys)
    top = first["candidates"][0]
    ours, theirs = point["performance"], top["performance"]
    assert ours["step_time_s"] == theirs["step_time_s"]
    assert ours["tokens_per_s_per_gpu"] == theirs["tokens_per_s_per_gpu"]
    for degree in ("tp", "pp", "dp", "cp"):
        assert point["parallel"][degree] == top["parallel"][degree], degree
    assert point["torchtitan"] == top["torchtitan"]
    job_default = {"reshard_after_forward": "default", "dp_replicate": 1}
    assumed = {k: v for k, v in top["torchtitan"].items() if job_default.get(k, v) != v}
    assert point["torchtitan_assumed"] == assumed


def test_a_size_without_progress_is_a_point_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """70B at 0.3 interruptions per GPU-day: on 16,384 GPUs one every 86,400 / (0.3 x 16,384)
    = 17.6 s against a 10 min restart, so Daly's e^(R/M) alone is e^(600 / 17.6) ~ 6e14 and
    goodput is below MIN_GOODPUT (1e-9): that size is a point with a note; 8,192 GPUs (one every
    35 s) still train, and the curve exits 0 (it aborted with exit 2 blaming --restart-min,
    QA repro_2). Its goodput prints as itself, not 0.0 (repro_4)."""
    data = _json(
        ["scale", "--model", "llama3.1-70b", "--num-gpus", "8192,16384", "--failure-rate", "0.3"],
        capsys,
    )
    ok, stalled = data["points"]
    assert ok["feasible"] and 0 < ok["operations"]["goodput"] < 1e-6
    assert ok["operations"]["days"] is None  # no --tokens
    assert not stalled["feasible"] and "operations" not in stalled
    assert stalled["note"].startswith("the job would make no progress (goodput ")
    assert "every 17.6 s" in stalled["note"] and "0.3 per GPU-day x 16,384 GPUs" in stalled["note"]
    assert stalled["layout"]  # its layout and performance are there
    code, out, _ = run(
        ["scale", "--model", "llama3.1-70b", "--num-gpus", "8192,16384", "--failure-rate", "0.3"],
        capsys,
    )
    assert code == 0 and "no progress" in out.replace("\n", " ")


def test_no_size_with_progress_exits_2_naming_the_options_behind_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every size stalled: exit 2, led by the option the user gave (--failure-rate), the
    restart it outruns named as the default it is (the message blamed --restart-min alone)."""
    code, out, err = run(
        ["scale", "--model", "llama3.1-70b", "--num-gpus", "16384", "--failure-rate", "0.3"],
        capsys,
    )
    assert code == 2 and out == ""
    assert "planner: error: --failure-rate: the job would make no progress" in err
    assert "(--restart-min 10, the default; --failure-rate 0.3)" in err
    assert "Traceback" not in err
    # the restart given, the failure rate the default: led by --restart-min
    code, _, err = run(["scale", "--num-gpus", "8", "--restart-min", "1e9"], capsys)
    assert code == 2 and "planner: error: --restart-min: the job would make no" in err
    assert "--restart-min 1e+09;" in err and "(the default)" not in err
    assert re.search(r"--failure-rate 0\.000473\d*, the default\)", err), err


def test_tiny_figures_are_not_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """QA repro_4: 100M tokens on 8 H100 print energy 0.0 MWh; 5 failures per GPU-day on 512
    GPUs a goodput of 0.0 beside 234,688,760 days. Oracles: energy = facility power x wall
    time (MW x days x 24 h), goodput = failure-free days / days (T_train / T_wall)."""
    o = _json(["scale", "--num-gpus", "8", "--tokens", "100M"], capsys)["points"][0]["operations"]
    assert o["energy_mwh"] > 0
    assert o["energy_mwh"] == pytest.approx(o["facility_power_mw"] * o["days"] * 24, rel=1e-4)
    o = _json(["scale", "--num-gpus", "512", "--failure-rate", "5", "--tokens", "1T"], capsys)[
        "points"
    ][0]["operations"]
    assert 0 < o["goodput"] < 1e-6 and o["effective_tokens_per_s"] > 0
    assert o["goodput"] == pytest.approx(o["days_no_failures"] / o["days"], rel=1e-4)
    assert o["effective_tokens_per_s"] == pytest.approx(o["tokens_per_s"] * o["goodput"], rel=1e-4)


@pytest.mark.parametrize("price", ["3.24", "0.02"])
def test_plot_labels_dollars_as_the_table_does(
    price: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA repro_5: the SVG labelled $ per million tokens with 2 decimals ("$0.09" at every
    size, "$0.00" at --price 0.02). Oracle: the table's column, `render_scale.usd_text` of the
    same figure; at $0.02 a GPU-hour 8 GPUs cost 8 x 0.02 / 3,600 = $4.4e-5 a second, so a
    million tokens costs $4.4e-5 / tokens/s x 1e6, well above 0 and below $0.01."""
    svg = tmp_path / "c.svg"
    data = _json(
        ["scale", "--num-gpus", "8,16", "--tokens", "1T", "--price", price, "--plot", str(svg)],
        capsys,
    )
    text = svg.read_text()
    labels = re.findall(r">\$([0-9.,]+)<", text)
    usd = [p["operations"]["usd_per_million_tokens"] for p in data["points"]]
    assert labels == [render_scale.usd_text(v) for v in usd]
    assert "0.00" not in labels
    first = data["points"][0]["operations"]
    by_hand = 8 * float(price) / 3600 / first["effective_tokens_per_s"] * 1e6
    assert usd[0] == pytest.approx(by_hand, rel=1e-4)


@pytest.mark.parametrize("command", ["scale", "explain"])
def test_gpu_power_above_the_tdp_is_refused(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--gpu-power-w 5000 on an H100 (TDP 700 W) was accepted, while a plan's power_limit_w
    above the TDP is refused: now exit 2 naming the option, the value and the TDP."""
    example = str(Path(__file__).resolve().parents[2] / "examples" / "llama3.1-8b-h100.toml")
    argv = ["scale", "--num-gpus", "8"] if command == "scale" else ["explain", example]
    code, out, err = run([*argv, "--tokens", "1T", "--gpu-power-w", "5000"], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    assert "--gpu-power-w: 5000 W per GPU is above h100-sxm-80gb's TDP (700 W)" in err
    code, _, err = run([*argv, "--gpu-power-w", "700"], capsys)  # the TDP itself is fine
    assert code == 0, err


def test_tokens_below_one_step_are_named_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    """`--tokens 1.5` said "2 tokens is less than one step" (the budget rounded before it was
    named): the message shows what the user gave."""
    code, out, err = run(["scale", "--num-gpus", "8", "--tokens", "1.5"], capsys)
    assert code == 2 and out == ""
    assert "--tokens: 1.5 tokens is less than one optimizer step (1,048,576 tokens" in err
