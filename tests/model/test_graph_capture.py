"""The pre-MoE norm output Megatron keeps under Transformer Engine's router graphs
(`planner.model.graph_capture.keeps_pre_moe_norm`, `Shard.keeps_pre_moe_norm`). Oracle:
Megatron-LM d98e8a64 megatron/core/transformer/transformer_layer.py:481-527
(can_recompute_pre_mlp_layernorm_for_cudagraph), case by case, and hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import activations, moe_activations
from planner.model.graph_capture import keeps_pre_moe_norm
from planner.model.shard import Shard

LAY = Layout(tp=1, pp=2, dp=8, ep=8)
MOE = job("qwen3-30b-a3b", "h100-sxm-80gb", 16, 4544, 16, cuda_graphs=True)
TE = replace(MOE, cuda_graph_impl="transformer_engine", cuda_graph_modules=("attn", "moe_router"))


def test_te_router_graphs_keep_the_norm_output_unless_the_preprocess_is_captured() -> None:
    assert keeps_pre_moe_norm(TE, LAY)  # :504-521: moe_router without moe_preprocess
    both = replace(TE, cuda_graph_modules=("attn", "moe_router", "moe_preprocess"))
    assert not keeps_pre_moe_norm(both, LAY)  # :504-513: + moe_preprocess with alltoall
    gathered = replace(LAY, moe_token_dispatcher_type="allgather")
    assert keeps_pre_moe_norm(both, gathered)  # not alltoall, not latent: :514-521
    latent = replace(both, arch=both.arch.model_copy(update={"moe_latent_size": 512}))
    assert not keeps_pre_moe_norm(latent, gathered)  # :505-506: or a latent MoE
    # :482-488: the local implementation (None's too), another region, eager: recomputed
    assert not keeps_pre_moe_norm(replace(TE, cuda_graph_impl="local"), LAY)
    assert not keeps_pre_moe_norm(replace(TE, cuda_graph_impl=None), LAY)
    assert not keeps_pre_moe_norm(replace(TE, cuda_graph_modules=("attn",)), LAY)
    assert not keeps_pre_moe_norm(replace(TE, cuda_graph_modules=()), LAY)
    assert not keeps_pre_moe_norm(replace(TE, cuda_graphs=False), LAY)


def test_the_kept_norm_output_is_counted_despite_layernorm_recompute() -> None:
    """moe_bytes with layernorm recomputed but the norm output kept is the layer without that
    recompute: one bf16 value per local token and hidden unit more (2 x T x h, hand count)."""
    arch = TE.arch
    T = 4544 * 2
    base = Shard(tokens=T, recompute="core_attn", modules=frozenset({"layernorm"}))
    kept = replace(base, keeps_pre_moe_norm=True)
    none = Shard(tokens=T)
    assert moe_activations.moe_bytes(arch, kept) == moe_activations.moe_bytes(arch, none)
    extra = moe_activations.moe_bytes(arch, kept) - moe_activations.moe_bytes(arch, base)
    assert extra == 2 * T * arch.hidden_size


def test_shared_expert_overlap_keeps_the_norm_output_whatever_is_captured() -> None:
    # :489-503: the overlapped shared experts read the norm output outside the graph
    dsv3 = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64, cuda_graphs=True)
    both = replace(
        dsv3,
        cuda_graph_impl="transformer_engine",
        cuda_graph_modules=("attn", "moe_router", "moe_preprocess"),
    )
    assert dsv3.arch.moe_shared_expert_intermediate_size
    assert not keeps_pre_moe_norm(both, LAY)
    assert keeps_pre_moe_norm(both, replace(LAY, moe_shared_expert_overlap=True))


def test_a_full_iteration_graph_keeps_no_per_layer_static_buffers() -> None:
    """Megatron-LM d98e8a64 full_cuda_graph.py:97-135: FullCudaGraphWrapper keeps static copies
    of the data loader's batches only (StaticBufferLoader), no per-layer graph runner
    (cuda_graphs.py's static_grad_outputs / static_grad_inputs): 0 per layer; Transformer
    Engine's graphs of whole layers their static output, 1 x 2 x T x h (hand count, bf16;
    graph_buffers.TE_GRAPH_OUTPUT_COPIES)."""
    arch, T = TE.arch, 4096
    per_layer = Shard(tokens=T, cuda_graphs=True, cuda_graph_impl="transformer_engine")
    assert activations.graph_bytes(arch, per_layer) == 2 * T * arch.hidden_size
    whole_step = replace(per_layer, cuda_graph_impl="full_iteration")
    assert activations.graph_bytes(arch, whole_step) == 0.0


def test_a_whole_plan_keeps_the_norm_output_layernorm_recompute_names() -> None:
    """The QA's plan (Qwen3-30B-A3B on 16 H100, pp 2, ep 8, mbs 2, seq 4544; TE graphs of attn
    and moe_router; selective layernorm recompute). The TE layer fuses the input norm into QKV, so
    the pre-MLP norm is the only one layernorm recompute drops, and Megatron keeps it under the
    router graph (transformer_layer.py:481-527 d98e8a64): the plan holds what it holds with no
    recompute at all; the same graphs with moe_preprocess captured too (alltoall) recompute the
    norm: at least 24 layers x 4544 x 2 tokens x 2048 x 2 B = 0.832 GiB below themselves without
    recompute. (Whether it fits
    turned on TE graphs' static buffers, since counted once per rank: `graph_buffers`.)"""
    from planner.inputs.plan import parse_plan
    from planner.model import memory

    def peak(modules: list[str], recompute: str = "selective") -> tuple[float, bool]:
        doc = {
            "model": {"name": "qwen3-30b-a3b"},
            "cluster": {"gpu": "h100-sxm-80gb", "num_gpus": 16},
            "training": {
                "seq_length": 4544, "global_batch_size": 16, "cuda_graphs": True,
                "cuda_graph_impl": "transformer_engine", "cuda_graph_modules": modules,
            },
            "parallel": {
                "tp": 1, "pp": 2, "ep": 8, "micro_batch_size": 2, "zero_stage": 1,
                "recompute": recompute,
                **({"recompute_modules": ["layernorm"]} if recompute == "selective" else {}),
            },
        }  # fmt: skip
        plan = parse_plan(doc)
        report = memory.estimate(plan.job, plan.layout)
        return report.peak, report.fits

    kept, _ = peak(["attn", "moe_router"])
    recomputed, _ = peak(["attn", "moe_router", "moe_preprocess"])
    none, _ = peak(["attn", "moe_router"], recompute="none")
    pre_none, _ = peak(["attn", "moe_router", "moe_preprocess"], recompute="none")
    assert kept == pytest.approx(none, rel=1e-12)
    # the preprocess graph returns the permuted tokens too (`router_graph_outputs`): compared
    # with itself without recompute, it recomputes the norm
    assert pre_none - recomputed >= 24 * 4544 * 2 * 2048 * 2
