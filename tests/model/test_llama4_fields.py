"""Llama 4's q/k L2 norm, RoPE-less layers, sigmoid router and probabilities on the expert input:
read from Megatron-LM flags and HF's config, counted in memory, written back by the launch.

Oracles: Megatron-LM d98e8a64 gpt_layer_specs.py:148-153 and attention.py:1709-1711 (L2Norm on q
and k of every layer), torch_norm.py:94-106 (x.float() * rsqrt(mean(x^2) + eps) under jit_fuser,
torch.compile by default, jit.py:16-33: its 16-bit input and an fp32 rsqrt a row kept, as the
q/k RMSNorm); experts.py:918-926 (permuted_probs * permuted_local_hidden_states keeps the
dispatched tokens for the probabilities' gradient); transformers Llama4TextAttention (the L2 norm
only where use_rope; every 4th layer without RoPE by default). Hand arithmetic in each test."""

from __future__ import annotations

from typing import Any

import pytest

from planner.inputs import catalog, megatron_args
from planner.inputs.hf_import import arch_from_hf
from planner.model import activations as act
from planner.model import moe_activations as moe
from planner.model.shard import Shard
from tests.emit.megatron_plans import flags, make_plan, round_trip
from tests.inputs.test_megatron_args import LLAMA3_8B

T = 4096
QWEN = catalog.get_model("qwen3-30b-a3b")  # 32 query heads, 4 KV groups, head dim 128, h 2048


def test_megatron_flags_are_read_not_ignored() -> None:
    extra = "--qk-l2-norm --no-rope-freq 4 --moe-router-score-function sigmoid"
    reading = megatron_args.read(LLAMA3_8B.replace("--bf16", f"--bf16 {extra}"), "h100-sxm-80gb", 8)
    model = reading.doc["model"]
    assert (model["qk_l2_norm"], model["no_rope_freq"]) == (True, 4)
    assert model["moe_router_score_function"] == "sigmoid"
    assert not {"--qk-l2-norm", "--no-rope-freq", "--moe-router-score-function"} & set(
        reading.ignored
    )


def test_l2_norm_keeps_what_the_qk_rmsnorm_keeps_on_its_layers() -> None:
    bare = QWEN.model_copy(update={"qk_layernorm": False})
    l2 = bare.model_copy(update={"qk_l2_norm": True, "no_rope_freq": 4})
    sh = Shard(tokens=T, seq_per_cp_rank=T)
    # Megatron: every layer, 2 x 36 x 128 + 4 x 36 = 9,360 bytes a token
    assert act.attention_bytes(l2, sh) - act.attention_bytes(bare, sh) == pytest.approx(T * 9360)
    # --qk-l2-norm replaces --qk-layernorm's norm (gpt_layer_specs.py:149): no second copy
    both = QWEN.model_copy(update={"qk_l2_norm": True})
    assert act.attention_bytes(both, sh) == act.attention_bytes(QWEN, sh)


def test_probs_on_input_keeps_the_dispatched_tokens() -> None:
    top1 = QWEN.model_copy(update={"moe_router_topk": 1})
    probs = top1.model_copy(update={"moe_apply_probs_on_input": True})
    sh = Shard(tokens=T, seq_per_cp_rank=T, tp=2, sequence_parallel=True, moe_load=1.0)
    # pairs = 1 x 4096 / 2 = 2048, each h = 2048 wide, 2 bytes: 8,388,608
    assert moe.moe_bytes(probs, sh) - moe.moe_bytes(top1, sh) == pytest.approx(2048 * 2048 * 2)
    # torchtitan's score_before_experts copy is `combine_bytes` (moe.py:517-521): not twice
    tt = Shard(tokens=T, seq_per_cp_rank=T, weighted_experts=False)
    assert moe.moe_bytes(probs, tt) == moe.moe_bytes(top1, tt)


def _scout(**text: Any) -> dict[str, Any]:
    cfg = {
        "architectures": ["Llama4ForConditionalGeneration"],
        "model_type": "llama4",
        "text_config": {
            "model_type": "llama4_text",
            "hidden_size": 5120,
            "intermediate_size": 8192,
            "intermediate_size_mlp": 16384,
            "num_hidden_layers": 8,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 202048,
            "num_local_experts": 16,
            "num_experts_per_tok": 1,
            "interleave_moe_layer_step": 1,
            **text,
        },
    }
    return cfg


def test_hf_llama4_fields() -> None:
    arch = arch_from_hf(_scout(), "scout.json")
    assert (arch.no_rope_freq, arch.qk_l2_norm) == (4, True)
    assert arch.moe_router_score_function == "sigmoid" and arch.moe_apply_probs_on_input
    listed = arch_from_hf(_scout(no_rope_layers=[1, 0, 1, 1, 1, 1, 1, 0]), "scout.json")
    assert listed.no_rope_freq == (0, 1, 0, 0, 0, 0, 0, 1)  # HF 1 = RoPE, Megatron 1 = none
    off = arch_from_hf(_scout(use_qk_norm=False), "scout.json")
    assert not off.qk_l2_norm


def test_launch_writes_them_and_reads_them_back() -> None:
    model = {
        **QWEN.model_dump(exclude={"name"}),
        "name": "l4-like",
        "qk_layernorm": False,
        "moe_router_topk": 1,
        "qk_l2_norm": True,
        "no_rope_freq": 4,
        "moe_router_score_function": "sigmoid",
        "moe_apply_probs_on_input": True,
    }
    plan = make_plan(model, 8, {"ep": 8})
    f = flags(plan)
    assert f["--qk-l2-norm"] == [] and f["--no-rope-freq"] == ["4"]
    assert f["--moe-router-score-function"] == ["sigmoid"]
    assert f["--moe-apply-probs-on-input"] == []
    back = round_trip(plan).job.arch
    for field in ("qk_l2_norm", "no_rope_freq", "moe_router_score_function"):
        assert getattr(back, field) == getattr(plan.job.arch, field)
    assert back.moe_apply_probs_on_input
