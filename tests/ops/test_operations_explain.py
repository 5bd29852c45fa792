"""Tests for planner.ops in the search and `planner explain`: objective values, summary lines,
tokens and operations in explain, pools priced at their own GPUs, where the interval comes from,
and the checkpoint sized by MTP layers and the layout's ZeRO stage.

Oracles: hand arithmetic in comments; the CLI contract (exit 2 naming the option for bad
input).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from operations_jobs import EXAMPLE, LAYOUT_64, make_job, perf_with_step
from paths import REPO

from planner.emit.prediction import summary_lines
from planner.inputs import catalog
from planner.inputs.layout import Layout
from planner.model import cost
from planner.ops import operations as ops
from planner.ops import resilience
from planner.ops.assumptions import AssumptionError, OpsParams

# ----------------------------------------------------------------------------- objectives, headers


def test_objective_values() -> None:
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    # 2.0 s / 1,048,576 tokens x 1e6 = 1.9073 s per million tokens
    thr = ops.objective_value(job, perf, "throughput")
    assert thr == pytest.approx(2.0 / 1_048_576 * 1e6)
    # goodput by hand, to first order 1 - delta/tau - (tau/2 + R')/M (Daly; the neglected terms
    # are ~1e-5 here): checkpoint 8,030,261,248 x 14 B over 8 nodes x 1 GB/s: delta = 14.053 s;
    # M = 86,400 / (419 / (54 x 16,384) x 64) = 2,850,581 s; Daly's tau = 8941.5 s, 4471 steps
    # of 2 s = 8942 s; R' = 600 s restart + 14.053 s load: 1 - 0.0015716 - 0.0017838 = 0.996645
    good = ops.objective_value(job, perf, "goodput")
    assert good == pytest.approx(thr / 0.996645, rel=1e-5)
    assert good > thr
    usd = ops.objective_value(job, perf, "cost")
    assert usd == pytest.approx(64 * good / 3600 * 3.24)
    priced = ops.objective_value(job, perf, "cost", OpsParams(price_usd_per_gpu_hour=1.0))
    assert priced == pytest.approx(64 * good / 3600)
    # steps of 1e6 s: 1e6 / 1,048,576 x 1e6 = 9.5e5 s a million tokens, x 64 GPUs / 3600 =
    # 1.7e4 GPU-hours (more with goodput), x $1.7e308 is past the largest float (1.8e308)
    slow = perf_with_step(job, LAYOUT_64, 1e6)
    with pytest.raises(AssumptionError, match=r"the cost overflows a float: .* x \$1\.7e\+308"):
        ops.objective_value(job, slow, "cost", OpsParams(price_usd_per_gpu_hour=1.7e308))
    faster = perf_with_step(job, LAYOUT_64, 1.5)
    for objective in ops.OBJECTIVES:
        assert ops.objective_value(job, faster, objective) < ops.objective_value(
            job, perf, objective
        )
    with pytest.raises(AssumptionError, match=r"objective.*'speed'"):
        ops.objective_value(job, perf, "speed")


def test_summary_lines() -> None:
    job = make_job(num_gpus=64)
    perf = perf_with_step(job, LAYOUT_64, 2.0)
    lines = summary_lines(ops.operations(job, perf, 15 * 10**12))
    text = "\n".join(lines)
    for word in ("days", "GPU-hours", "MWh", "checkpoint", "goodput", "$"):
        assert word in text
    short = "\n".join(summary_lines(ops.operations(job, perf, None)))
    assert "days" not in short and "goodput" in short


# ----------------------------------------------------------------------------- CLI


def test_explain_tokens_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", str(EXAMPLE), "--tokens", "15T", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    o = data["operations"]
    for key in ("days", "gpu_hours", "cost_usd", "energy_mwh", "checkpoint_interval_min"):
        assert o[key] > 0, key
    assert 0 < o["goodput"] <= 1
    assert o["tokens"] == 15 * 10**12
    assert data["performance"]["step_time_s"] > 0  # the rest of the contract is still there


def test_explain_without_ops_options_has_no_operations(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["explain", str(EXAMPLE), "--json"], capsys)
    assert code == 0, err
    assert "operations" not in json.loads(out)


def test_explain_tokens_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        ["explain", str(EXAMPLE), "--tokens", "1T", "--price", "2.5", "--async-checkpoint"], capsys
    )
    assert code == 0, err
    assert "Operations" in out and "goodput" in out and "asynchronous" in out and "$2.5" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--tokens", "100"], "--tokens: 100 tokens is less than one"),
        (["--tokens", "lots"], "--tokens"),
        (["--tokens", "1T", "--price", "-1"], "--price"),
        (["--tokens", "1T", "--failure-rate", "0"], "--failure-rate"),
        (["--tokens", "1T", "--storage-gb-per-s", "0"], "--storage-gb-per-s"),
        (["--tokens", "1T", "--pue", "0.5"], "--pue"),
        (["--restart-min", "-3"], "--restart-min"),
    ],
)
def test_explain_bad_ops_input_exits_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["explain", str(EXAMPLE), *args], capsys)
    assert code == 2
    assert needle in err
    assert "Traceback" not in err and out == ""


def test_pools_are_priced_and_powered_each_at_its_own_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1,024 A100 and 1,024 H100 (examples/pools-llama3.1-70b-h100-a100-plan.toml): each pool's
    GPU-hours at its catalog price and its GPUs at their TDP, its nodes at 8 GPUs' overhead
    (hand arithmetic below; all were the first pool's A100 figures), and a pool's own price."""
    plan = REPO / "examples" / "pools-llama3.1-70b-h100-a100-plan.toml"
    code, out, err = run(["explain", str(plan), "--tokens", "1T", "--json"], capsys)
    assert code == 0, err
    o = json.loads(out)["operations"]
    a100, h100 = catalog.get_gpu("a100-sxm-80gb"), catalog.get_gpu("h100-sxm-80gb")
    assert a100.price_usd_per_gpu_hour is not None and h100.price_usd_per_gpu_hour is not None
    half = o["gpu_hours"] / 2  # both pools run the same wall clock
    cost = half * (a100.price_usd_per_gpu_hour + h100.price_usd_per_gpu_hour)
    assert o["cost_usd"] == pytest.approx(cost, rel=1e-4)
    # (1,024 x 400 W + 1,024 x 700 W + 256 nodes x 8 x NODE_OVERHEAD_W_PER_GPU) x PUE 1.1
    nodes_w = 256 * 8 * ops.NODE_OVERHEAD_W_PER_GPU
    assert o["facility_power_mw"] == pytest.approx((1024 * (400 + 700) + nodes_w) * 1.1 / 1e6)
    dear = plan.read_text().replace(
        'gpu = "h100-sxm-80gb"\n', 'gpu = "h100-sxm-80gb"\nprice_usd_per_gpu_hour = 100.0\n'
    )
    path = tmp_path / "dear.toml"
    path.write_text(dear)
    code, out, err = run(["explain", str(path), "--tokens", "1T", "--json"], capsys)
    assert code == 0, err
    o = json.loads(out)["operations"]
    dear_cost = o["gpu_hours"] / 2 * (100 + a100.price_usd_per_gpu_hour)
    assert o["cost_usd"] == pytest.approx(dear_cost, rel=1e-5)  # six significant digits


