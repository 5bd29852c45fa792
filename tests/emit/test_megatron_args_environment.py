"""`launch --target megatron-args` read back with the environment its header names (QA s30 item 1:
NVTE_EXT_MARGIN_SM and PYTORCH_CUDA_ALLOC_CONF's expandable segments sat only in the header's
`# environment:` comment, so `check --megatron-args` on the file read gemm_sm_margin 0 and no
expandable segments: 49.5 GiB and 14.102 s against the header's 47.7 GiB and 15.141 s).

Oracle: the file's own header (its `predicted:` line, planner.emit.prediction.header), which the
torchrun target's script, exporting the same environment, reads back to; and the reading of the
same flags without planner's header, which applies no comment."""

from __future__ import annotations

from megatron_plans import make_plan

from planner.emit import megatron, torchrun
from planner.inputs import megatron_args
from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, memory


def _p1() -> Plan:
    """The QA's p1.toml: Llama 3.1 8B, ZeRO 2, a GEMM SM margin and expandable segments."""
    return make_plan(
        "llama3.1-8b",
        8,
        {"tp": 2, "zero_stage": 2, "recompute": "none"},
        seq_length=8192,
        global_batch_size=128,
        gemm_sm_margin=16,
        expandable_segments=True,
    )


def _back(text: str) -> tuple[Plan, megatron_args.Reading]:
    reading = megatron_args.read(text, "h100-sxm-80gb", 8, "p1.args")
    return parse_plan(reading.doc), reading


def _predicted(plan: Plan) -> tuple[str, str]:
    lay = plan.require_layout()
    step = cost.estimate(plan.job, lay).step_time_s
    peak = memory.estimate(plan.job, lay).peak / 2**30
    return f"predicted: step {step:.3f} s", f"peak memory {peak:.1f} GiB"


def test_the_megatron_args_file_reads_back_to_its_header() -> None:
    text = megatron.render(_p1(), "p1")
    back, reading = _back(text)
    assert back.job.gemm_sm_margin == 16 and back.job.expandable_segments
    predicted = next(line for line in text.splitlines() if line.startswith("# predicted:"))
    step, peak = _predicted(back)
    assert step in predicted and peak in predicted
    note = "environment read from the file's planner header"
    assert any(n.startswith(note) for n in reading.notes)


def test_it_reads_as_the_torchrun_script_does() -> None:
    plan = _p1()
    args, _ = _back(megatron.render(plan, "p1"))
    script, _ = _back(torchrun.render(plan, "p1"))
    assert args.job.gemm_sm_margin == script.job.gemm_sm_margin
    assert args.job.expandable_segments == script.job.expandable_segments
    assert _predicted(args) == _predicted(script)


def test_the_header_says_the_prediction_assumes_the_environment() -> None:
    text = megatron.render(_p1(), "p1")
    line = next(x for x in text.splitlines() if x.startswith("# environment"))
    assert "the prediction assumes" in line and "NVTE_EXT_MARGIN_SM=16" in line


def test_a_comment_outside_planners_header_is_not_applied() -> None:
    text = megatron.render(_p1(), "p1")
    user = "\n".join(line for line in text.splitlines() if not line.startswith("# planner "))
    back, reading = _back(user)
    assert back.job.gemm_sm_margin == 0 and not back.job.expandable_segments
    assert not any("planner header" in n for n in reading.notes)
