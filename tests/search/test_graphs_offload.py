"""A job run with CUDA graphs (`training.cuda_graphs`) gets no CPU-offloading layout from the
search: Megatron's per-layer graphs, which `planner launch` writes for it, raise ValueError with
CPU offloading (TransformerConfig d98e8a64: "CUDA graphs not supported with CPU offloading").

Oracle: the launch targets themselves (`planner.emit.launch.refusals` on each row written as a
plan: `emit.common.cuda_graph_impl` refuses the pair), and the eager job, whose top row does
offload (so the exclusion is the graphs', not the job's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from jobs import job

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.plan import load_plan
from planner.inputs.torchtitan import training_defaults
from planner.search.space import Space
from planner.search.suggest import search_rows


def test_a_graphed_job_gets_no_cpu_offloading(tmp_path: Path) -> None:
    # Llama 3.1 8B on 8 H100 at 8,192 tokens: before, its graphed #1 offloaded 4 layers, which
    # every Megatron target refused
    eager = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, **training_defaults("megatron", False))
    _, rows = search_rows(eager, Space(), 5)
    assert rows[0].candidate.layout.cpu_offloading_num_layers > 0
    graphed = replace(eager, cuda_graphs=True)
    _, rows = search_rows(graphed, Space(), 5)
    assert rows
    for i, row in enumerate(rows):
        lay = row.candidate.layout
        assert lay.cpu_offloading_num_layers == 0
        path = tmp_path / f"row{i}.toml"
        path.write_text(plan_writer.render(graphed, lay, {"name": "llama3.1-8b"}, []))
        assert not launch.refusals(load_plan(path)), f"row {i} is refused"
