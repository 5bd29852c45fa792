"""Megatron-LM's rules on hybrid Mamba stacks (planner.search.rules.hybrid).

Oracle: the assertions of Megatron-LM d98e8a64 megatron/core/ssm/mamba_mixer.py (heads and groups
divisible by tp) and megatron/core/ssm/mamba_context_parallel.py (heads per TP rank divisible by
cp; groups per TP rank dividing cp or divided by it), and megatron/core/pipeline_parallel/
combined_1f1b.py (the EP overlap calls build_schedule_plan, which only GPTModel defines); the
shapes below are the zoo's Nemotron 3 Nano (64 Mamba heads, 8 groups)."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.search import rules


def plan(parallel: dict[str, Any], num_gpus: int, **training: Any) -> Any:
    doc = {
        "model": {"name": "nemotron3-nano-30b-a3b"},
        "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": num_gpus},
        "training": {"seq_length": 4096, "global_batch_size": 64, **training},
        "parallel": parallel,
    }
    return parse_plan(doc)


def broken(p: Any) -> set[str]:
    return {v.rule for v in rules.violations(p.job, p.require_layout())}


def test_mamba_heads_and_groups_split_over_tp() -> None:
    # tp 8 divides 64 heads and 8 groups; tp 16 leaves half a group per rank
    assert "mamba_tp" not in broken(plan({"tp": 8, "sequence_parallel": True}, 8))
    assert "mamba_tp" in broken(plan({"tp": 16, "sequence_parallel": True}, 16))


@pytest.mark.parametrize(
    ("tp", "cp", "ok"), [(1, 4, True), (2, 8, True), (8, 16, False), (1, 3, False)]
)
def test_mamba_context_parallel(tp: int, cp: int, ok: bool) -> None:
    # groups per TP rank 8 / tp: 8 with cp 4 (4 divides 8), 4 with cp 8 (4 divides 8), 1 with
    # cp 16 (1 divides 16); heads per TP rank 64 / tp: 64, 32, 8: 8 % 16 != 0 breaks tp 8 x cp
    # 16; cp 3 divides neither 64 heads nor 8 groups
    p = plan({"tp": tp, "cp": cp, "sequence_parallel": tp > 1}, tp * cp)
    assert ("mamba_cp" not in broken(p)) == ok


def test_only_megatron_runs_hybrid_stacks() -> None:
    p = plan({"tp": 1}, 8, framework="torchtitan")
    assert "hybrid_framework" in broken(p)


def test_no_expert_overlap_for_hybrid_stacks() -> None:
    p = plan({"tp": 1, "ep": 8, "ep_comm_overlap": True}, 8)
    assert "hybrid_ep_overlap" in broken(p)
    assert rules.expert_overlap(p.job, p.require_layout()) is not None