@pytest.mark.parametrize(
    ("options", "source"),
    [
        # 0.1 min = 6 s against a 14.1 s step: under half a step, so one step, and said
        (
            ["--checkpoint-interval-min", "0.1"],
            "every 1 step = 14.1 s (given 0.1 min, under a step",
        ),
        (["--checkpoint-interval-min", "60"], "(given; Young"),
        (["--tokens", "15T"], "(Daly optimum; Young"),
    ],
)
def test_interval_says_where_it_comes_from(
    options: list[str], source: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["explain", str(EXAMPLE), *options], capsys)
    assert code == 0
    assert source in " ".join(out.split())


def test_asynchronous_interval_held_by_the_write_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Asynchronous save may not start a checkpoint before the last write ended: at 0.01 GB/s
    per node the 8B checkpoint (112 GB, one node) takes 11,242 s to write, far past Daly's
    optimum for a blocking host copy of 112 GB / 8 GPUs over 25 GB/s (0.56 s), ~7 min at an
    MTBF of 6,300 h: the interval is the write, labelled so, not "Daly optimum"."""
    argv = ["explain", str(EXAMPLE), "--async-checkpoint", "--storage-gb-per-s", "0.01"]
    code, out, _ = run(argv, capsys)
    assert code == 0
    assert "the write time, past Daly's optimum" in " ".join(out.split())


def test_checkpoint_counts_the_mtp_layers() -> None:
    """DeepSeek-V3's MTP layer is trained and saved with the model. The released checkpoint
    holds 685B parameters, the 671B main model and a 14B MTP module whose embedding and head
    (2 x 129,280 x 7,168 = 1.85B) Megatron shares with the main model: about 683.1B saved, which
    planner's count (671.03B + 11.61B of MTP layer) meets within the rounding of 685B and 14B."""
    job = make_job("deepseek-v3", num_gpus=1024)
    saved = resilience.checkpoint_bytes(job) / 14
    assert saved == pytest.approx(685e9 - 2 * 129_280 * 7_168, rel=2e-3)
    assert saved > 671.5e9  # the main model alone is 671.03B


def test_operations_size_the_checkpoint_by_the_layouts_zero_stage() -> None:
    """`operations` and the goodput objective pass the layout's ZeRO stage to `resilience`: at
    ZeRO 3 the checkpoint is Megatron-FSDP's fsdp_dtensor, the fp32 main weights and the fp32
    moments with no 16-bit copy (Megatron-LM d98e8a64 megatron_fsdp.py:1403,
    distrib_optimizer.py:1635-1657): 4 + 4 + 4 = 12 bytes a parameter, not the distributed
    optimizer's 2 + 4 + 4 + 4 = 14 (hand arithmetic)."""
    job = make_job("llama3.1-405b", num_gpus=16_384)
    perf = cost.estimate(job, Layout(tp=8, pp=16, dp=128, zero_stage=3))
    zero3 = ops.operations(job, perf, None, zero_stage=3).resilience
    assert zero3.checkpoint_bytes == 405_853_388_800 * 12
    assert ops.operations(job, perf, None).resilience.checkpoint_bytes == 405_853_388_800 * 14
    want = resilience.resilience(job, perf.step_time_s, OpsParams(), zero_stage=3).goodput
    got = ops.objective_value(job, perf, "goodput", zero_stage=3)
    assert got == pytest.approx(perf.step_time_s / job.tokens_per_step * 1e6 / want, rel=1e-12)
