"""Rules on the degrees and the dispatcher that `suggest` must search by, not find broken in its
own rows (it exited 2, "bad input", on recipe jobs whose own layout `check` accepts):
- `moe_expert_rank_capacity_factor` runs on the flex dispatcher's HybridEP backend only
  (`rules.flex_settings.rank_budget`: Megatron-LM d98e8a64 refuses it elsewhere), so the search
  offers flex with HybridEP alone for such a job;
- the experts' fused grouped MLP runs without expert TP (`rules.fused_mlp.fused_mlp_etp`:
  megatron.core.transformer.moe.experts `_is_fused_impl_supported`), a structural rule.
The oracle is the rules themselves, by hand on each row."""

from __future__ import annotations

import json

import pytest
from cli_run import run
from paths import REPO

RECIPES = REPO / "examples" / "recipes"


@pytest.mark.parametrize(
    "name",
    ["gpt-oss-20b-pretrain-8gpu-b300-fp8mx.toml", "gpt-oss-20b-pretrain-64gpu-b300-fp8mx.toml"],
)
def test_suggest_searches_by_hybridep_and_the_fused_mlp(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (RECIPES / name).read_text(encoding="utf-8")
    assert "moe_expert_rank_capacity_factor" in text and "moe_fused_grouped_mlp = true" in text
    code, out, _ = run(["suggest", str(RECIPES / name), "--json", "--top", "3"], capsys)
    assert code == 0
    rows = json.loads(out)["candidates"]
    assert rows
    for row in rows:
        p = row["parallel"]
        assert p["moe_token_dispatcher_type"] == "flex", p
        assert p["moe_flex_dispatcher_backend"] == "hybridep", p
        assert p["etp"] == 1, p
