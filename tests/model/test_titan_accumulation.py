"""torchtitan's gradient accumulation under pipelining (`[torchtitan] gradient_accumulation_steps`,
planner.model.titan_accumulation): a step of k pipeline schedules is k steps of one schedule of
global_batch_size / k whose optimizer (and fixed per-step host time) runs once; its memory is one
schedule's.

Oracles: hand arithmetic on the estimates of the same job written as its own plan at
global_batch_size / k (one schedule a step, read from its own plan file: no code of the module
makes it), from torchtitan's loop (e347b1e5 train.py:547-600: k calls of pp_schedule.step, one
clip_grad_norm_ and one optimizer step; b5bcd76c trainer.py:842-956) and torch pipelining's
reduce step at the end of every schedule (schedules.py at 00722e64: `perform_reduce_grad`); and
the rules' messages, naming the field."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_run import run
from plan_text import titan_job, write

from planner.inputs.plan import Plan, load_plan
from planner.model import cost, memory
from planner.model.torch_schedules import microbatch_group, schedule_microbatches
from planner.search import rules

PLAN = """\
[parallel]
tp = 1
{degrees}micro_batch_size = 1
zero_stage = 3
recompute = "selective"
{parallel}[torchtitan]
gradient_accumulation_steps = {k}
{titan}"""


def _plan(
    tmp_path: Path, gbs: int, k: int, parallel: str = "", pp: int = 2, titan: str = ""
) -> Plan:
    degrees = f"pp = {pp}\ndp = {8 // pp}\n"
    text = titan_job(gbs) + PLAN.format(k=k, parallel=parallel, degrees=degrees, titan=titan)
    return load_plan(write(tmp_path, text, f"plan-{gbs}-{k}-{pp}-{len(parallel)}.toml"))


def test_a_step_of_two_schedules_is_two_sub_steps_less_one_optimizer(tmp_path: Path) -> None:
    """Llama 3.1 8B on 8 H100, pp 2 x dp 4, 32 sequences a step: k = 2 runs two 1F1B schedules
    of 4 micro-batches (local_batch_size 4), each its own fill and drain and FSDP2 sync; the
    optimizer and the step's fixed host time once."""
    two = _plan(tmp_path, 32, 2)
    one = _plan(tmp_path, 32, 1)  # one schedule of all 8 micro-batches (local_batch_size 8)
    sub = _plan(tmp_path, 16, 1)  # one of the two schedules, as its own job
    lay = two.require_layout()
    assert not rules.violations(two.job, lay)
    assert schedule_microbatches(two.job, lay) == 4 == schedule_microbatches(sub.job, lay)
    assert schedule_microbatches(one.job, lay) == 8
    p2, p1, ps = (cost.estimate(p.job, lay) for p in (two, one, sub))
    b2, b1, bs = p2.breakdown, p1.breakdown, ps.breakdown
    once = bs.optimizer + bs.other
    assert p2.step_time_s == pytest.approx(2 * ps.step_time_s - once, rel=1e-12)
    assert b2.optimizer == bs.optimizer and b2.other == bs.other
    for field in ("compute", "recompute", "pp_comm_exposed", "dp_comm_exposed", "dp_comm_hidden"):
        assert getattr(b2, field) == pytest.approx(2 * getattr(bs, field), rel=1e-12), field
    # 1F1B's bubble, (p - 1)(F + B), is each schedule's: doubled against one schedule of all 8
    assert b1.bubble == pytest.approx(bs.bubble, rel=1e-12)
    assert b2.bubble == pytest.approx(2 * b1.bubble, rel=1e-12) and b2.bubble > 0
    assert b2.compute == pytest.approx(b1.compute, rel=1e-12)  # the same 8 micro-batches
    assert p2.step_time_s > p1.step_time_s
    # FSDP2 gathers and reduce-scatters once a schedule (torch's reduce step ends each one)
    assert b2.dp_comm_hidden == pytest.approx(2 * b1.dp_comm_hidden, rel=1e-12)
    # the whole step's throughput: 32 x 8192 tokens over the step on 8 GPUs
    assert p2.tokens_per_s_per_gpu == pytest.approx(32 * 8192 / (p2.step_time_s * 8), rel=1e-12)
    assert p2.model_flops_per_step == pytest.approx(p1.model_flops_per_step, rel=1e-12)
    assert p2.hardware_flops_per_step == pytest.approx(p1.hardware_flops_per_step, rel=1e-12)
    assert p2.mfu == pytest.approx(p1.mfu * p1.step_time_s / p2.step_time_s, rel=1e-12)
    assert p2.model_tflops_per_gpu == pytest.approx(
        p2.model_flops_per_step / (p2.step_time_s * 8) / 1e12, rel=1e-12
    )
    assert p2.stages == ps.stages and p2.p2p_hop == ps.p2p_hop


