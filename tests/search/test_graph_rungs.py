"""What a job run with CUDA graphs (`training.cuda_graphs`) is offered and launched with:
nothing Megatron's per-layer graphs refuse (`planner.search.rules.graphs`), which is what
`planner launch` writes for it (--cuda-graph-impl local).

Oracles: Megatron-LM d98e8a64 TransformerConfig.__post_init__'s asserts, quoted in
rules/graphs.py and written out case by case below; the launch targets themselves
(`planner.emit.launch.refusals` on each row written as a plan); and the eager job's top rows,
which do use what the graphed job may not (so each exclusion is the graphs', not the job's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from cli_run import run
from jobs import job

from planner.emit import launch
from planner.inputs import plan_writer
from planner.inputs.plan import Job, load_plan
from planner.inputs.torchtitan import training_defaults
from planner.search.rules.graphs import module_conflict, rung_conflict
from planner.search.space import Space
from planner.search.suggest import search_rows

DEFAULTS = training_defaults("megatron", False)


def _rows_launch(j: Job, tmp_path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """The top 5 rows' (recompute, modules, CPU-offloaded layers), each checked launchable."""
    _, rows = search_rows(j, Space(), 5)
    assert rows
    out = []
    for i, row in enumerate(rows):
        lay = row.candidate.layout
        path = tmp_path / f"row{i}.toml"
        path.write_text(plan_writer.render(j, lay, {"name": j.arch.name}, []))
        assert not launch.refusals(load_plan(path)), f"row {i} is refused"
        out.append((lay.recompute, lay.recompute_modules, lay.cpu_offloading_num_layers))
    return out


def test_the_asserts_case_by_case() -> None:
    graphed = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 64, cuda_graphs=True)
    assert rung_conflict(graphed, "none", (), 2) is not None  # CPU offloading: ValueError
    assert rung_conflict(graphed, "full", (), 0) is not None  # full recompute: full_iteration
    # core_attn with attention dropout under whole-layer graphs; not with the attention eager
    assert rung_conflict(graphed, "selective", ("core_attn",), 0) is not None
    moe_graphs = replace(graphed, cuda_graph_modules=("moe_router", "moe_preprocess"))
    assert rung_conflict(moe_graphs, "selective", ("core_attn",), 0) is None
    assert (
        rung_conflict(replace(graphed, attention_dropout=False), "selective", ("core_attn",), 0)
        is None
    )
    # mlp / moe with hidden dropout where that block is graphed
    assert rung_conflict(graphed, "selective", ("moe",), 0) is not None
    assert rung_conflict(moe_graphs, "selective", ("moe",), 0) is None
    assert rung_conflict(replace(graphed, hidden_dropout=False), "selective", ("moe",), 0) is None
    assert rung_conflict(graphed, "selective", ("moe_act", "layernorm"), 0) is None
    # eager, or torchtitan's: nothing
    assert rung_conflict(replace(graphed, cuda_graphs=False), "full", (), 3) is None


def test_a_graphed_job_gets_no_cpu_offloading(tmp_path: Path) -> None:
    # Llama 3.1 8B on 8 H100 at 8,192 tokens: before, its graphed #1 offloaded 4 layers, which
    # every Megatron target refused
    eager = job("llama3.1-8b", "h100-sxm-80gb", 8, 8192, 64, **DEFAULTS)
    _, rows = search_rows(eager, Space(), 5)
    assert rows[0].candidate.layout.cpu_offloading_num_layers > 0
    got = _rows_launch(replace(eager, cuda_graphs=True), tmp_path)
    assert all(offload == 0 for _, _, offload in got)
    # the full-iteration graph runs CPU offloading (only per-layer graphs raise): as eager,
    # launched by every Megatron target (Megatron-Bridge's as its full_iteration graph)
    whole = replace(eager, cuda_graphs=True, cuda_graph_impl="full_iteration")
    # (its #1 offloaded until ZeRO 2 reduce-scattered every micro-batch; one of its top 8 does)
    _, rows = search_rows(whole, Space(), 8)
    offloading = [r.candidate.layout for r in rows if r.candidate.layout.cpu_offloading_num_layers]
    assert offloading
    lay = offloading[0]
    path = tmp_path / "whole.toml"
    path.write_text(plan_writer.render(whole, lay, {"name": "llama3.1-8b"}, []))
    refused = {t for ts in launch.refusals(load_plan(path)).values() for t in ts}
    assert refused == set()


def test_a_graphed_job_recomputes_no_graphed_block_with_dropout(tmp_path: Path) -> None:
    # Qwen3 30B-A3B on 8 H100 at 8,192 tokens with Megatron's default dropouts: eager, the top
    # rows recompute the MoE block; under whole-layer graphs that asserts (hidden dropout)
    eager = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 8192, 64, **DEFAULTS)
    _, rows = search_rows(eager, Space(), 5)
    assert "moe" in rows[0].candidate.layout.recompute_modules
    got = _rows_launch(replace(eager, cuda_graphs=True), tmp_path)
    assert all(rec != "full" and "moe" not in mods for rec, mods, _ in got)


