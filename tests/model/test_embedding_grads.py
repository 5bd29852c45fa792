"""The word embedding's gradient work outside the decoder layers (planner.model.embedding_grads)
and the MTP rank's own embedding's parameters (stage_params).

Oracles: Megatron-LM d98e8a64
- megatron/core/distributed/finalize_model_grads.py:145-147 (a tied or MTP model's shared
  word-embedding weight), :204-258 (`_allreduce_embedding_grad`: all-reduce of its main_grad
  over the embedding group; the local shard, `orig_grad._local_tensor`, under Megatron-FSDP,
  :247-249), called at :676 after the DP sync (:640); parallel_state.py:560-566
  (`default_embedding_ranks`: the first and the last rank of each pipeline group);
- megatron/core/tensor_parallel/layers.py:358-362 (F.embedding: a dense V/tp x h gradient) and
  distributed/distributed_data_parallel.py:578 (`param.main_grad.add_(param.grad.data)`);
- megatron/core/models/gpt/gpt_model.py:173-181 (the MTP rank builds a LanguageModelEmbedding)
  and models/common embeddings language_model_embedding.py:47,71 (its learned position
  embeddings, max_position_embeddings x h, not split over TP).
Hand arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.model import comms, embedding_grads, layer_time, output_time
from planner.model.cost import estimate
from planner.model.stage_params import stage_params
from planner.model.stage_time import layout_times

GEMMA_PP2 = Layout(tp=1, pp=2, dp=8, zero_stage=1)


def _gemma(**kw: object):  # type: ignore[no-untyped-def]
    return job("gemma2-2b", "h100-sxm-80gb", 16, 4096, 16, **kw)


def test_tied_pp2_all_reduce_by_hand() -> None:
    # gemma2-2b (tied, V 256000, h 2304) on 16 H100, tp 1 pp 2 dp 8, fp32 main grads:
    # 256000 x 2304 x 4 = 2,359,296,000 bytes between ranks 8 apart (tp x cp x dp), two nodes
    j = _gemma()
    assert embedding_grads.sync_bytes(j, GEMMA_PP2) == 2_359_296_000
    want = comms.all_reduce(2_359_296_000, comms.place(j.cluster, 8, 2))
    assert want > 0.04  # ~51 ms across the nodes' network
    for rank in (0, 1):
        assert embedding_grads.sync_time(j, GEMMA_PP2, rank) == pytest.approx(want)
    # the step: the same model untied (no shared weight, finalize_model_grads.py:145-147) is
    # that all-reduce faster (they were equal before: the all-reduce was never counted)
    untied = replace(
        j, arch=j.arch.model_copy(update={"untie_embeddings_and_output_weights": True})
    )
    assert embedding_grads.sync_time(untied, GEMMA_PP2, 0) == 0.0
    gap = estimate(j, GEMMA_PP2).step_time_s - estimate(untied, GEMMA_PP2).step_time_s
    assert gap == pytest.approx(want, rel=1e-6)


def test_group_placement_and_sharding() -> None:
    j = _gemma()
    # use_tp_pp_dp_mapping: pipeline neighbours tp x cp = 1 apart, the pair inside a node
    mapped = GEMMA_PP2.with_(use_tp_pp_dp_mapping=True)
    inside = comms.all_reduce(2_359_296_000, comms.place(j.cluster, 1, 2))
    assert embedding_grads.sync_time(j, mapped, 0) == pytest.approx(inside)
    assert inside < embedding_grads.sync_time(j, GEMMA_PP2, 0)
    # pp 4 (stride tp x cp x dp = 4): ranks 0 and 12 of 16: across nodes, as 8 apart
    pp4 = Layout(tp=1, pp=4, dp=4, zero_stage=1)
    across = comms.all_reduce(2_359_296_000, comms.place(j.cluster, 8, 2))
    assert embedding_grads.sync_time(j, pp4, 3) == pytest.approx(across)
    assert embedding_grads.sync_time(j, pp4, 1) == embedding_grads.sync_time(j, pp4, 2) == 0.0
    # Megatron-FSDP (ZeRO 3): the local shard, 1 / (dp x cp) = 1/8
    assert embedding_grads.sync_bytes(j, GEMMA_PP2.with_(zero_stage=3)) == 2_359_296_000 / 8
    # bf16 main grads: 2 bytes an element
    assert embedding_grads.sync_bytes(_gemma(main_grad_dtype="bf16"), GEMMA_PP2) == 1_179_648_000
    # pp 1 (a one-rank group), a frozen model, torchtitan: nothing
    assert embedding_grads.sync_bytes(j, Layout(tp=1, pp=1, dp=16)) == 0.0
    assert embedding_grads.sync_bytes(_gemma(frozen_model=True), GEMMA_PP2) == 0.0
    assert embedding_grads.sync_bytes(_gemma(framework="torchtitan"), GEMMA_PP2) == 0.0


def test_mtp_shares_the_embedding() -> None:
    # DeepSeek-V3 is untied, but its MTP layer on the last rank has its own word embedding:
    # V 129280 / tp 2 x h 7168 x 4 = 1,853,358,080 bytes
    j = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)
    lay = Layout(tp=2, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True, zero_stage=1)
    assert j.arch.padded_vocab(2) == 129280
    assert embedding_grads.sync_bytes(j, lay) == 129280 // 2 * 7168 * 4


def test_embedding_backward_by_hand() -> None:
    # gemma2-2b tp 1: 256000 x 2304 elements, 12 bytes each (bf16 gradient zero-filled and read,
    # fp32 main gradient read and written): 7,077,888,000 bytes at the GPU's HBM rate, on the
    # first rank (its encoder slot, before: 0)
    j = _gemma()
    gpu = layer_time.gpu_of(j)
    want = 256000 * 2304 * 12 / gpu.hbm
    assert embedding_grads.backward_time(j, GEMMA_PP2, gpu) == pytest.approx(want)
    t = layout_times(j, GEMMA_PP2)
    assert t.encoder.bwd == pytest.approx(want) and t.encoder.fwd == 0.0
    # bf16 main gradients: 2 + 2 + 2 + 2 = 8 bytes
    b = _gemma(main_grad_dtype="bf16")
    assert embedding_grads.backward_time(b, GEMMA_PP2, gpu) == pytest.approx(want * 8 / 12)
    # each MTP depth looks the embedding up again on the MTP rank: in its projection's slot
    d = job("deepseek-v3", "h100-sxm-80gb", 64, 4096, 64)
    lay = Layout(tp=2, pp=4, dp=8, ep=8, etp=1, sequence_parallel=True)
    td = layout_times(d, lay)
    assert td.mtp_proj is not None
    assert td.mtp_proj == output_time.mtp_projection(d, lay, td.gpu)
    frozen = replace(d, frozen_model=True)  # the projection's backward without the lookup's
    bare = 2 * output_time.mtp_projection(frozen, lay, td.gpu).fwd
    assert td.mtp_proj.bwd - bare == pytest.approx(129280 // 2 * 7168 * 12 / td.gpu.hbm)


def test_mtp_rank_builds_its_position_embeddings() -> None:
    # gpt-mcore-1.7b (learned positions, max 4096, h 2048) with one MTP layer, tp 2 pp 2: the
    # last rank's own LanguageModelEmbedding holds 4096 x 2048 = 8,388,608 position parameters,
    # whole (not split over TP), which a rope twin has not
    j = job("gpt-mcore-1.7b", "h100-sxm-80gb", 8, 4096, 16)
    learned = replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": 1}))
    rope = replace(j, arch=learned.arch.model_copy(update={"position_embedding_type": "rope"}))
    lay = Layout(tp=2, pp=2, dp=2)
    for rank in (0, 1):
        chunks = lay.chunk_layers(j.arch.num_layers)[rank]
        gap = stage_params(learned, lay, rank, chunks)[0] - stage_params(rope, lay, rank, chunks)[0]
        assert gap == 4096 * 2048


def test_megatron_fsdp_instances_shard_over_one_instance() -> None:
    """QA: under Megatron-FSDP with several optimizer instances the embedding gradient's local
    shard is 1 / (dp / n) of it (mcore_fsdp_adapter.py:346-356 d98e8a64, partial data parallel):
    gemma2-2b (vocab 256,000 x h 2,304, fp32 main gradient) at dp 8, 4 instances: 256,000 x 2,304
    x 4 B / 2 = 1,179,648,000 B, four times the one-instance shard."""
    j = job("gemma2-2b", "h100-sxm-80gb", 16, 4096, 64)
    lay = GEMMA_PP2.with_(zero_stage=3)
    one = embedding_grads.sync_bytes(j, lay)
    four = embedding_grads.sync_bytes(replace(j, optimizer_instances=4), lay)
    assert four == 256_000 * 2_304 * 4 / 2 == 4 * one
