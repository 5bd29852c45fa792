"""Tests for planner.search.scaling and planner.cli.plot.

Oracles: hand-built curves (a fake `best_layout` with round step times, so efficiencies and
marginal efficiencies are hand arithmetic), the definitions in planner/scaling.py's docstring, the
search on a small real job, an XML parser for the SVG, and the CLI contract.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.cli import plot, render_scale
from planner.cli.scale import parse_sizes
from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance
from planner.ops.assumptions import AssumptionError, OpsParams
from planner.search import scaling

NEGLIGIBLE_FAILURES = OpsParams(
    failure_rate_per_gpu_day=1e-12,
    storage_gb_per_s_per_node=1e9,
    host_copy_gb_per_s=1e9,
    price_usd_per_gpu_hour=2.0,
)
"""Failures and checkpoints made negligible: goodput ~ 1, so efficiencies are step-time ratios."""


def make_job(model: str = "llama3.1-8b", num_gpus: int = 8) -> Job:
    g = catalog.get_gpu("h100-sxm-80gb")
    cluster = ClusterSpec(
        gpu=g, num_gpus=num_gpus, gpus_per_node=8, memory_gib=g.memory_gib, tiers=g.tiers
    )
    return Job(
        arch=catalog.resolve_model(model), cluster=cluster, seq_length=8192, global_batch_size=128
    )


BASE_PERF = cost.estimate(make_job(), Layout(tp=8, sequence_parallel=True))


def fake_best(table: dict[int, tuple[Layout, float] | None]) -> scaling.BestLayout:
    """best_layout from a table: GPU count -> (layout, step time) or None."""

    def best(job: Job) -> tuple[Layout, Performance] | None:
        entry = table[job.cluster.num_gpus]
        if entry is None:
            return None
        layout, step = entry
        return layout, replace(BASE_PERF, step_time_s=step)

    return best


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("64..16384", [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]),
        ("64..1000", [64, 128, 256, 512, 1000]),
        ("64..4096x4", [64, 256, 1024, 4096]),
        ("512,8,64", [8, 64, 512]),
        ("256", [256]),
        ("8..8", [8]),
    ],
)
def test_parse_sizes(text: str, expected: list[int]) -> None:
    assert parse_sizes(text) == expected


@pytest.mark.parametrize("text", ["0..8", "16..8", "abc", "64..128x1", "8,,16", "0", "-8"])
def test_parse_sizes_rejects(text: str) -> None:
    with pytest.raises(InputError, match="--num-gpus"):
        parse_sizes(text)


def test_an_oversized_step_factor_is_named_as_one() -> None:
    """QA: '8..16x99999999999999999999' was refused as 'at most 16,777,216 GPUs', naming a GPU
    count the command line does not give."""
    with pytest.raises(InputError) as info:
        parse_sizes("8..16x99999999999999999999")
    assert "step factor" in str(info.value) and "GPUs" not in str(info.value)
    with pytest.raises(InputError, match="at most 16,777,216 GPUs"):
        parse_sizes("8..99999999999999999999")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("1..16777217", "16777217"),  # hardware.MAX_GPUS = 2^24 = 16,777,216, plus one
        ("8,16777217", "16777217"),
        ("1..99999999999999999999", "99999999999999999999"),  # not a power of two below it
        ("9" * 5000, "5,000 characters"),  # past Python's 4,300-digit int() limit
    ],
)
def test_parse_sizes_names_a_count_past_the_largest(text: str, named: str) -> None:
    """A fuzzer's sizes: past MAX_GPUS the range was planned to its end and then failed with
    pydantic's text, naming 33,554,432 (a size nobody gave); 5,000 digits an internal error."""
    with pytest.raises(InputError, match=f"--num-gpus: .*{named}.*at most 16,777,216 GPUs"):
        parse_sizes(text)


def test_job_at_changes_only_the_gpu_count() -> None:
    job = make_job(num_gpus=8)
    big = scaling.job_at(job, 1024)
    assert big.cluster.num_gpus == 1024
    assert big.cluster.gpu == job.cluster.gpu and big.arch == job.arch
    assert big.global_batch_size == job.global_batch_size


# ----------------------------------------------------------------------------- the curve


