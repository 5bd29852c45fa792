"""A peak printed beside its capacity reads the same way in check, explain, the launch warning,
the launch header and the launch notes: a plan 10 MiB over never reads "peak 61.9 of 61.9 GiB"
(nor "0.0 over") anywhere, and a plan 10 MiB under never reads its peak above its capacity.

The plan is suggest's first pick of the QA pass that found the one-place figures (llama3.1-8b on
8 H100, peak 61.9 GiB). Oracle: hand arithmetic on the plan's own peak P (`memory.estimate`):
--headroom H sets the usable memory to physical x (1 - H / 100) (`memory.usable_bytes`), so the
H that makes it P + 10 MiB or P - 10 MiB; every peak the commands print is P (a premise checked
below: each target launches a job of the same peak), so every printed pair must read peak
above capacity in the first case and below it in the second. The premise that one place alone
reads the two alike makes the test fail on the code that printed them to one place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_run import run

from planner.emit.launch_pricing import launched
from planner.inputs.plan import load_plan
from planner.inputs.units import MIB
from planner.model import memory

PLAN = """[model]
name = "llama3.1-8b"
[cluster]
gpu = "h100-sxm-80gb"
num_gpus = 8
[training]
seq_length = 8192
global_batch_size = 128
precision = "bf16"
main_grad_dtype = "fp32"
[parallel]
tp = 1
pp = 2
dp = 2
cp = 2
vpp = 6
overlap_grad_reduce = true
overlap_param_gather = true
micro_batch_size = 1
zero_stage = 1
recompute = "none"
pipeline_layers = [17, 15]
"""

TARGETS = ("megatron-args", "torchrun", "megatron-bridge")

PAIRS = (
    # check "peak A GiB of B GiB", explain "peak A of B GiB", the launch warning and header
    # "peak (memory) A GiB of B GiB usable"
    re.compile(r"peak (?:memory )?([\d.]+)(?: GiB)? of ([\d.]+) GiB"),
    # the launch notes (`launch_pricing.peak_text`): "peak A GiB, which does not fit (B GiB usable"
    re.compile(r"peak ([\d.]+) GiB, which does not fit \(([\d.]+) GiB usable"),
)


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for pattern in PAIRS for m in pattern.finditer(text)]


@pytest.mark.parametrize("offset", [10 * MIB, -10 * MIB], ids=["10MiB-over", "10MiB-under"])
def test_every_peak_reads_apart_from_its_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], offset: float
) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(PLAN, encoding="utf-8")
    plan = load_plan(path)
    lay = plan.require_layout()
    peak = memory.estimate(plan.job, lay).peak
    physical = plan.job.cluster.capacity_bytes
    headroom = 100 * (1 - (peak - offset) / physical)  # usable = peak - offset, to a few bytes
    # premises: one place reads peak and usable alike; every target launches a job of peak P
    usable = memory.estimate(plan.job, lay, headroom).capacity
    assert abs(peak - usable - offset) < 1024
    assert f"{peak / 2**30:.1f}" == f"{usable / 2**30:.1f}"
    for target in TARGETS:
        assert memory.estimate(launched(plan, target, headroom).job, lay).peak == peak

    over = offset > 0
    outputs = []
    for argv in (["check"], ["explain"], *(["launch", "--target", t] for t in TARGETS)):
        code, out, err = run(
            [*argv[:1], str(path), *argv[1:], "--headroom", repr(headroom)], capsys
        )
        assert code == (1 if over and argv[0] == "check" else 0), (argv, err)
        found = _pairs(out + err)
        assert found, (argv, out[:2000], err)  # each prints its peak beside its capacity
        for a, b in found:
            assert a != b and (float(a) > float(b)) == over, (argv, a, b)
        outputs.append(out + err)
    text = "\n".join(outputs)
    assert ("does not fit" in text.lower()) == over
    assert "0.0 over" not in text and "0.0 GiB over" not in text
    if over:  # check, explain and the launch warnings give the 10 MiB by name
        assert text.count("10 MiB over") >= 2 + len(TARGETS)
