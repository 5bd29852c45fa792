"""Where Megatron runs the MTP layers' pieces, and in what precision.

Oracles: Megatron-LM d98e8a64. MTP on its own stage (pipeline_parallel_layer_layout.py:138-151
`mtp_standalone`; its example at :210-215 puts MTP on rank 14, the loss on rank 15): the output
layer is built on the loss stage alone (gpt_model.py:255 `if self.post_process`), a stage that is
not the loss stage returns its hidden states (:728), the loss stage runs process_mtp_loss
(:746; multi_token_prediction.py:932-1052: every depth's logits and cross entropy) on the
(1 + D) x s x h hidden states it receives (multi_token_prediction.py:2139). NVFP4: the MTP
layers build their weights under get_fp8_context(config, is_init=True) (:1927-1928), null unless
fp8_param (fp8_utils.py:848-852), and run only under an FP8 autocast (:1386-1394 "TODO:
currently ignoring FP4 in MTP layers"): bf16 weights, bf16 GEMMs, 16-bit saved inputs. Hand
arithmetic in the comments.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from jobs import job

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import params
from planner.model.rank_mix import mix_sums, rank_layers, rank_mix
from planner.model.stage_activations import per_layer, shard, stage_activations
from planner.model.stage_params import quantised_params, stage_params
from planner.model.stage_time import layout_times

T, H, V = 4096, 4096, 128256  # Llama 3.1 8B: h 4096, vocab 128,256 (a multiple of 128)
# pp 3 with the MTP layer ending rank 1 and the loss alone on rank 2 (`mtp_standalone`)
ALONE = Layout(pp=3, dp=1, pipeline_layout=("E" + "t" * 16, "t" * 16 + "m", "L"))


def _jobs(**kw: object) -> tuple[Job, Job]:
    """Llama 3.1 8B with one MTP depth, and without, on 3 H100, 8 sequences of T per step."""
    j = job("llama3.1-8b", "h100-sxm-80gb", 3, T, 8, **kw)
    return replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": 1})), j


def test_standalone_mtp_rank_builds_no_output_layer() -> None:
    with_mtp, without = _jobs()
    chunks = ALONE.chunk_layers(32)
    assert ALONE.mtp_rank(32, 1) == 1 and ALONE.output_rank == 2
    mtp_dense = params.mtp_layer_params(with_mtp.arch)[0]
    # rank 1 gains the MTP layer and its embedding copy (gpt_model.py:173 `pre_process or
    # mtp_process`: 128,256 x 4096 = 525,336,576), not a second output layer (another
    # 525,336,576 before the fix)
    gain = (
        stage_params(with_mtp, ALONE, 1, chunks[1])[0]
        - stage_params(without, ALONE, 1, chunks[1])[0]
    )
    assert gain == mtp_dense + 525_336_576
    # the loss stage's output layer serves every depth: no parameter more
    assert stage_params(with_mtp, ALONE, 2, chunks[2]) == stage_params(without, ALONE, 2, chunks[2])


def test_standalone_logits_run_on_the_loss_stage() -> None:
    with_mtp, _ = _jobs()
    t = layout_times(with_mtp, ALONE)
    chunks = ALONE.chunk_layers(32)
    # (layers, output layers): rank 1 runs 16 layers + the MTP layer and no logits; rank 2 the
    # main and the depth's logits and losses, 1 + 1 = 2 (before the fix: 1 and 1)
    assert rank_layers(with_mtp, ALONE, 1, chunks[1], t) == ((17,), 0)
    assert rank_layers(with_mtp, ALONE, 2, chunks[2], t) == ((0,), 2)
    # the MTP projection stays with the MTP layer
    assert [n for k, n in rank_mix(with_mtp, ALONE, 1, chunks[1], t)[0] if k is t.mtp_proj] == [1]


def test_standalone_mtp_loss_memory_moves_to_the_loss_stage() -> None:
    with_mtp, without = _jobs()
    chunks = ALONE.chunk_layers(32)

    def acts(j: Job, rank: int) -> float:
        sh = shard(j, ALONE)
        return stage_activations(j, ALONE, rank, chunks[rank], sh, per_layer(j.arch, sh))

    # the loss stage (1F1B's last rank: one micro-batch in flight) keeps the depth's fp32
    # softmax, 4 x 4096 x 128,256 = 2,101,346,304 bytes, and the received depth hidden state its
    # output layer saves, 2 x 4096 x 4096 = 33,554,432 (before the fix: nothing)
    assert acts(with_mtp, 2) - acts(without, 2) == pytest.approx(2_101_346_304 + 33_554_432)
    # rank 1 (pp - 1 = 2 micro-batches in flight) keeps per micro-batch the MTP layer's
    # transformer layer and its norms' and projection's 5 values (the final-norm output is sent
    # on: 5 x 2 x 4096 x 4096 = 167,772,160), no softmax and no logits working set
    sh = shard(with_mtp, ALONE)
    layer = per_layer(with_mtp.arch, sh).kept[0]
    assert acts(with_mtp, 1) - acts(without, 1) == pytest.approx(2 * (layer + 167_772_160))


def test_colocated_mtp_is_unchanged() -> None:
    # MTP and loss on the last rank: the depth's logits, loss and softmax there, as before
    with_mtp, without = _jobs()
    lay = Layout(pp=3, dp=1)
    chunks = lay.chunk_layers(32)
    t = layout_times(with_mtp, lay)
    assert rank_layers(with_mtp, lay, 2, chunks[2], t)[1] == 2
    sh = shard(with_mtp, lay)
    gap = stage_activations(with_mtp, lay, 2, chunks[2], sh, per_layer(with_mtp.arch, sh))
    sh0 = shard(without, lay)
    gap -= stage_activations(without, lay, 2, chunks[2], sh0, per_layer(without.arch, sh0))
    # the layer, 6 values (12 x 4096 x 4096 = 201,326,592) and the softmax (2,101,346,304)
    layer = per_layer(with_mtp.arch, sh).kept[0]
    assert gap == pytest.approx(layer + 201_326_592 + 2_101_346_304)


def _one_gpu(precision: str, mtp: int) -> Job:
    """Llama 3.1 8B (with `mtp` MTP depths) on one B200 in `precision`."""
    j = job("llama3.1-8b", "b200-sxm-180gb", 1, T, 8, precision=precision)
    return replace(j, arch=j.arch.model_copy(update={"mtp_num_layers": mtp}))


ONE = Layout(dp=1)


def test_nvfp4_mtp_weights_are_bf16() -> None:
    chunks = ONE.chunk_layers(32)[0]
    mtp_dense = params.mtp_layer_params(_one_gpu("fp4", 1).arch)[0]

    def gain(precision: str) -> float:
        with_mtp, without = _one_gpu(precision, 1), _one_gpu(precision, 0)
        return (
            quantised_params(with_mtp, ONE, 0, chunks)[0]
            - quantised_params(without, ONE, 0, chunks)[0]
        )

    assert gain("fp4") == 0  # bf16 weights (before the fix: the whole MTP layer, quantised)
    assert gain("fp8") == mtp_dense  # FP8 MTP layers stay FP8


def test_nvfp4_mtp_runs_as_the_bf16_twin() -> None:
    fp4, bf16 = _one_gpu("fp4", 1), _one_gpu("bf16", 1)
    chunks = ONE.chunk_layers(32)[0]
    t, tb = layout_times(fp4, ONE), layout_times(bf16, ONE)
    # forward: 32 NVFP4 layers, the MTP layer and its projection at the bf16 rate
    assert tb.mtp_proj is not None and t.mtp_proj == tb.mtp_proj
    want = 32 * t.dense.fwd + tb.dense.fwd + tb.mtp_proj.fwd
    assert mix_sums(rank_mix(fp4, ONE, 0, chunks, t)[0])[1] == pytest.approx(want)
    # FP8 runs its MTP layer in FP8 (its own layer time)
    fp8 = _one_gpu("fp8", 1)
    t8 = layout_times(fp8, ONE)
    assert not t8.mtp_layers
    assert mix_sums(rank_mix(fp8, ONE, 0, chunks, t8)[0])[1] == pytest.approx(
        33 * t8.dense.fwd + (t8.mtp_proj.fwd if t8.mtp_proj else 0.0)
    )


def test_nvfp4_mtp_activations_are_16_bit() -> None:
    chunks = ONE.chunk_layers(32)

    def gap(precision: str) -> float:
        with_mtp, without = _one_gpu(precision, 1), _one_gpu(precision, 0)
        out = 0.0
        for sign, j in ((1, with_mtp), (-1, without)):
            sh = shard(j, ONE)
            out += sign * stage_activations(j, ONE, 0, chunks[0], sh, per_layer(j.arch, sh))
        return out

    # pp 1 holds one micro-batch: the MTP layer, its 6 values (201,326,592) and the softmax
    # (2,101,346,304); under NVFP4 the layer's linear inputs at 16 bits (the layer's bytes with
    # bf16 linear inputs, as the bf16 layers count theirs)
    fp4 = _one_gpu("fp4", 1)
    sh = shard(fp4, ONE)
    bf16_layer = per_layer(fp4.arch, replace(sh, linear_bytes=sh.value_bytes)).kept[0]
    assert bf16_layer > per_layer(fp4.arch, sh).kept[0]
    assert gap("fp4") == pytest.approx(bf16_layer + 201_326_592 + 2_101_346_304)
