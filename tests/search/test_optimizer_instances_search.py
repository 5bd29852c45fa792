"""--num-distributed-optimizer-instances N on the degrees alone: Megatron-LM d98e8a64
parallel_state.py (initialize_model_parallel) asserts N divides dp x cp and the expert
data-parallel size, so `suggest` prunes whole structures by it (`rules.STRUCTURAL_RULES`).
It ranked structures that broke it and then exited 2 on its own rows ("optimizer_instances = 4
must divide ... expert data-parallel size 1") on the Nemotron 3 Ultra recipes. The oracle is
the rule itself, by hand: every row's dp x cp and expert dp divisible by 4."""

from __future__ import annotations

import json

import pytest
from cli_run import run
from paths import REPO

RECIPE = REPO / "examples" / "recipes" / "nemotron-3-ultra-pretrain-256gpu-gb200-fp8mx.toml"


def test_suggest_ranks_only_layouts_the_optimizer_instances_divide(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "optimizer_instances = 4" in RECIPE.read_text(encoding="utf-8")
    code, out, _ = run(["suggest", str(RECIPE), "--json"], capsys)
    assert code == 0
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        p = row["parallel"]
        # expert dp = tp x cp x dp / (ep x etp): the ranks of one expert shard's replicas
        expert_dp = p["tp"] * p["cp"] * p["dp"] // (p["ep"] * p["etp"])
        assert (p["dp"] * p["cp"]) % 4 == 0 and expert_dp % 4 == 0, p
