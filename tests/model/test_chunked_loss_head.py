"""The output layer's FSDP2 gradients under torchtitan's chunked loss
(`fsdp2.output_layer_transient`).

ChunkedLossWrapper (pytorch/torchtitan b5bcd76c torchtitan/components/loss.py:658-706) turns the
[norm, output] unit's gradient sync off for chunks 0..N-2 and on for the last, at the end of the
forward, before the decoder's backward: FSDP2 keeps the unsharded gradient upcast to fp32
(FSDPParam.to_accumulated_grad_if_needed), adds each chunk's bf16 gradient into it
(accumulate_unsharded_grad_if_needed), and the last chunk copies the sum into the fp32
reduce-scatter input before the sum is dropped (FSDPParamGroup.post_backward, foreach_reduce).

Oracle: hand arithmetic on Llama 3.1 8B (vocabulary 128,256, hidden 4,096: V h = 525,336,576
output parameters; 8,030,261,248 parameters on the rank, a 32nd of them p = 250,945,664) on 8
H100s, dp 8, pp 1, one 8,192-token micro-batch. A block's transient (`fsdp2.states`): two blocks
gathered in bf16 and one block's bf16 gradient and fp32 reduce-scatter input, 10 p =
2,509,456,640 bytes (2.34 GiB). At the last chunk: the fp32 sum and the fp32 input, 8 V h =
4,202,692,608 bytes (3.91 GiB; QA's figure), with "always" the output layer's bf16 weight the
wrapper gathers itself (:673) on top, 10 V h. Before this model the transient stayed 10 p."""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import fsdp2
from planner.model.rank_states import rank_state
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 32\n"
VH = 128256 * 4096
P = 8_030_261_248
GPUS = "[parallel]\nzero_stage = 3\nmicro_batch_size = 1\nrecompute = 'full'\n"


def _transient(tmp_path: Path, titan: str, parallel: str = GPUS, rank: int = -1) -> float:
    text = plan_text(training=TITAN, parallel=parallel) + "[torchtitan]\n" + titan + "\n"
    plan = check_plan(load_plan(write(tmp_path, text)))
    job, lay = plan.job, plan.require_layout()
    rank = lay.output_rank if rank < 0 else rank
    return rank_state(job, lay, rank, lay.chunk_layers(job.arch.num_layers)[rank])[4]


def test_the_last_chunk_holds_the_fp32_sum_and_the_fp32_reduce_scatter_input(
    tmp_path: Path,
) -> None:
    # unchunked: the output layer's bf16 gradient and fp32 input beside the prefetched last
    # block, 6 V h + 2 p (tests/model/test_output_layer_fsdp2.py)
    assert _transient(tmp_path, "loss_chunks = 1") == pytest.approx(6 * VH + 2 * P / 32)
    assert _transient(tmp_path, "loss_chunks = 8") == pytest.approx(8 * VH)  # 3.91 GiB


def test_always_adds_the_weight_the_wrapper_gathers(tmp_path: Path) -> None:
    titan = "loss_chunks = 8\nreshard_after_forward = 'always'"
    assert _transient(tmp_path, titan) == pytest.approx(10 * VH)


def test_under_pp_the_previous_input_is_counted_in_the_grads(tmp_path: Path) -> None:
    # pp 2 (dp 4), the output layer on rank 1 with its 16 blocks: the block transient is
    # 6 bytes x a 16th of its parameters (p1); the previous micro-batch's fp32 input (4 V h)
    # is the grads' accumulated output-layer gradient, and the next loss adds its fp32 sum and
    # a chunk's bf16 gradient: 6 V h
    parallel = GPUS + "pp = 2\n"
    assert _transient(tmp_path, "loss_chunks = 8", parallel) == pytest.approx(6 * VH)
    first = _transient(tmp_path, "loss_chunks = 8", parallel, rank=0)  # no output layer
    assert first == pytest.approx(_transient(tmp_path, "loss_chunks = 1", parallel, rank=0))


def test_the_last_block_beside_the_held_input_and_a_larger_block(tmp_path: Path) -> None:
    text = plan_text(training=TITAN, parallel=GPUS) + "[torchtitan]\nloss_chunks = 8\n"
    plan = check_plan(load_plan(write(tmp_path, text)))
    job, lay = plan.job, plan.require_layout()
    # blocks of p = 1 GB, an output layer of 1.2 G parameters: block 10 GB; at the loss
    # 9.6 GB; the last block's backward beside the output layer's fp32 input still held:
    # 10 - 4 (its own fp32 input not yet made) + 4.8 = 10.8 GB
    got = fsdp2.output_layer_transient(job, lay, 1.2e9, 1e9, 10e9)
    assert got == pytest.approx(10.8e9)
    # a small output layer leaves the block's buffers the peak
    assert fsdp2.output_layer_transient(job, lay, 0.1e9, 1e9, 10e9) == pytest.approx(10e9)
