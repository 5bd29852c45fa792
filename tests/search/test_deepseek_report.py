"""Issue 21's acceptance test for the DeepSeek-V3 report as a plan: on that job (2,048 H800, its
batch, sequence and FP8 recipe; examples/deepseek-v3-h800.toml without its [parallel] table),
`suggest`'s first layout is at least as fast as DeepSeek's own layout as the example writes it
(tp 1, pp 16, ep 64, its recompute, with Megatron's fine-grained offloading to fit).

Oracle: the same model's estimate of the example plan; the search is certified exact over its
space, which holds that layout's parallel degrees and memory savers."""

from __future__ import annotations

from pathlib import Path

from planner.inputs.plan import load_plan
from planner.model import cost, memory
from planner.search import top_k

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "deepseek-v3-h800.toml"


def test_suggest_ranks_a_layout_at_least_as_fast_as_deepseeks_own_first() -> None:
    plan = load_plan(EXAMPLE)
    own = plan.require_layout()
    assert memory.estimate(plan.job, own).fits  # the example fits (issue 21)
    own_speed = cost.estimate(plan.job, own).tokens_per_s_per_gpu
    best = top_k.search(plan.job, top_k=1).candidates[0]
    assert best.memory.fits
    assert best.performance.tokens_per_s_per_gpu >= own_speed, (best.layout.describe(), own_speed)