def test_efficiency_rise_names_the_layout_change_and_knee_is_found() -> None:
    """Tokens per step T = 128 x 8192. Per-GPU throughput at 8 GPUs: T / 8 s / 8 = T/64.
    16 GPUs at 4.4 s: T/4.4/16 = T/70.4 -> efficiency 64/70.4 = 90.9 %;
      marginal = (T/4.4 - T/8) / 8 / (T/64) = (0.22727 - 0.125) x 8 = 81.8 %
    32 GPUs at 2.0 s (pp 8 -> 4): T/64 -> efficiency 100 %, up from 90.9 %: the note names pp 8->4
      marginal = (T/2 - T/4.4) / 16 / (T/64) = (0.5 - 0.22727) x 4 = 109.1 %
    64 GPUs at 1.6 s: T/1.6/64 -> efficiency 62.5 %;
      marginal = (T/1.6 - T/2) / 32 / (T/64) = 0.125 x 2 = 25 % < 50 %: stops paying at 64
    """
    table: dict[int, tuple[Layout, float] | None] = {
        8: (Layout(pp=8, dp=1), 8.0),
        16: (Layout(pp=8, dp=2), 4.4),
        32: (Layout(pp=4, dp=8), 2.0),
        64: (Layout(pp=4, dp=16), 1.6),
    }
    curve = scaling.scale(
        make_job(), [8, 16, 32, 64], fake_best(table), ops_params=NEGLIGIBLE_FAILURES
    )
    eff = [p.efficiency for p in curve.points]
    assert eff == pytest.approx([1.0, 64 / 70.4, 1.0, 0.625], rel=1e-6)
    marginal = [p.marginal_efficiency for p in curve.points]
    assert marginal[0] is None
    assert marginal[1:] == pytest.approx([(1 / 4.4 - 0.125) * 8, (0.5 - 1 / 4.4) * 4, 0.25])
    assert "efficiency up" in curve.points[2].note and "pp 8->4" in curve.points[2].note
    assert "dp" not in curve.points[2].note.split(":", 1)[1]  # dp is the consequence, not cause
    assert curve.points[1].note == ""
    assert curve.stops_paying_at == 64
    assert "stops paying" in curve.points[3].note
    rows = render_scale.scale_rows(curve)
    assert rows[2][-1] == curve.points[2].note and rows[3][4] == "62%"


def test_falling_throughput_is_a_loss_not_nothing() -> None:
    """8 GPUs at 8 s, 16 at 10 s (the fuzzer's 192 -> 200 GPUs: tokens/s fell to a quarter):
    marginal = (T/10 - T/8) / 8 / (T/64) = -0.025 x 8 = -20 %; the note said "buys 0%"."""
    table: dict[int, tuple[Layout, float] | None] = {
        8: (Layout(pp=8, dp=1), 8.0),
        16: (Layout(pp=8, dp=2), 10.0),
    }
    curve = scaling.scale(make_job(), [8, 16], fake_best(table), ops_params=NEGLIGIBLE_FAILURES)
    assert curve.points[1].marginal_efficiency == pytest.approx(-0.2)
    assert "loses 20% of a GPU at 8 (throughput falls)" in curve.points[1].note


def test_every_size_that_loses_throughput_says_so() -> None:
    """After the first loss (which is where adding GPUs stops paying), each later size that is
    slower outright still says so; it had no note. 8 GPUs at 8 s, 16 at 10 s, 32 at 10.05 s:
    marginal (T/10.05 - T/10) / 16 / (T/64) = 4 x (0.0995025 - 0.1) = -0.199 %, printed with a
    decimal (it showed as "-0%"); the infeasible row's count with separators."""
    table: dict[int, tuple[Layout, float] | None] = {
        8: (Layout(pp=8, dp=1), 8.0),
        16: (Layout(pp=8, dp=2), 10.0),
        32: (Layout(pp=8, dp=4), 10.05),
        1024: None,
    }
    sizes = [8, 16, 32, 1024]
    curve = scaling.scale(make_job(), sizes, fake_best(table), ops_params=NEGLIGIBLE_FAILURES)
    assert curve.points[2].note == "throughput falls: fewer tokens/s than at 16 GPUs"
    rows = render_scale.scale_rows(curve)
    assert rows[2][5] == "-0.2%"
    assert rows[3][0] == "1,024"


def test_cost_column_keeps_three_digits_under_a_dollar() -> None:
    """Two decimals printed $0.0182 and $0.0188 per million tokens both as 0.02 (gemma2-2b on 8
    and 64 MI300X): three significant digits under a dollar, cents above."""
    assert render_scale.usd_text(0.018234) == "0.0182"
    assert render_scale.usd_text(12.345) == "12.35"
    assert render_scale.usd_text(None) == "-"


def test_rise_with_only_dp_changed_says_so() -> None:
    table: dict[int, tuple[Layout, float] | None] = {
        8: (Layout(tp=8, dp=1), 8.0),
        16: (Layout(tp=8, dp=2), 3.9),
    }
    curve = scaling.scale(make_job(), [8, 16], fake_best(table), ops_params=NEGLIGIBLE_FAILURES)
    assert "dp only (dp 1->2)" in curve.points[1].note