def test_memory_is_one_schedules(tmp_path: Path) -> None:
    """Each schedule holds its own micro-batches in flight and torch pipelining's receive
    buffers for its own n_microbatches: the sub-job's memory, stage by stage; against one
    schedule of all 8, the 4 fewer activation-gradient buffers on stage 0 and 4 fewer activation
    buffers on stage 1, each 1 x 8192 x 4096 bf16 (64 MiB)."""
    two, one, sub = _plan(tmp_path, 32, 2), _plan(tmp_path, 32, 1), _plan(tmp_path, 16, 1)
    lay = two.require_layout()
    r2, r1, rs = (memory.estimate(p.job, lay) for p in (two, one, sub))
    assert r2.stages == rs.stages
    buffers = 4 * 8192 * 4096 * 2
    for a, b in zip(r1.stages, r2.stages, strict=True):
        assert a.other - b.other == pytest.approx(buffers, rel=1e-12)
        assert a.activations == b.activations  # 1F1B: at most pp in flight either way
    assert math.isclose(r1.peak - r2.peak, buffers, rel_tol=1e-12)


def test_interleaved_rounds_are_one_schedules(tmp_path: Path) -> None:
    """torch's Interleaved1F1B runs max(1, m // pp) rounds of m // rounds micro-batches, m the
    schedule's (schedules.py at 00722e64): at pp 4 x dp 2, 24 sequences are 12 micro-batches,
    in two schedules of 6 one round of 6, in one schedule of 12 three rounds of 4."""
    two = _plan(tmp_path, 24, 2, "vpp = 2\n", pp=4)
    one = _plan(tmp_path, 24, 1, "vpp = 2\n", pp=4)
    lay = two.require_layout()
    assert not rules.violations(two.job, lay) and not rules.violations(one.job, lay)
    assert (microbatch_group(two.job, lay), microbatch_group(one.job, lay)) == (6, 4)


@pytest.mark.parametrize(
    ("gbs", "k", "parallel", "field", "words"),
    [
        # without pipelining the micro-batches are torchtitan's accumulation steps already
        (32, 2, "", "torchtitan.gradient_accumulation_steps", "2: pipeline schedules a step"),
        # k divides the step's micro-batches, 32 / (4 x 1) = 8
        (32, 3, "", "torchtitan.gradient_accumulation_steps", "3 does not divide the step's"),
        # Schedule1F1B raises below pp micro-batches a schedule: 8 / 8 = 1 < 2 (Interleaved1F1B
        # runs them, in one round of 1: tests/model/test_looped_order.py)
        (32, 8, "", "training.global_batch_size", "needs at least pipeline_parallel"),
    ],
)
def test_the_rules_refuse_naming_the_field(
    tmp_path: Path, gbs: int, k: int, parallel: str, field: str, words: str
) -> None:
    plan = _plan(tmp_path, gbs, k, parallel, pp=1 if k == 2 else 2)
    lay = plan.require_layout()
    broken = rules.violations(plan.job, lay)
    assert [v.field for v in broken] == [field], broken
    assert words in broken[0].message
    if k == 8:  # one schedule's count, the accumulation named
        assert "/ torchtitan.gradient_accumulation_steps 8 = 32 / (4 x 1) / 8 = 1" in (
            broken[0].message
        )
        assert not rules.violations(_plan(tmp_path, gbs, 1, parallel).job, lay)
    else:  # 1 reads right
        assert not rules.violations(_plan(tmp_path, gbs, 1, parallel, lay.pp).job, lay)


def _suggested(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[list[dict], str]:
    """`suggest`'s JSON candidates (top 3) and text table (top 1) for the 8B job at k = 2."""
    path = write(tmp_path, titan_job() + "[torchtitan]\ngradient_accumulation_steps = 2\n")
    outs = []
    for argv in (["--top", "3", "--json"], ["--top", "1"]):
        code, out, err = run(["suggest", str(path), *argv, *flags], capsys)
        assert code == 0, err
        outs.append(out)
    return json.loads(outs[0])["candidates"], outs[1]


def test_json_says_how_the_steps_micro_batches_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`suggest --json`'s candidates for a job of k = 2 schedules a step: `num_microbatches`
    (global batch / (dp x micro-batch)) run as `pipeline_schedules` of
    `microbatches_per_schedule` each (hand arithmetic on each row's own degrees)."""
    candidates, _ = _suggested(tmp_path, capsys)
    assert candidates and all(c["parallel"]["pp"] > 1 for c in candidates)
    for c in candidates:
        par = c["parallel"]
        m = 32 // (par["dp"] * par["micro_batch_size"])
        assert (par["num_microbatches"], par["pipeline_schedules"]) == (m, 2)
        assert par["microbatches_per_schedule"] == m // 2


def test_the_table_shows_the_schedules_micro_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """suggest's `m` column: a step's micro-batches as "k x n" under k = 2 schedules (the first
    row's own degrees: 32 / (dp x mbs) micro-batches, hand arithmetic)."""
    candidates, table = _suggested(tmp_path, capsys)
    par = candidates[0]["parallel"]
    m = 32 // (par["dp"] * par["micro_batch_size"])
    row = next(line for line in table.splitlines() if line.startswith("│ 1 "))
    assert f" 2x{m // 2} " in row
