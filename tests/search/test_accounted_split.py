"""The split that counts the embedding and the output layer as layers (Megatron's
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split) in the search
space: which (pp, vpp) have it, that the search finds it, and that what it writes says so.

Oracles: hand arithmetic on Llama 3.1 405B's 126 layers (in comments), the layout of NVIDIA's
Megatron-Bridge recipe for 405B on 128 B200 in FP8 (benchmarks/data/bridge_recipes.md; its plan
file examples/recipes/llama31-405b-pretrain-128gpu-b200-fp8cs.toml: tp 4, pp 8, cp 2, vpp 8 with
both flags), whose own estimate bounds what an exact search over a space holding it returns."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.inputs.layout import Layout
from planner.inputs.plan import load_plan
from planner.model import cost
from planner.search import rules
from planner.search.space import Bound, Space
from planner.search.splits import ACCOUNTED, split_fields, splits, vpp_candidates
from planner.search.top_k import search

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "examples" / "recipes" / "llama31-405b-pretrain-128gpu-b200-fp8cs.toml"


def test_interleaving_degrees_with_the_accounted_split() -> None:
    # 126 + 2 = 128 units; pp 8: 16 a rank, so vpp 2, 4, 8 leave 8, 4, 2 a virtual stage, and
    # vpp 16 one, which would leave the first and the last stage without a decoder layer
    with_it = set(vpp_candidates(126, 8, True, False))
    assert {2, 4, 8} <= with_it
    assert 16 not in with_it
    # no even split (126 / 8 is not whole); the first/last form's candidates are the divisors of
    # 126 with 8 v <= 126 (1, 2, 3, 6, 7, 9, 14): the accounting adds 4 and 8
    assert set(vpp_candidates(126, 8, False, False)) == set()
    assert with_it == {1, 2, 3, 6, 7, 9, 14} | {4, 8}
    # pp 5: 128 is not a multiple of 5, so no accounted degree
    assert not {v for v in vpp_candidates(126, 5, True, False) if v > 1 and 128 % (5 * v) == 0}


def test_splits_of_405b_at_pp8_vpp8() -> None:
    job = load_plan(RECIPE).job
    # no even split, no first/last split whose ranks hold multiples of 8 and sum to 126
    assert splits(job, Space(), 8, 8) == [ACCOUNTED]
    assert splits(job, Space(uneven=False), 8, 8) == []
    # vpp 1: the per-rank counts of the accounting (15, 16 x 6, 15) are a first/last split
    assert ACCOUNTED not in splits(job, Space(), 8, 1)


def test_accounted_layout_passes_megatrons_rules() -> None:
    job = load_plan(RECIPE).job
    lay = Layout(tp=4, pp=8, dp=2, cp=2, vpp=8, sequence_parallel=True, **split_fields(ACCOUNTED))
    assert lay.stage_layers(126) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert not rules.violations(job, lay)
    assert not lay.even_split


def test_search_finds_the_recipes_split() -> None:
    """Over tp 4, cp 2, pp 8 (every other choice open) the space holds the recipe's layout, so the
    exact search returns none slower; before the accounted split was in the space its best took
    vpp 2 and ran 6% slower than the recipe (5.94 s against 5.57 s)."""
    plan = load_plan(RECIPE)
    recipe = cost.estimate(plan.job, plan.layout).step_time_s
    space = Space(tp=Bound(4, 4), cp=Bound(2, 2), pp=Bound(8, 8))
    best = search(plan.job, space, 1).candidates[0]
    assert best.step_time <= recipe * (1 + 1e-9)
    assert best.layout.account_for_embedding_in_pipeline_split
    assert best.layout.account_for_loss_in_pipeline_split


def test_written_plan_and_arguments_carry_the_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.toml"
    job.write_text(RECIPE.read_text().split("[parallel]")[0])
    plan = tmp_path / "plan.toml"
    argv = ["suggest", str(job), "--tp", "4", "--cp", "2", "--pp", "8", "--write-plan", str(plan)]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    text = plan.read_text()
    assert "account_for_embedding_in_pipeline_split = true" in text
    assert "account_for_loss_in_pipeline_split = true" in text
    code, out, err = run(["launch", str(plan), "--target", "megatron-args"], capsys)
    assert code == 0, err
    assert "--account-for-embedding-in-pipeline-split" in out
    assert "--account-for-loss-in-pipeline-split" in out
    code, _, err = run(["check", str(plan)], capsys)
    assert code == 0, err
