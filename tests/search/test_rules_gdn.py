"""Megatron-LM's FP8 rule on a gated delta net's in_proj (planner.search.rules.gdn.fp8).

Oracle: Megatron-LM d98e8a64 megatron/core/ssm/gated_delta_net/common.py:205-210 (under
config.fp8, `in_proj_dim % get_fp8_align_size(config.fp8_recipe) == 0`) and
megatron/core/fp8_utils.py:356-361 (`get_fp8_align_size`: 32 for Fp8Recipe.mxfp8, 16 for every
other recipe). in_proj_dim = 2 qk + 2 vd + 2 n_v (common.py:202-203, gdn.py:45) by hand below."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from planner.inputs.plan import parse_plan
from planner.search import rules


def plan(fp8_recipe: str) -> Any:
    doc = {
        "model": {"name": "qwen3-next-80b-a3b"},
        "cluster": {"gpu": "b200-sxm-180gb", "num_gpus": 64},
        "training": {
            "seq_length": 4096,
            "global_batch_size": 64,
            "precision": "fp8",
            "fp8_recipe": fp8_recipe,
        },
        "parallel": {"tp": 1, "pp": 1, "ep": 8},
    }
    return parse_plan(doc)


@pytest.mark.parametrize(
    ("recipe", "key_heads", "broken"),
    [
        # 4 key heads of 128, 8 value heads of 128: 2 x 512 + 2 x 1024 + 2 x 8 = 3088 = 96 x 32
        # + 16: a multiple of 16, not of 32
        ("mxfp8", 4, True),
        ("tensorwise", 4, False),
        ("blockwise", 4, False),
        # 8 key heads: 2 x 1024 + 2 x 1024 + 16 = 4112 = 128 x 32 + 16: still not 32's
        ("mxfp8", 8, True),
        # Qwen3-Next's own 16 key and 32 value heads: 2 x 2048 + 2 x 4096 + 64 = 12352 = 386 x 32
        ("mxfp8", 16, False),
    ],
)
def test_mxfp8_aligns_the_in_proj_width_to_32(recipe: str, key_heads: int, broken: bool) -> None:
    p = plan(recipe)
    lay = p.require_layout()
    value_heads = 32 if key_heads == 16 else 8
    update = {"linear_num_key_heads": key_heads, "linear_num_value_heads": value_heads}
    job = replace(p.job, arch=p.job.arch.model_copy(update=update))
    assert (rules.gdn.fp8(job, lay) is not None) == broken
