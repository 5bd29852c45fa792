"""DeepSeek-V3.2 Hugging Face configs (DeepseekV32ForCausalLM, model_type deepseek_v32) ->
ModelArch: DeepSeek-V3's fields and DeepSeek sparse attention's indexer.

Oracle: the deepseek-ai/DeepSeek-V3.2-Exp model card's config.json: architectures
["DeepseekV32ForCausalLM"], model_type "deepseek_v32", index_n_heads 64, index_head_dim 128,
index_topk 2048, every other field DeepSeek-V3's (tests/data/hf/deepseek-v3.json, the published
DeepSeek-V3 config.json); the configs are built here from that fixture."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import HF

from planner.inputs.errors import InputError
from planner.inputs.hf_import import arch_from_hf

INDEXER = {"index_n_heads": 64, "index_head_dim": 128, "index_topk": 2048}
DSA_FIELDS = ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk")
NAMING = {"name", "display_name", "source"}


def v3() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF / "deepseek-v3.json").read_text())
    return data


def v32(**change: Any) -> dict[str, Any]:
    cfg = {**v3(), "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32"}
    return {**cfg, **INDEXER, **change}


def test_v32_is_v3_with_the_indexer() -> None:
    arch = arch_from_hf(v32(), "v32.json")
    assert (arch.dsa_indexer_n_heads, arch.dsa_indexer_head_dim, arch.dsa_indexer_topk) == (
        64,
        128,
        2048,
    )
    assert arch.has_dsa
    base = arch_from_hf(v3(), "v3.json")
    assert not base.has_dsa
    # everything else is DeepSeek-V3's mapping
    assert arch.model_dump(exclude=NAMING | set(DSA_FIELDS)) == base.model_dump(
        exclude=NAMING | set(DSA_FIELDS)
    )


def test_model_type_alone_names_the_family() -> None:
    cfg = v32()
    del cfg["architectures"]
    assert arch_from_hf(cfg, "v32.json").dsa_indexer_topk == 2048


@pytest.mark.parametrize("key", sorted(INDEXER))
def test_each_indexer_size_is_required(key: str) -> None:
    cfg = v32()
    del cfg[key]
    with pytest.raises(InputError, match=rf"v32\.json: {key}: required field missing"):
        arch_from_hf(cfg, "v32.json")


def test_attention_bias_is_refused() -> None:
    # DSA runs on Megatron's absorbed MLA, which asserts add_bias_linear False
    with pytest.raises(InputError, match="add_bias_linear"):
        arch_from_hf(v32(attention_bias=True), "v32.json")