def test_sizes_without_a_layout() -> None:
    table: dict[int, tuple[Layout, float] | None] = {
        8: None,
        16: (Layout(pp=2, dp=1, tp=8), 4.0),
        32: None,
        64: (Layout(pp=2, dp=4, tp=8), 1.0),
    }
    curve = scaling.scale(make_job(), [64, 8, 32, 16], fake_best(table))
    assert [p.num_gpus for p in curve.points] == [8, 16, 32, 64]
    assert [p.feasible for p in curve.points] == [False, True, False, True]
    assert curve.points[0].note == "no layout fits"
    assert curve.baseline is not None and curve.baseline.num_gpus == 16
    assert curve.points[1].efficiency == 1.0
    # 64 compared with 16 (the previous feasible size), not with 32
    assert curve.points[3].marginal_efficiency is not None
    nothing = scaling.scale(make_job(), [8, 16], fake_best({8: None, 16: None}))
    assert nothing.baseline is None and nothing.stops_paying_at is None


def test_days_and_cost_per_point() -> None:
    """8 GPUs at 2 s per 1,048,576-token step, 1,048,576,000 tokens: 1,000 steps = 2,000 s;
    $ per M tokens = 8 x $2 / 3600 s / 524,288 tokens/s x 1e6 = $0.008477."""
    table: dict[int, tuple[Layout, float] | None] = {8: (Layout(tp=8), 2.0)}
    curve = scaling.scale(
        make_job(), [8], fake_best(table), tokens=1_048_576_000, ops_params=NEGLIGIBLE_FAILURES
    )
    o = curve.points[0].operations
    assert o is not None and o.days is not None and o.usd_per_million_tokens is not None
    assert o.days * 86_400 == pytest.approx(2000.0, rel=1e-6)
    assert o.usd_per_million_tokens == pytest.approx(16 / 3600 / 524_288 * 1e6, rel=1e-6)


def test_bad_inputs() -> None:
    best = fake_best({8: (Layout(tp=8), 2.0)})
    # a budget below one step is bad at every size (the command line names it --tokens)
    with pytest.raises(AssumptionError, match="less than one optimizer step") as e:
        scaling.scale(make_job(), [8], best, tokens=1000)
    assert e.value.field == "tokens"
    with pytest.raises(InputError, match="threshold: must be in"):
        scaling.scale(make_job(), [8], best, threshold=0)
    with pytest.raises(InputError, match="no GPU counts"):
        scaling.scale(make_job(), [], best)


def test_layout_change() -> None:
    a = Layout(tp=2, pp=4, dp=8, micro_batch_size=1, recompute="none", sequence_parallel=True)
    b = a.with_(pp=2, dp=16, micro_batch_size=2, recompute="full", sequence_parallel=False)
    assert scaling.layout_change(a, b) == "pp 4->2, mbs 1->2, recompute none->full, sp off"
    c = a.with_(etp=1, ep=2)
    assert scaling.layout_change(a, c) == "ep 1->2, etp None->1"
    assert scaling.layout_change(a, c.with_(ep=1), moe=False) == "dp only (dp 8->8)"
    # offloading and recompute details were never named ("dp only" where 23 offloaded layers
    # became 19); a detail is left out where its policy changed too
    d = a.with_(cpu_offloading_num_layers=23)
    assert scaling.layout_change(d, d.with_(cpu_offloading_num_layers=19)) == "offload 23->19"
    e = a.with_(recompute="selective", recompute_modules=("core_attn",))
    f = e.with_(recompute_modules=("core_attn", "mlp"))
    assert scaling.layout_change(e, f) == "recompute modules core_attn->core_attn,mlp"
    assert scaling.layout_change(a, f) == "recompute none->selective"


def test_layout_change_names_every_field_but_dp() -> None:
    """Each Layout field is compared (a field added later must be named here or in
    _CHANGE_FIELDS); the split's own fields go with pipeline_layers (the stages' placement,
    v_stages, is in the split's key: `Layout.split_key`)."""
    named = {attr for attr, _ in scaling._CHANGE_FIELDS}
    split = {"pipeline_layout", "account_for_embedding_in_pipeline_split"}
    split |= {"account_for_loss_in_pipeline_split", "v_stages"}
    assert {f.name for f in dataclasses.fields(Layout)} - named == {"dp"} | split


def test_real_search_small_curve() -> None:
    curve = scaling.scale(make_job(), [8, 16, 32], tokens=100 * 10**9)
    assert all(p.feasible for p in curve.points)
    assert curve.points[0].efficiency == 1.0
    for p in curve.points:
        assert p.layout is not None and p.layout.num_gpus == p.num_gpus
    data = render_scale.curve_dict(curve)
    json.dumps(data)  # serialisable
    assert [p["num_gpus"] for p in data["points"]] == [8, 16, 32]
    assert data["points"][0]["operations"]["days"] > data["points"][2]["operations"]["days"]


