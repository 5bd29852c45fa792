"""planner.cli.ops_options: the token budget read exactly, and the messages that name options.

Oracles: the decimal value of what was typed (Python's int of the digits, the suffixes' powers
of ten), and hand-picked messages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run
from paths import REPO

from planner.cli.ops_options import named_options
from planner.inputs import catalog
from planner.inputs.errors import InputError
from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import Job
from planner.inputs.units import parse_tokens
from planner.ops import resilience
from planner.ops.assumptions import OpsParams
from planner.ops.resilience import NoProgress


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        # 2^52 - 1.5: floats are 1 apart there, so float() makes the tie ...494 (round half to
        # even) and round() keeps it; read in decimal it rounds half up to ...495
        ("4503599627370494.5", 4_503_599_627_370_495),
        ("9P", 9 * 10**15),  # the largest budget (units.MAX_TOKENS)
        ("15T", 15 * 10**12),
        ("2.5e12", 2_500_000_000_000),
        ("1.2m", 1_200_000),
        ("1_000,000", 1_000_000),
        ("0.3333333333333333333T", 333_333_333_333),
        ("1.5", 2),  # half a token rounds up
        (" 300B ", 300 * 10**9),
    ],
)
def test_budget_is_read_exactly(text: str, tokens: int) -> None:
    assert parse_tokens(text, "--tokens") == tokens


@pytest.mark.parametrize("text", ["lots", "", "1e400", "0.4", "-5", "123456789012345678901"])
def test_bad_budget_names_the_option(text: str) -> None:
    with pytest.raises(InputError, match=r"^--tokens: "):
        parse_tokens(text, "--tokens")


def test_no_progress_is_named_under_the_option_given() -> None:
    """100 interruptions per GPU-day on 32 GPUs is one every 86,400 / 3,200 = 27 s against a
    10 min restart (as in tests/ops/test_operations.py): the restart decides it, but the user
    gave the failure rate, so the message leads with --failure-rate and names the restart as
    the default it is (it led with --restart-min, which the user never gave); given the restart
    too, it leads with --restart-min."""
    g = catalog.get_gpu("h100-sxm-80gb")
    cluster = ClusterSpec(
        gpu=g, num_gpus=32, gpus_per_node=8, memory_gib=g.memory_gib, tiers=g.tiers
    )
    job = Job(
        arch=catalog.resolve_model("llama3.1-8b"),
        cluster=cluster,
        seq_length=8192,
        global_batch_size=128,
    )
    rate = OpsParams(failure_rate_per_gpu_day=100.0)
    with pytest.raises(NoProgress) as stalled:
        resilience.resilience(job, 2.0, rate)
    assert stalled.value.field == "restart_min"
    assert stalled.value.involved == ("restart_min", "failure_rate_per_gpu_day")
    with pytest.raises(InputError) as e, named_options():
        resilience.resilience(job, 2.0, rate)
    text = str(e.value)
    assert text.startswith("--failure-rate: the job would make no progress (goodput ")
    assert text.endswith("(--restart-min 10, the default; --failure-rate 100)")
    both = OpsParams(failure_rate_per_gpu_day=100.0, restart_min=20.0)
    with (
        pytest.raises(
            InputError, match=r"^--restart-min: .*\(--restart-min 20; --failure-rate 100\)$"
        ),
        named_options(),
    ):
        resilience.resilience(job, 2.0, both)


def test_explain_checks_the_options_as_scale_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """explain --tokens / --gpu-power-w go through the same checks as scale's: the budget as
    typed ("1.5 tokens", not the "2" it rounds to), the power against the TDP (H100 SXM: 700 W);
    and its JSON figures keep their significant digits. By hand: 100M tokens at global batch 64 x
    8,192 = 524,288 tokens a step are ceil(190.7) = 191 steps, far under a day: energy below
    0.01 MWh, which two fixed decimals printed as 0.0."""
    plan = tmp_path / "p.toml"
    plan.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 64\n[parallel]\ntp = 8\n"
    )
    code, _, err = run(["explain", str(plan), "--tokens", "1.5"], capsys)
    assert code == 2 and "--tokens: 1.5 tokens is less than one optimizer step" in err
    code, _, err = run(["explain", str(plan), "--gpu-power-w", "5000"], capsys)
    assert code == 2 and "--gpu-power-w: 5000 W" in err and "700 W" in err
    code, out, _ = run(["explain", str(plan), "--tokens", "100M", "--json"], capsys)
    o = json.loads(out)["operations"]
    assert code == 0 and o["steps"] == 191 and 0 < o["energy_mwh"] < 0.01


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # exited 0 with 290-digit days and a 300-digit `tokens` in the JSON
        (["--tokens", "1e300"], "--tokens: at most 9P tokens"),
        # exited 0 with a 153-digit `checkpoint_interval_steps` (past 2^53)
        (["--failure-rate", "1e-300"], "--failure-rate: 1e-300 is too small: at least 1e-12"),
        # a 250-digit interval in steps without a budget
        (["--checkpoint-interval-min", "1e250"], "--checkpoint-interval-min: 1e+250 is too large"),
        # 290-digit MWh in explain's energy line
        (["--tokens", "1T", "--pue", "1e250"], "--pue: 1e+250 is too large: at most 10"),
        (["--node-overhead-w", "1e250"], "--node-overhead-w: 1e+250 is too large: at most 1e+06"),
    ],
)
def test_absurd_finite_options_exit_2_naming_the_option_and_value(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = REPO / "examples" / "llama3.1-8b-h100.toml"
    code, out, err = run(["explain", str(plan), "--json", *options], capsys)
    assert code == 2 and not out, out
    assert f"planner: error: {message}" in err, err


def test_the_bounds_are_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Each bound is stated where the option is: 9P tokens, a failure rate of 1e-12, a PUE of
    10, 1e6 W a node, 1e6 minutes between checkpoints."""
    code, out, _ = run(["scale", "--help"], capsys)
    text = " ".join(out.split())
    assert code == 0
    for bound in (
        "at most 9P",
        "at least 1e-12",
        "1 to 10",
        "at most 1e+06 (over",
        "at most 1e+06 (694",
    ):
        assert bound in text, bound
