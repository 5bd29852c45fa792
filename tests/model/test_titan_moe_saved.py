"""What torchtitan's MoE layer keeps for its backward, and what its per-op checkpointing re-runs.

Oracles (pytorch/torchtitan e347b1e5, the version planner's torchtitan target follows):
models/moe/moe.py:541-549 (the combine's torch.bmm of the fp32 scores and an fp32 copy of the
routed outputs; bmm's derivative for its first input reads the second, torch derivatives.yaml
`bmm`), :67-68 (the shared experts' unfused w2(silu(w1(x)) * w3(x))), :524-529 (shared experts run
after the routed ones); models/qwen3/infra/parallelize.py:39-53 and
models/deepseek_v3/infra/parallelize.py:33-47 (the per-op save lists: aten.mm, no
aten._grouped_mm); distributed/activation_checkpoint.py:109-117 (every second counted aten.mm
re-run). Hand arithmetic in each test."""

from __future__ import annotations

import pytest

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.model import gemm_shapes
from planner.model.activations import layer_bytes
from planner.model.moe_activations import moe_bytes
from planner.model.shard import Shard

QWEN3 = catalog.get_model("qwen3-30b-a3b")  # h 2048, top-8 of 128 experts of 768, GQA 32 / 4
T = 4096


def titan(**kw: object) -> Shard:
    return Shard(tokens=T, seq_per_cp_rank=T, weighted_experts=False, moe_load=1.0, **kw)  # type: ignore[arg-type]


def test_combine_keeps_an_fp32_copy_of_the_routed_outputs() -> None:
    # fused activation on both sides, so the experts' own tensors match; torchtitan's combine
    # adds the fp32 (T, k, h) copy bmm saves: 4 x 4096 x 8 x 2048 = 268,435,456 bytes a layer
    megatron = Shard(tokens=T, seq_per_cp_rank=T, fused_swiglu=True, moe_load=1.0)
    diff = moe_bytes(QWEN3, titan(fused_swiglu=True)) - moe_bytes(QWEN3, megatron)
    assert diff == pytest.approx(4 * 4096 * 8 * 2048, rel=1e-12)


def test_combine_copy_is_recomputed_under_per_op_checkpointing() -> None:
    # bmm and the .float() copy are not on the per-op save list: nothing of it kept; the
    # rebuilt layer's working set (recompute=False) holds it
    per_op = titan(recompute="per_op")
    kept = layer_bytes(QWEN3, True, per_op) - layer_bytes(
        QWEN3, True, Shard(tokens=T, seq_per_cp_rank=T, recompute="per_op", moe_load=1.0)
    )
    assert kept == 0.0
    working = layer_bytes(QWEN3, True, per_op, recompute=False)
    assert working - layer_bytes(
        QWEN3,
        True,
        Shard(tokens=T, seq_per_cp_rank=T, recompute="per_op", moe_load=1.0),
        recompute=False,
    ) == pytest.approx(4 * 4096 * 8 * 2048, rel=1e-12)


def test_unfused_shared_experts_keep_silus_output() -> None:
    # DeepSeek-V3 (h 7168, top-8 of 256 experts of 2048, shared experts 2048), tp 1, load 1:
    # unfused, silu's output is kept for the routed pairs (8 T x 2048) and, as a dense MLP's,
    # for the shared experts (T x 2048): 2 bytes x 9 x 2048 x T more than fused
    v3 = catalog.get_model("deepseek-v3")
    diff = moe_bytes(v3, titan(fused_swiglu=False)) - moe_bytes(v3, titan(fused_swiglu=True))
    assert diff == pytest.approx(2 * 9 * 2048 * T, rel=1e-12)


def test_per_op_re_runs_every_routed_grouped_gemm() -> None:
    # Qwen3-30B-A3B, one token, tp 1: wq (4096), wk (512), wv (512), wo (2048) counted; wq and
    # wv kept: 4,608 elements; the routed experts' grouped GEMMs (8 pairs: w1 and w3 2 x 768,
    # w2 2048 wide) keep nothing and re-run: 2 x 8 x 2048 x 1536 + 2 x 8 x 768 x 2048 FLOPs,
    # with wk's 2 x 2048 x 512 and wo's 2 x 4096 x 2048 (the half rule kept 14,336 of them)
    gemms = gemm_shapes.linear_gemms(QWEN3, 1.0, 1, 1, 1, True)
    saved, rerun, whole = gemm_shapes.per_op_split(QWEN3, gemms, 1, True)
    routed = 2 * 8 * 2048 * 1536 + 2 * 8 * 768 * 2048
    assert saved == pytest.approx(4096 + 512, rel=1e-12)
    assert rerun == pytest.approx(2 * 2048 * 512 + 2 * 4096 * 2048 + routed, rel=1e-12)
    attention = 2 * 2048 * (4096 + 512 + 512) + 2 * 4096 * 2048
    assert whole == pytest.approx(attention + routed, rel=1e-12)


def test_per_op_counts_the_shared_experts_after_the_attention() -> None:
    # MHA 8 heads x 128 (h 1024), top-2 of 8 experts of 512, shared experts 1024 wide, one token:
    # counted wq, wk, wv, wo, then the shared w1, w3 and w2 (1024 wide each): the 1st, 3rd, 5th
    # and 7th kept, 4 x 1024 = 4,096 elements (the half rule: 2,048 + 7,168 / 2 = 5,632); re-run
    # wk, wo and w3 (2 x 1024^2 each) and the routed GEMMs (2 pairs: 2 x 2 x 1024 x 1024 and
    # 2 x 2 x 512 x 1024): 12,582,912 FLOPs
    arch = ModelArch(
        name="moe-test",
        num_layers=2,
        hidden_size=1024,
        ffn_hidden_size=4096,
        num_attention_heads=8,
        vocab_size=1000,
        gated_linear_unit=True,
        activation="swiglu",
        num_moe_experts=8,
        moe_router_topk=2,
        moe_ffn_hidden_size=512,
        moe_shared_expert_intermediate_size=1024,
    )
    gemms = gemm_shapes.linear_gemms(arch, 1.0, 1, 1, 1, True)
    saved, rerun, _ = gemm_shapes.per_op_split(arch, gemms, 1, True)
    assert saved == pytest.approx(4096, rel=1e-12)
    assert rerun == pytest.approx(12_582_912, rel=1e-12)
