"""DeepSeek sparse attention launched: the Megatron-LM flags (and the round trip through
`planner check --megatron-args`, which must give back the same model, job and memory), and the
Megatron-Bridge override's DSA fields.

Oracle: Megatron-LM d98e8a64 transformer_config.py (the dsa_indexer_* fields, whose --dsa-* flags
arguments.py generates: n_heads, head_dim and topk have no defaults, so the launch must give
them; dsa_kernel_backend defaults to "none"; `__post_init__` asserts no RoPE fusion for "dsa",
i.e. --no-rope-fusion), megatron_flags.txt (every flag its parser accepts), and
tests/data/megatron_bridge_config_schema.json (TransformerConfig's dsa_* fields at the Megatron-LM
commit Megatron-Bridge pins)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from bridge_schema import _accepted
from jobs import TINY_DSA
from megatron_plans import MEGATRON_FLAGS, assert_same, flags, make_plan, round_trip

from planner.emit.launch import render
from planner.inputs.errors import InputError

TINY: dict[str, Any] = dict(TINY_DSA)
DSA_FLAGS = ("--dsa-indexer-n-heads", "--dsa-indexer-head-dim", "--dsa-indexer-topk")


def test_the_zoo_model_launches_its_sparse_attention() -> None:
    plan = make_plan("deepseek-v3.2", 256, {"tp": 8, "pp": 4, "ep": 8})
    f = flags(plan)
    assert f["--experimental-attention-variant"] == ["dsa"]
    assert [f[x] for x in DSA_FLAGS] == [["64"], ["128"], ["2048"]]
    assert f["--dsa-kernel-backend"] == ["tilelang"]  # a plan's default, written out
    assert "--no-rope-fusion" in f and "--multi-latent-attention" in f
    assert "--disable-bias-linear" in f and "--sequence-parallel" in f
    # no indexer loss unless the plan runs one
    assert "--dsa-indexer-loss-coeff" not in f and "--dsa-indexer-use-sparse-loss" not in f
    assert set(f) <= MEGATRON_FLAGS
    # a dense MLA model writes none of them
    dense = flags(make_plan("deepseek-v3", 256, {"tp": 8, "pp": 4, "ep": 8}))
    assert not any("dsa" in k for k in dense) and "--experimental-attention-variant" not in dense


def test_backend_and_loss_are_written() -> None:
    plan = make_plan(
        TINY, 8, {"tp": 2}, dsa_kernel_backend="tilelang", dsa_indexer_loss_coeff=0.01,
        dsa_indexer_use_sparse_loss=True,
    )  # fmt: skip
    f = flags(plan)
    assert f["--dsa-kernel-backend"] == ["tilelang"]
    assert f["--dsa-indexer-loss-coeff"] == ["0.01"]
    assert f["--dsa-indexer-use-sparse-loss"] == []


ROUND_TRIPS: list[tuple[dict[str, Any] | str, int, dict[str, Any], dict[str, Any]]] = [
    (TINY, 8, {"tp": 2}, {}),
    (TINY, 8, {"tp": 2}, {"dsa_kernel_backend": "cudnn", "dsa_indexer_loss_coeff": 0.0123}),
    (TINY, 8, {"tp": 1, "cp": 2, "cp_comm_type": "all_gather"}, {"dsa_kernel_backend": "tilelang"}),
    (
        TINY,
        16,
        {"tp": 2, "pp": 2},
        {"dsa_indexer_loss_coeff": 0.01, "dsa_indexer_use_sparse_loss": True},
    ),
    ("deepseek-v3.2", 256, {"tp": 8, "pp": 4, "ep": 8}, {"dsa_kernel_backend": "tilelang"}),
]


@pytest.mark.parametrize(("model", "n", "parallel", "training"), ROUND_TRIPS)
def test_round_trip(
    model: dict[str, Any] | str, n: int, parallel: dict[str, Any], training: dict[str, Any]
) -> None:
    plan = make_plan(model, n, parallel, **training)
    back = round_trip(plan)
    assert_same(plan, back)
    arch, again = plan.job.arch, back.job.arch
    for field in ("dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk"):
        assert getattr(again, field) == getattr(arch, field), field
    for field in ("dsa_kernel_backend", "dsa_indexer_loss_coeff", "dsa_indexer_use_sparse_loss"):
        assert getattr(back.job, field) == getattr(plan.job, field), field
    assert back.job.fused_rope == plan.job.fused_rope is False


def test_dsa_beside_gated_delta_nets_cannot_be_planned() -> None:
    # Megatron takes one --experimental-attention-variant; DSA needs MLA, which the model
    # refuses beside gated delta nets, so no plan asks for both
    model = {**TINY, "linear_attention_freq": 2}
    with pytest.raises(InputError, match="linear_attention_freq"):
        make_plan(model, 8, {"tp": 2})


def test_bridge_writes_the_plans_dsa_choices() -> None:
    plan = make_plan(TINY, 8, {"tp": 2}, dsa_kernel_backend="cudnn", dsa_indexer_loss_coeff=0.01)
    text = render(plan, "megatron-bridge")[1]
    doc = yaml.safe_load(text)
    _accepted(doc)  # each one a TransformerConfig field, with a value its annotation takes
    model = doc["model"]
    assert model["dsa_kernel_backend"] == "cudnn"
    assert model["dsa_indexer_loss_coeff"] == 0.01
    assert model["dsa_indexer_use_sparse_loss"] is False
    assert model["apply_rope_fusion"] is False
    # the shape is the recipe's: named in a note
    assert "dsa_indexer_topk=2048: the recipe's model must set them" in text
    dense = yaml.safe_load(render(make_plan("llama3.1-8b", 8, {"tp": 2}), "megatron-bridge")[1])
    assert not any(k.startswith("dsa_") for k in dense["model"])
