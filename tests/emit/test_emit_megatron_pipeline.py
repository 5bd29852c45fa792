"""planner.emit.megatron: the pipeline split as Megatron-LM's flags (even, first and last stage
one fewer, virtual stages per rank, the layout string).

Oracles: Megatron-LM d98e8a64's parser (planner/inputs/megatron_flags.txt) for every flag, and
validate_args / TransformerConfig.__post_init__ for the combinations; hand arithmetic of each
split in comments.
"""

from __future__ import annotations

from megatron_plans import (
    flags,
    make_plan,
)
from paths import PLANS

from planner.inputs.layout import Layout
from planner.inputs.pipeline_layout import compact, parse
from planner.inputs.plan import load_plan

# --- pipeline split


def test_even_split_with_interleaving() -> None:
    plan = load_plan(PLANS / "launch-llama3.1-70b.toml")
    f = flags(plan)
    # 80 layers / pp 4 = 20 per rank, / vpp 5 = 4 per virtual stage
    assert f["--num-layers-per-virtual-pipeline-stage"] == ["4"]
    assert "--decoder-first-pipeline-num-layers" not in f


def test_first_and_last_stage_one_fewer() -> None:
    f = flags(load_plan(PLANS / "launch-llama3.1-405b.toml"))
    assert f["--decoder-first-pipeline-num-layers"] == ["7"]
    assert f["--decoder-last-pipeline-num-layers"] == ["7"]
    assert "--num-layers-per-virtual-pipeline-stage" not in f
    assert "--pipeline-model-parallel-layout" not in f


def test_uneven_with_interleaving_uses_virtual_stages_per_rank() -> None:
    # 32 layers, pp 4, vpp 2: (6, 10, 10, 6) -> first/last 6, middle 10, all even
    par = {"tp": 2, "pp": 4, "vpp": 2, "pipeline_layers": [6, 10, 10, 6]}
    f = flags(make_plan("llama3.1-8b", 16, par, global_batch_size=64))
    assert f["--decoder-first-pipeline-num-layers"] == ["6"]
    assert f["--decoder-last-pipeline-num-layers"] == ["6"]
    assert f["--num-virtual-stages-per-pipeline-rank"] == ["2"]
    assert "--num-layers-per-virtual-pipeline-stage" not in f


def test_two_stages_use_only_the_first_stage_flag() -> None:
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 4, "pp": 2, "pipeline_layers": [15, 17]}))
    assert f["--decoder-first-pipeline-num-layers"] == ["15"]
    assert "--decoder-last-pipeline-num-layers" not in f


def test_other_uneven_splits_use_the_layout_string() -> None:
    f = flags(make_plan("llama3.1-8b", 16, {"tp": 4, "pp": 4, "pipeline_layers": [7, 9, 7, 9]}))
    assert f["--pipeline-model-parallel-layout"] == ["Et*7|t*9|t*7|t*9L"]
    assert "--decoder-first-pipeline-num-layers" not in f


def test_layout_string_for_deepseek_interleaved() -> None:
    # pipeline_layers (5, 4 x 13, 2, 2) in 2 chunks per rank: rank 0 [3, 2], ranks 1-13 [2, 2],
    # ranks 14-15 [1, 1]; stage k on rank k % 16; MTP and loss on the last stage
    per_rank = (5, *[4] * 13, 2, 2)
    text = compact(Layout(pp=16, vpp=2, pipeline_layers=per_rank).stages(61, 1))
    assert text == "Et*3|(t*2|)*13(t|)*2(t*2|)*14t|tmL"
    assert parse(text) == Layout(pp=16, vpp=2, pipeline_layers=per_rank).stages(61, 1)


def test_even_split_whose_ranks_do_not_divide_by_vpp_uses_the_layout() -> None:
    # 2 x 6 layers with vpp 4 is not a Megatron even split (6 % 4): chunks [2, 2, 1, 1]
    layout = compact(Layout(pp=2, vpp=4, pipeline_layers=(6, 6)).stages(12, 0))
    assert layout == "Et*2|(t*2|)*3(t|)*3tL"
    assert parse(layout) == Layout(pp=2, vpp=4, pipeline_layers=(6, 6)).stages(12, 0)
