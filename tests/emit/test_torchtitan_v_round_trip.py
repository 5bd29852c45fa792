"""A ZBVZeroBubble plan written by `launch --target torchtitan` (the e347b1e5 TOML) and
`torchtitan-module` (the b5bcd76c Python configuration), read back by `check --torchtitan-config`:
module_fqns_per_model_part lists the stages in stage order, torchtitan builds stages r and
2 pp - 1 - r of it on rank r, and the plan read back is the plan (its V placement, memory and
step time).

Oracles: torchtitan's source for what the file means (e347b1e5 distributed/pipeline_parallel.py:
447-469 and b5bcd76c :551-567: rank r builds module_fqns_per_model_part[k] for k in
zip(range(pp), range(2 pp - 1, pp - 1, -1))[r] under ZBVZeroBubble and DualPipeV), and the plan
itself for the round trip."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from plan_text import titan_pp2_vpp2, write

from planner.emit.launch import render
from planner.inputs import torchtitan_config
from planner.inputs.plan import Plan, load_plan
from planner.model import cost, memory
from planner.search.rules import check_plan

SPLITS = {
    "torchtitan's own": ("", ((8, 7), (9, 8))),
    "pipeline_layers": ("pipeline_layers = [14, 18]", ((7, 7), (9, 9))),
}
"""The plan's split, and each rank's layers in its two stages (stage r, stage 3 - r): torchtitan's
32 + 2 over 4 stages less the embedding and output (8 9 8 7), or 14 and 18 a rank in halves."""


def _rank_modules(parts: list[list[str]], rank: int) -> list[str]:
    """What torchtitan builds on `rank` of pp 2 under a V schedule (module docstring)."""
    stages = list(zip(range(2), range(3, 1, -1), strict=True))[rank]
    return [name for k in stages for name in parts[k]]


def _toml_parts(text: str) -> list[list[str]]:
    parts: list[list[str]] = tomllib.loads(text)["parallelism"]["module_fqns_per_model_part"]
    return parts


def _module_parts(text: str) -> list[list[str]]:
    found = re.search(r"module_fqns_per_model_part=(\[.*?\]\]),", text)
    assert found is not None
    parts: Any = ast.literal_eval(found.group(1))
    return [["output" if m == "lm_head" else m for m in part] for part in parts]


@pytest.mark.parametrize("split", sorted(SPLITS))
@pytest.mark.parametrize(
    "target, name, parts_of",
    [
        ("torchtitan", "torchtitan.toml", _toml_parts),
        ("torchtitan-module", "job.py", _module_parts),
    ],
)
def test_a_v_plan_launched_checks_as_itself(
    tmp_path: Path, split: str, target: str, name: str, parts_of: Any
) -> None:
    given, halves = SPLITS[split]
    plan: Plan = check_plan(
        load_plan(write(tmp_path, titan_pp2_vpp2("ZBVZeroBubble", "selective", given)))
    )
    lay = plan.require_layout()
    text = render(plan, target, "job")[1]
    parts = parts_of(text)
    assert len(parts) == 4
    # rank 0 builds the first and the last stage: the embedding, the norm and the output layer
    first = _rank_modules(parts, 0)
    assert first[0] == "tok_embeddings" and first[-2:] == ["norm", "output"]
    for rank, chunks in enumerate(lay.chunk_layers(32)):
        built = [
            int(m.split(".")[1]) for m in _rank_modules(parts, rank) if m.startswith("layers.")
        ]
        assert built == [i for c in chunks for i in c]
        assert tuple(map(len, chunks)) == halves[rank]
    assert lay.v_stages and lay.output_rank == 0
    path = tmp_path / name
    path.write_text(text)
    back = check_plan(torchtitan_config.load(path, "h100-sxm-80gb", None))
    got = back.require_layout()
    assert got.v_stages and got.chunk_layers(32) == lay.chunk_layers(32)
    assert got.stages(32) == lay.stages(32)
    assert cost.estimate(back.job, got).step_time_s == cost.estimate(plan.job, lay).step_time_s
    mine, theirs = memory.estimate(plan.job, lay), memory.estimate(back.job, got)
    assert [st.total for st in theirs.stages] == [st.total for st in mine.stages]
    assert theirs.worst.stage == mine.worst.stage == 0
