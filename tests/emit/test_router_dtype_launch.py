"""training.moe_router_dtype launched: Megatron-LM's --moe-router-dtype (TransformerConfig
moe_router_dtype, NVIDIA/Megatron-LM d98e8a64 transformer_config.py:811, choices fp32 / fp64,
default None; a parser flag from the dataclass, training/arguments.py:2373) and Megatron-Bridge's
model.moe_router_dtype (the same TransformerConfig field; tests/data/megatron_bridge_config_schema
.json, and Bridge 067f987d docs/megatron-lm-to-megatron-bridge.md:391 maps the flag to it).

Oracle: those fields; the flag read back gives the same plan (tests/emit/megatron_plans.py)."""

from __future__ import annotations

import pytest
import yaml
from megatron_plans import assert_same, flags, make_plan, round_trip
from test_emit_bridge import accepted

from planner.emit.launch import render
from planner.inputs.errors import InputError
from planner.inputs.megatron_args import to_plan

LAYOUT = {"tp": 2, "ep": 8, "etp": 2, "moe_token_dispatcher_type": "allgather"}


def test_megatron_writes_and_reads_back_the_flag() -> None:
    plan = make_plan("mixtral-8x7b", 16, LAYOUT, moe_router_dtype="fp32")
    assert flags(plan)["--moe-router-dtype"] == ["fp32"]
    back = round_trip(plan)
    assert back.job.moe_router_dtype == "fp32"
    assert_same(plan, back)
    # without it, no flag (Megatron's default: the hidden states' dtype)
    assert "--moe-router-dtype" not in flags(make_plan("mixtral-8x7b", 16, LAYOUT))


def test_bridge_writes_the_model_field() -> None:
    plan = make_plan("mixtral-8x7b", 16, LAYOUT, moe_router_dtype="fp64")
    doc = yaml.safe_load(render(plan, "megatron-bridge")[1])
    assert doc["model"]["moe_router_dtype"] == "fp64"
    accepted(doc)
    plain = yaml.safe_load(render(make_plan("mixtral-8x7b", 16, LAYOUT), "megatron-bridge")[1])
    assert "moe_router_dtype" not in plain["model"]


def test_a_choice_megatron_refuses_exits_2() -> None:
    line = (
        "pretrain_gpt.py --num-layers 2 --hidden-size 512 --num-attention-heads 8 "
        "--seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 1 "
        "--global-batch-size 8 --bf16 --vocab-size 32000 --tokenizer-type NullTokenizer "
        "--num-experts 8 --moe-router-topk 2 --moe-router-dtype bf16"
    )
    with pytest.raises(InputError, match="--moe-router-dtype"):
        to_plan(line, "h100-sxm-80gb", 8)