def test_launch_refuses_full_recompute_under_graphs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-70b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 64\ncuda_graphs = true\n"
        '[parallel]\ntp = 8\npp = 2\nrecompute = "full"\n'
    )
    code, _, err = run(["launch", str(path), "--target", "megatron-args"], capsys)
    assert code == 2 and "parallel.recompute" in err and "full-iteration" in err


def _plan(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-70b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 16\n'
        "[training]\nseq_length = 8192\nglobal_batch_size = 64\ncuda_graphs = true\n"
        f'{extra}[parallel]\ntp = 8\npp = 2\nrecompute = "full"\n'
    )
    return path


def test_check_judges_the_graph_implementation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per-layer graphs (the plan's default, as planner launches them) with full recompute:
    check exits 2 as Megatron asserts at start-up; the full-iteration graph runs it, launched
    with its implementation and the NaN check off (validate_args asserts it; Megatron-Bridge's
    config.py asserts rerun_state_machine.check_for_nan_in_loss off)."""
    code, _, err = run(["check", str(_plan(tmp_path, ""))], capsys)
    assert code == 2 and "parallel.recompute" in err and "full-iteration" in err
    whole = _plan(tmp_path, 'cuda_graph_impl = "full_iteration"\n')
    code, _, err = run(["check", str(whole)], capsys)
    assert code in (0, 1) and "cuda_graphs" not in err
    code, out, _ = run(["launch", str(whole), "--target", "megatron-args"], capsys)
    assert code == 0 and "--cuda-graph-impl full_iteration" in out
    assert "--no-check-for-nan-in-loss-and-grad" in out
    code, out, _ = run(["launch", str(whole), "--target", "megatron-bridge"], capsys)
    doc = yaml.safe_load(out)
    assert code == 0 and doc["model"]["cuda_graph_impl"] == "full_iteration"
    assert doc["rerun_state_machine"]["check_for_nan_in_loss"] is False


@pytest.mark.parametrize(
    ("training", "needle"),
    [
        ('cuda_graphs = false\ncuda_graph_impl = "local"\n', "needs training.cuda_graphs"),
        (
            'cuda_graphs = true\ncuda_graph_impl = "full_iteration"\n'
            'cuda_graph_modules = ["attn"]\n',
            "full_iteration",
        ),
    ],
)
def test_a_graph_implementation_megatron_refuses_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], training: str, needle: str
) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(
        '[model]\nname = "llama3.1-8b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        f"[training]\nseq_length = 8192\nglobal_batch_size = 64\n{training}"
        "[parallel]\ntp = 1\npp = 1\n"
    )
    code, _, err = run(["check", str(path)], capsys)
    assert code == 2 and needle in err


def test_the_regions_are_asserted_against_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TransformerConfig d98e8a64's asserts on --cuda-graph-modules, case by case; for a job
    that breaks one, suggest refuses the job as bad input naming the field (no layout runs it)."""
    moe = job("qwen3-30b-a3b", "h100-sxm-80gb", 8, 4096, 64, cuda_graphs=True)  # every layer MoE
    dense = job("llama3.1-8b", "h100-sxm-80gb", 8, 4096, 64, cuda_graphs=True)

    def modules(j: Job, *mods: str, **kw: object) -> tuple[str, str] | None:
        return module_conflict(replace(j, cuda_graph_modules=mods, **kw))  # type: ignore[arg-type]

    assert modules(moe, "attn", "moe_router", "moe_preprocess") is None  # the recipes' regions
    assert modules(moe, "moe", "moe_router") is not None  # not both
    assert modules(dense, "moe_router") is not None  # no experts
    assert modules(moe, "mlp") is not None  # no dense layer
    assert modules(moe, "moe") is not None  # dropless
    padded = {"moe_expert_capacity_factor": 1.0, "moe_pad_expert_input_to_capacity": True}
    assert modules(moe, "moe", **padded) is None
    assert modules(replace(moe, cuda_graphs=False)) is None
    path = tmp_path / "job.toml"
    path.write_text(
        '[model]\nname = "qwen3-30b-a3b"\n[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 8\n'
        "[training]\nseq_length = 4096\nglobal_batch_size = 64\ncuda_graphs = true\n"
        'cuda_graph_modules = ["moe"]\n'
    )
    code, _, err = run(["suggest", str(path)], capsys)  # bad input, as check says (exit 2)
    flat = " ".join(err.split())
    assert code == 2 and f"{path}: training.cuda_graph_modules" in flat and "drop-and-pad" in flat
