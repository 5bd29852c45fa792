"""The suggest table's second MFU column names the peak it is against as explain does
(`Performance.mfu_text`, `peak_name`): an fp32 job's is the TF32 peak ("MFU tf32pk", explain's
"of the TF32 peak"), not an "fp32pk" its GPU's FP32 peak would be (H100 SXM: TF32 494.5 dense
against FP32 66.9 TFLOP/s, the catalog); an FP8 job's the FP8 peak; a bf16 job has one column.
And an fp32 layout without TP overlap says nothing of it among its memory savers: fp32
activations never run it (`rules.precision.tp_overlap_bf16`), so it is no choice.

Oracles: the Performance's own fields (`peak_name`, `mfu`, `mfu_bf16_peak`) and explain's text
of the same Performance."""

from __future__ import annotations

import pytest
from jobs import job
from rich.console import Console

from planner.cli import render_suggest
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost, memory
from planner.search.top_k import Candidate

LAY = Layout(tp=2, dp=4, micro_batch_size=1, sequence_parallel=True)


def _job(precision: str) -> Job:
    return job("llama3.1-8b", "h100-sxm-80gb", 8, 1024, 64, precision=precision)


def _table(j: Job, lay: Layout = LAY) -> tuple[list[str], list[str], str]:
    """(the header's cells, the first row's cells, all its text) of suggest's table."""
    c = Candidate(lay, memory.estimate(j, lay), cost.estimate(j, lay))
    console = Console(record=True, width=400, markup=False)
    console.print(render_suggest.candidates_table(j, [c], "step time"))
    lines = console.export_text().splitlines()

    def cells(line: str) -> list[str]:
        return [x.strip() for x in line.strip().strip("┃│").replace("┃", "│").split("│")]

    head = cells(next(x for x in lines if x.startswith("┃ #")))
    row = cells(next(x for x in lines if x.startswith("│ 1 ")))
    return head, row, " ".join(x.strip() for x in lines)  # the caption, wrapped lines joined


def test_fp32_second_mfu_is_against_the_tf32_peak() -> None:
    j = _job("fp32")
    perf = cost.estimate(j, LAY)
    assert perf.peak_name == "TF32"
    assert perf.mfu_text().endswith(f"{perf.mfu:.1%} of the TF32 peak")  # explain's words
    head, row, caption = _table(j)
    assert "MFU tf32pk" in head and "MFU fp32pk" not in head
    assert row[head.index("MFU tf32pk")] == f"{perf.mfu:.1%}"
    assert row[head.index("MFU bf16pk")] == f"{perf.mfu_bf16_peak:.1%}"
    assert "MFU tf32pk against its dense TF32" in caption


def test_fp8_and_bf16_columns_are_unchanged() -> None:
    head, row, caption = _table(_job("fp8"))
    perf = cost.estimate(_job("fp8"), LAY)
    assert row[head.index("MFU fp8pk")] == f"{perf.mfu:.1%}"
    assert "MFU fp8pk against its dense FP8 peak" in caption
    head, _, caption = _table(_job("bf16"))
    assert [h for h in head if h.startswith("MFU")] == ["MFU bf16pk"]
    assert "MFU bf16pk = model FLOPs against the GPU's dense bf16 peak" in caption


@pytest.mark.parametrize(("precision", "said"), [("bf16", True), ("fp32", False)])
def test_no_tp_overlap_is_said_only_where_it_could_run(precision: str, said: bool) -> None:
    head, row, _ = _table(_job(precision), LAY.with_(tp_comm_overlap=False))
    assert ("no tp overlap" in row[head.index("recompute")]) is said
