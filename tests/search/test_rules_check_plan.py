"""planner.search.rules on plans: a [parallel] table's layout derives dp and sequence parallelism,
and check_plan raises one InputError naming every violation.

The oracle is the integer arithmetic in the comments.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rules_cases import make_job

from planner.inputs.errors import InputError
from planner.inputs.layout import Layout
from planner.inputs.plan import Job, Plan
from planner.inputs.plan_layout import layout_from_section
from planner.inputs.plan_parallel import ParallelSection
from planner.search.rules import check_plan

# --- from the [parallel] table


def test_layout_from_section_derives_dp_and_sp() -> None:
    job = make_job(num_gpus=64)
    lay = layout_from_section(job, ParallelSection(tp=4, pp=2, cp=2), None)
    assert lay.dp == 4  # 64 / (4 x 2 x 2)
    assert lay.sequence_parallel is True  # default on when tp > 1
    assert layout_from_section(job, ParallelSection(tp=1, pp=1), None).sequence_parallel is False


def checked(job: Job, section: ParallelSection, path: Path | None) -> Layout:
    """The layout of a plan with this [parallel] table, once check_plan has passed it."""
    plan = check_plan(Plan(job, layout_from_section(job, section, path), path))
    assert plan.layout is not None
    return plan.layout


def test_check_plan_raises_one_input_error_with_every_violation() -> None:
    job = make_job(num_gpus=8)
    # two faults: ep on a dense model, TP overlap at tp 1 (sequence parallelism is off there,
    # arguments.py:1433-1442 d98e8a64)
    section = ParallelSection(ep=2, sequence_parallel=True, tp_comm_overlap=True)
    with pytest.raises(InputError) as info:
        checked(job, section, Path("plan.toml"))
    lines = str(info.value).splitlines()
    assert (
        "plan.toml: parallel.ep: expert_model_parallel_size (2) needs a mixture-of-experts model"
        in lines
    )
    assert any(line.startswith("plan.toml: parallel.tp_comm_overlap: ") for line in lines)
    assert len(lines) == 2


def test_sequence_parallel_at_tp1_reads_as_off() -> None:
    """A plan's sequence_parallel = true at tp 1 is read off, as Megatron turns it off there
    (arguments.py:1433-1439 d98e8a64): the plan passes check."""
    job = make_job(num_gpus=8)
    lay = checked(job, ParallelSection(sequence_parallel=True), Path("plan.toml"))
    assert lay.tp == 1 and not lay.sequence_parallel


def test_layout_from_section_dp_not_whole() -> None:
    job = make_job(num_gpus=8)
    with pytest.raises(InputError, match=r"num_gpus \(8\) must be a multiple of tp x pp x cp"):
        layout_from_section(job, ParallelSection(tp=3), None)


def test_check_plan_passes_a_clean_layout() -> None:
    job = make_job(num_gpus=16)
    lay = checked(job, ParallelSection(tp=2, pp=2, micro_batch_size=2), None)
    assert lay == Layout(tp=2, pp=2, dp=4, sequence_parallel=True, micro_batch_size=2)
