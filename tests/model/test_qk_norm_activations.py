"""The query and key norms keep their own inputs.

Oracle: Megatron-LM d98e8a64 builds q/k norms as TENorm (gpt_layer_specs.py:318, 327-332) and
applies them to the split query and key (attention.py:1931-1935); TransformerEngine d0067d0d
ops/basic/rmsnorm.py:189 takes a contiguous copy of the input and :209 saves it with the fp32
rstd. Hand arithmetic: Qwen3-30B-A3B (32 query heads, 4 KV groups, head dim 128) keeps
2 x 36 x 128 + 4 x 36 = 9,360 bytes a token more than the same model without q/k norms (QA:
planner counted the same 28,672 bytes either way)."""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.model import activations as act
from planner.model.shard import Shard

T = 4096


@pytest.mark.parametrize("recompute", ["none", "core_attn"])
def test_qk_norm_inputs_are_kept(recompute: str) -> None:
    qwen = catalog.get_model("qwen3-30b-a3b")
    assert qwen.qk_layernorm
    bare = qwen.model_copy(update={"qk_layernorm": False})
    sh = Shard(tokens=T, seq_per_cp_rank=T, recompute=recompute)  # type: ignore[arg-type]
    extra = act.attention_bytes(qwen, sh) - act.attention_bytes(bare, sh)
    assert extra == pytest.approx(T * (2 * 36 * 128 + 4 * 36))


def test_tp_splits_them() -> None:
    qwen = catalog.get_model("qwen3-30b-a3b")
    bare = qwen.model_copy(update={"qk_layernorm": False})
    sh = Shard(tokens=T, seq_per_cp_rank=T, tp=4, sequence_parallel=True)
    extra = act.attention_bytes(qwen, sh) - act.attention_bytes(bare, sh)
    assert extra == pytest.approx(T * (2 * 36 * 128 + 4 * 36) / 4)