# ----------------------------------------------------------------------------- plot


def test_svg_is_well_formed_and_marks_the_knee(tmp_path: Path) -> None:
    table: dict[int, tuple[Layout, float] | None] = {
        8: None,
        16: (Layout(pp=8, dp=2), 4.0),
        32: (Layout(pp=4, dp=8), 1.8),
        64: (Layout(pp=4, dp=16), 1.6),
    }
    curve = scaling.scale(
        make_job(), [8, 16, 32, 64], fake_best(table), tokens=10**12, ops_params=NEGLIGIBLE_FAILURES
    )
    svg = plot.scaling_svg(curve)
    root = ET.fromstring(svg)
    assert root.tag.endswith("svg")
    assert "stops paying" in svg and "pp 8-&gt;4" in svg and "no layout fits at 8" in svg
    path = tmp_path / "curve.svg"
    plot.write_svg(path, svg)
    assert path.read_text() == svg
    with pytest.raises(InputError, match="--plot"):
        plot.write_svg(tmp_path / "curve.png", svg)


@pytest.mark.parametrize("value", [0.0, 3.5, 41_000.0, 1e20, -2e17])
def test_one_value_gets_an_axis_around_it(value: float) -> None:
    """One GPU count plots one value a panel (`scale --num-gpus 8 --price 1e20 --plot`: its cost
    a million tokens): the axis spans 5% of it (at least 1) either side, the value inside the
    panel, two ticks or more. It padded by 1 only, which vanishes beside 1e20 (1e20 - 1 ==
    1e20): a division by zero, a fuzzer's internal error."""
    panel = plot._Panel(100.0, [8], "one point")
    panel.set_y(value, value, log=False)
    assert panel.top < panel.ymap(value) < panel.bottom
    ticks = [i for i in panel.items if i.startswith("<line")]
    assert len(ticks) >= 2


def test_svg_without_budget_or_layouts() -> None:
    table: dict[int, tuple[Layout, float] | None] = {8: (Layout(tp=8), 2.0), 16: None}
    ET.fromstring(plot.scaling_svg(scaling.scale(make_job(), [8, 16], fake_best(table))))
    nothing = scaling.scale(make_job(), [8], fake_best({8: None}))
    assert "No GPU count" in plot.scaling_svg(nothing)


# ----------------------------------------------------------------------------- CLI


def test_cli_scale_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg = tmp_path / "s.svg"
    code, out, err = run(
        [
            "scale", "--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "8..32",
            "--tokens", "1T", "--plot", str(svg), "--json",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert [p["num_gpus"] for p in data["points"]] == [8, 16, 32]
    assert data["points"][0]["efficiency"] == 1.0
    assert "days" in data["points"][0]["operations"]
    ET.fromstring(svg.read_text())


def test_cli_scale_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["scale", "--num-gpus", "8,16", "--tokens", "100B"], capsys)
    assert code == 0, err
    assert "efficiency" in out and "$/M tokens" in out


def test_cli_scale_names_a_job_no_layout_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """A job that breaks a rule of its own (SC21's 1.7B GPT has 2,048 learned positions: 4,096
    tokens run in no layout) runs at no size: bad input, exit 2 before any size is planned,
    naming the rule's field and message as `check` does (`job_checks.check_job`)."""
    argv = ["scale", "--model", "gpt-sc21-1.7b", "--seq-length", "4096", "--num-gpus", "8,16"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 2, err
    assert out == ""
    assert "<flags>: training.seq_length:" in err and "max_position_embeddings (2048)" in err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--num-gpus", "lots"], "--num-gpus"),
        (["--num-gpus", "8", "--plot", "x.png"], "--plot"),
        (["--num-gpus", "8", "--tokens", "5"], "--tokens"),
        (["--num-gpus", "8", "--price", "0"], "--price"),
    ],
)
def test_cli_scale_bad_input(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["scale", *args], capsys)
    assert code == 2 and needle in err and "Traceback" not in err


def test_cli_scale_refuses_a_job_over_pools_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """It said "--num-gpus: give either pools or one GPU kind (got 8 with 2 pools)" where no
    --num-gpus was given (8: the first size scale put in)."""
    job = REPO / "examples" / "pools-llama3.1-70b-h100-a100.toml"
    code, _, err = run(["scale", str(job)], capsys)
    assert code == 2
    assert f"{job}: cluster.pools: scale plans one GPU kind" in err
