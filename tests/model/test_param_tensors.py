"""Parameter tensors per pipeline rank (planner/model/param_tensors.py), what Megatron-LM's
per-tensor gradient statistics visit each step.

Oracle: hand counts of Megatron-Core's Transformer Engine layers (module docstring)."""

from __future__ import annotations

from jobs import job

from planner.inputs.hybrid import DENSE, MOE
from planner.inputs.layout import Layout
from planner.model.param_tensors import layer_tensors, max_rank_tensors, rank_tensors


def test_a_layers_tensors_by_hand() -> None:
    gpt = job("gpt3-175b", "h100-sxm-80gb", 8, 2048, 8).arch
    # LayerNorm (weight, bias) + QKV and projection (weights, biases), the same in the MLP
    assert layer_tensors(gpt, DENSE, 1) == 2 + 4 + 2 + 4
    llama = job("llama3.1-8b", "h100-sxm-80gb", 8, 2048, 8).arch
    # RMSNorm weight, QKV, projection; RMSNorm weight, fc1, fc2
    assert layer_tensors(llama, DENSE, 1) == 6
    mixtral = job("mixtral-8x7b", "h100-sxm-80gb", 8, 2048, 8).arch
    # attention 3; the MoE norm, router, and fc1 + fc2 of each of 8 / 8 = 1 or 8 / 2 = 4 experts
    assert layer_tensors(mixtral, MOE, 8) == 3 + 1 + 1 + 2
    assert layer_tensors(mixtral, MOE, 2) == 3 + 1 + 1 + 8


def test_the_busiest_rank_by_hand() -> None:
    # the 12-layer GPT of Megatron-LM's functional tests: pp 1 holds 12 x 12 layer tensors, the
    # word and learned position embeddings and the final LayerNorm: 148; at pp 4 the last rank's
    # 3 layers, the final norm and the tied output layer's copy: 36 + 2 + 1 = 39, the first's
    # 36 + 2 = 38
    arch = job("gpt-mcore-1.7b", "h100-sxm-80gb", 8, 2048, 8).arch.model_copy(
        update={"num_layers": 12, "untie_embeddings_and_output_weights": False}
    )
    assert arch.position_embedding_type == "learned_absolute"
    assert max_rank_tensors(arch, Layout(dp=8)) == 148
    lay = Layout(pp=4, dp=2)
    chunks = lay.chunk_layers(12)
    assert [rank_tensors(arch, lay, r, c) for r, c in enumerate(chunks)] == [38, 36, 36, 39]
    assert max_rank_tensors(arch, lay) == 39
