"""The QA report's cases of explain's and suggest's advice: the CUDA-graphs advice to a
host-bound plan weighed against memory at the command's headroom, suggest's changes when
nothing fits (the leanest layout over every structure, more GPUs by whole nodes, a larger
batch), each confirmed, and suggest --json's notes for its first pick.

Oracles: `memory.estimate` of the plan with the switch (at the headroom); the search itself
(`suggest.search_rows`) on the changed job, and on every smaller value, for the changes when
nothing fits; the text suggest prints for the JSON's notes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cli_run import run, suggest_plan
from jobs import job

from planner.cli import explain_notes, switch_notes
from planner.inputs.plan import Job, parse_plan
from planner.inputs.units import GIB
from planner.model import cost, memory
from planner.search.space import Bound, Space
from planner.search.suggest import search_rows

Q235: dict[str, Any] = {
    "model": {"name": "qwen3-235b-a22b"},
    "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 128},
    "training": {"seq_length": 3584, "global_batch_size": 512, "precision": "fp8"},
    "parallel": {
        "tp": 4, "pp": 2, "cp": 2, "ep": 4, "sequence_parallel": True, "tp_comm_overlap": False,
        "micro_batch_size": 2, "zero_stage": 2, "recompute": "selective",
        "recompute_modules": ["layernorm", "moe_act"],
        "moe_token_dispatcher_type": "flex", "moe_flex_dispatcher_backend": "deepep",
    },
}  # fmt: skip
"""Qwen3-235B FP8 on 128 H100, eager and host-bound, 0.3 GiB under its 77.3 GiB (the report's
q235_hostbound.toml at 3,584 tokens, with the norms and the MoE activation recomputed: the MoE
working set, the q/k norms' inputs and Megatron-FSDP's whole unit buckets, counted since, put
the report's 4,096 over, and its reduce-scatter queue 3,840)."""

L8: dict[str, Any] = {
    "model": {"name": "llama3.1-8b"},
    "cluster": {"gpu": "b200-sxm-180gb", "num_gpus": 64},
    "training": {"seq_length": 2048, "global_batch_size": 64},
    "parallel": {
        "tp": 4, "pp": 2, "dp": 8, "vpp": 8, "sequence_parallel": True, "micro_batch_size": 4,
        "zero_stage": 1, "recompute": "none",
    },
}  # fmt: skip
"""Llama 3.1 8B on 64 B200, eager, host-bound, far under its memory (the report's l8_b200.toml)."""


def _graphs_grow(j: Job, lay: Any, headroom: float = 3.0) -> tuple[float, bool]:
    """(GiB the whole-layer graphs add at the peak, whether the plan then fits)."""
    graphed = replace(j, cuda_graphs=True, cuda_graph_modules=())
    grown = memory.estimate(graphed, lay, headroom)
    return (grown.peak - memory.estimate(j, lay, headroom).peak) / GIB, grown.fits


def test_the_cuda_graphs_advice_is_given_only_where_the_plan_fits_with_them() -> None:
    """q235_hostbound.toml was told `training.cuda_graphs = true would remove it` while the
    graphs were counted 2 layer inputs a layer, 1.6 GiB over; Megatron's own graphs keep no
    buffer a layer (planner.model.graph_buffers): on its pp 2 they add a chunk's input copy and
    output per micro-batch in flight, under 0.1 GiB, but their private pool keeps the layers'
    activations reserved through the backward, so Megatron-FSDP's reduce-scatter queue cannot
    take what the backward frees (planner/model/fsdp_coupling.py): 0.3 GiB under its memory
    eager, they do not fit, and the advice says so with the estimates' difference. On the 8B
    plan, far under its memory, the advice names what the graphs add; at a headroom that
    leaves less, the note says they would not fit."""
    p = parse_plan(Q235)
    j, lay = p.job, p.require_layout()
    assert memory.estimate(j, lay).fits
    more, ok = _graphs_grow(j, lay)
    assert not ok and more > 0
    text = explain_notes.host_text(j, lay, cost.estimate(j, lay))
    assert text is not None and "host-bound" in text
    assert "but the plan would not fit with them" in text
    assert f"{more:.1f} GiB more at the peak" in text
    small = parse_plan(L8)
    sj, sl = small.job, small.require_layout()
    more, ok = _graphs_grow(sj, sl)
    advice = explain_notes.host_text(sj, sl, cost.estimate(sj, sl))
    assert ok and advice is not None
    assert f"(training.cuda_graphs = true) would remove it, for {more:.1f} GiB more" in advice
    # at a headroom that leaves less than the graphed peak, the advice is withdrawn
    grown = memory.estimate(replace(sj, cuda_graphs=True), sl)
    usable = memory.estimate(sj, sl).peak + 0.5 * (grown.peak - memory.estimate(sj, sl).peak)
    headroom = 100 * (1 - usable / grown.physical)
    assert memory.estimate(sj, sl, headroom).fits and not _graphs_grow(sj, sl, headroom)[1]
    tight = explain_notes.host_text(sj, sl, cost.estimate(sj, sl), headroom)
    assert tight is not None and "would not fit" in tight
    assert tight in explain_notes.notes(sj, sl, cost.estimate(sj, sl), headroom)


def test_full_iteration_graphs_are_weighed_where_the_layout_needs_them() -> None:
    """Full recompute runs only under full-iteration graphs: the note names them, and they add
    nothing at the peak (FullCudaGraphWrapper keeps static copies of the loader's batches only,
    no per-layer graph buffers: full_cuda_graph.py:97-135 d98e8a64), so where the eager plan
    fits, they fit."""
    d = {**L8, "parallel": {**L8["parallel"], "recompute": "full"}}
    p = parse_plan(d)
    j, lay = p.job, p.require_layout()
    whole = replace(j, cuda_graphs=True, cuda_graph_impl="full_iteration")
    text = explain_notes.host_text(j, lay, cost.estimate(j, lay))
    assert text is not None and switch_notes.FULL_ITERATION_RUNS in text
    eager, graphed = memory.estimate(j, lay), memory.estimate(whole, lay)
    assert graphed.peak == eager.peak
    assert "would not fit" not in text


def _found(j: Job, space: Space | None = None) -> bool:
    return bool(search_rows(j, space or Space(), 1)[0].candidates)


def _gpus(j: Job, n: int) -> Job:
    return replace(j, cluster=j.cluster.model_copy(update={"num_gpus": n}))


def _changes(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    code, out, err = run(["suggest", *argv, "--json"], capsys)
    assert code == 1, err
    changes: list[str] = json.loads(out)["changes"]
    return changes


@pytest.mark.parametrize(("n", "more"), [(32, 104), (96, 104)])
def test_more_gpus_is_the_fewest_whole_nodes_the_search_fits(
    n: int, more: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Llama 3.1 405B at 8k, global batch 256, on H100: on 96 GPUs suggest offered nothing (the
    leanest layout was sized at pp 1 and cp 1 only, ZeRO 3 pinned); on 32 it offered 128 GPUs,
    doublings only, and GPUs of 232 GiB where 228 fit a tp 8 pp 4 ZeRO 1 layout. Brute force:
    the search at every whole node count up to the one proposed."""
    argv = ["--model", "llama3.1-405b", "--gpu", "h100-sxm-80gb", "--num-gpus", str(n)]
    changes = _changes([*argv, "--seq-length", "8192", "--global-batch-size", "256"], capsys)
    assert f"{more} GPUs instead of {n} ({more // 8} nodes of 8)" in changes
    j = job("llama3.1-405b", "h100-sxm-80gb", n, 8192, 256)
    assert _found(_gpus(j, more))
    assert not any(_found(_gpus(j, m)) for m in range(n + 8, more, 8))
    (size,) = [c for c in changes if c.startswith("GPUs with at least")]
    gib = int(size.split()[4])
    bigger = replace(j, cluster=j.cluster.model_copy(update={"memory_gib": float(gib)}))
    less = replace(j, cluster=j.cluster.model_copy(update={"memory_gib": gib - 1.0}))
    assert _found(bigger) and not _found(less)
    if n == 32:
        assert gib <= 228
    else:
        assert "seq_length 2048 instead of 8192" in changes
        assert _found(replace(j, seq_length=2048)) and not _found(replace(j, seq_length=4096))


def test_a_larger_batch_is_the_smallest_the_search_fits(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """8B on 24 H100 at tp 1, pp 1, cp 1 (dp 24) with 16 sequences: no layout splits them, and
    only doublings were tried (32, which 24 ranks do not split either; 24 does). And Llama 3.1
    70B on 16 H100 at tp 1, pp 1 with 8: global batch 16 was offered, which fits in no layout
    (a dp-16 70B). Brute force: the search at every batch up to the one proposed (to 4x for
    the second)."""
    pins = ["--tp", "1", "--pp", "1", "--no-cp"]
    argv = ["--model", "llama3.1-8b", "--gpu", "h100-sxm-80gb", "--num-gpus", "24"]
    changes = _changes([*argv, *pins, "--global-batch-size", "16"], capsys)
    assert changes == ["global_batch_size 24 instead of 16"]
    pinned = Space(tp=Bound(1, 1), pp=Bound(1, 1), cp=Bound(1, 1))
    j = job("llama3.1-8b", "h100-sxm-80gb", 24, 8192, 16)
    assert _found(replace(j, global_batch_size=24), pinned)
    assert not any(_found(replace(j, global_batch_size=b), pinned) for b in range(17, 24))
    argv = ["--model", "llama3.1-70b", "--gpu", "h100-sxm-80gb", "--num-gpus", "16"]
    changes = _changes([*argv, *pins, "--global-batch-size", "8"], capsys)
    assert not any(c.startswith("global_batch_size") for c in changes)
    j = job("llama3.1-70b", "h100-sxm-80gb", 16, 8192, 8)
    assert not any(_found(replace(j, global_batch_size=b), pinned) for b in range(9, 33))


def test_more_gpus_for_70b_on_a100_40gb(capsys: pytest.CaptureFixture[str]) -> None:
    """70B on 8 A100-40GB: 64 GPUs were offered (doublings); 40 fit. Brute force: 16-32."""
    argv = ["--model", "llama3.1-70b", "--gpu", "a100-sxm-40gb", "--num-gpus", "8"]
    changes = _changes(argv, capsys)
    assert "40 GPUs instead of 8 (5 nodes of 8)" in changes
    j = job("llama3.1-70b", "a100-sxm-40gb", 8, 8192, 128)
    assert _found(_gpus(j, 40)) and not any(_found(_gpus(j, m)) for m in (16, 24, 32))


def test_suggest_json_carries_the_notes_its_text_gives_the_first_pick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Qwen3-30B-A3B on 64 GB200 at one 2,048-token sequence per GPU: #1 is host-bound and in
    the one-micro-batch regime; the text said so and --json left it out. Now the first
    candidate's `notes` are the text's lines, each as explain words it."""
    argv = ["suggest", "--model", "qwen3-30b-a3b", "--gpu", "gb200-nvl72", "--num-gpus", "64"]
    argv += ["--seq-length", "2048", "--global-batch-size", "64"]
    written, out = suggest_plan(argv, tmp_path, capsys)
    code, text, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    cands = json.loads(text)["candidates"]
    notes = cands[0]["notes"]
    assert notes and all("notes" not in c for c in cands[1:])
    flat = " ".join(out.split())  # rich's wrapping undone
    for note in notes:
        assert f"#1 is {note}" in flat or f"#1: {note}" in flat
    j, lay = written.job, written.require_layout()
    assert explain_notes.host_text(j, lay, cost.estimate(j, lay)) in notes
