"""torchtitan's FSDP2 output layer: its gradients with the unchunked loss (memory,
`fsdp2.output_layer_transient`) and, under PP with the chunked loss, its collectives once per
micro-batch (time, `fsdp2.per_micro_batch_output`).

Sources. [norm, output] is one FSDP unit (pytorch/torchtitan b5bcd76c
torchtitan/distributed/fsdp.py:260-265) with MixedPrecisionPolicy(param_dtype bf16,
reduce_dtype fp32) (config/configs.py:94,102; models/llama3/parallelize.py:71-72). PyTorch's
FSDPParamGroup.post_backward (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py,
pytorch/pytorch 62a45b6f) releases the previous unit's held reduce-scatter input
(comm_ctx.reduce_scatter_state) and calls foreach_reduce, which allocates the input in
reduce_dtype, copies the unsharded gradient in and only then clears the gradients; the new input
stays held until the next unit's post-backward. The unit's pre-backward prefetches the previous
unit in post-forward order (`_backward_prefetch`): the last block. ChunkedLossWrapper
(components/loss.py:658-706) gathers the unit itself (:673), turns its sync on at each
micro-batch's last chunk (:677-680) and reshards it after the loss (:702-706).

Oracle: hand arithmetic on Llama 3.1 8B (vocabulary 128,256, hidden 4,096: V h = 525,336,576
output parameters; 8,030,261,248 parameters on the rank, a 32nd of them p = 250,945,664) on 8
H100s, dp 8, one 8,192-token micro-batch. Before this model the unchunked loss kept a block's
transient, 10 p = 2,509,456,640 bytes (2.34 GiB): two bf16 blocks, one block's bf16 gradient
and fp32 input. Now, at the loss's backward: the output layer's bf16 gradient and fp32 input,
6 V h = 3,152,019,456, beside the prefetched last block, 2 p = 501,891,328: 3,653,910,784 bytes
(3.40 GiB); in the last block's backward beside the held input, 10 p - 4 p + 4 V h =
3,607,020,288 (3.36 GiB), less.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from plan_text import plan_text, write

from planner.inputs.plan import load_plan
from planner.model import cost, fsdp2
from planner.model.rank_states import rank_state
from planner.model.stage_params import stage_params
from planner.search.rules import check_plan

TITAN = "[training]\nframework = 'torchtitan'\nseq_length = 8192\nglobal_batch_size = 32\n"
VH = 128256 * 4096
P = 8_030_261_248
GPUS = "[parallel]\nzero_stage = 3\nmicro_batch_size = 1\nrecompute = 'full'\n"


def _plan(tmp_path: Path, titan: str, parallel: str = GPUS, training: str = TITAN) -> tuple:
    text = plan_text(training=training, parallel=parallel) + "[torchtitan]\n" + titan + "\n"
    plan = check_plan(load_plan(write(tmp_path, text)))
    return plan.job, plan.require_layout()


def _transient(tmp_path: Path, titan: str, parallel: str = GPUS, rank: int = -1) -> float:
    job, lay = _plan(tmp_path, titan, parallel)
    rank = lay.output_rank if rank < 0 else rank
    return rank_state(job, lay, rank, lay.chunk_layers(job.arch.num_layers)[rank])[4]


def test_unchunked_loss_holds_the_bf16_gradient_and_the_fp32_input(tmp_path: Path) -> None:
    got = _transient(tmp_path, "loss_chunks = 1")
    assert got == pytest.approx(6 * VH + 2 * P / 32)  # 3,653,910,784 (3.40 GiB); was 10 p
    assert got > 10 * P / 32
    # "always" reshards the output layer after the forward: its pre-backward gathers it again
    always = _transient(tmp_path, "reshard_after_forward = 'always'")
    assert always == pytest.approx(8 * VH + 2 * P / 32)
    # "never" keeps every block gathered (in the weights): nothing prefetched; a block's
    # transient is its bf16 gradient and fp32 input, 6 p, and the held input beside the
    # last block's bf16 gradient 4 V h + 2 p is less than 6 V h
    never = _transient(tmp_path, "reshard_after_forward = 'never'")
    assert never == pytest.approx(6 * VH)


def test_the_last_block_beside_the_held_input(tmp_path: Path) -> None:
    job, lay = _plan(tmp_path, "loss_chunks = 1")
    # blocks of 1 G parameters (block 10 GB: two gathered, 4 GB, and a gradient, 6 GB), an
    # output layer of 1.5 G: at the loss 6 x 1.5 + 2 = 11 GB; the last block's backward beside
    # the held fp32 input: 10 - 4 (its own input not yet made) + 4 x 1.5 = 12 GB
    got = fsdp2.output_layer_transient(job, lay, 1.5e9, 1e9, 10e9, prefetched=2e9)
    assert got == pytest.approx(12e9)
    assert fsdp2.output_layer_transient(job, lay, 0.0, 1e9, 10e9, 2e9) == pytest.approx(10e9)


def test_under_pp_the_last_backward_copies_the_sum_into_a_fresh_input(tmp_path: Path) -> None:
    # pp 2 (dp 4), the output layer on rank 1 with 16 blocks, 4,015,132,672 parameters (16 x
    # 218,112,000 + 4,096 + V h), p1 = a 16th = 250,945,792: the grads hold the output layer's
    # fp32 sum through the step; the schedule's last backward copies it into a new fp32 input
    # beside it: 4 V h = 2,101,346,304 on top, over a block's 6 p1 = 1,505,674,752 (was 6 p1)
    parallel = GPUS + "pp = 2\n"
    assert _transient(tmp_path, "loss_chunks = 1", parallel) == pytest.approx(4 * VH)
    job, lay = _plan(tmp_path, "loss_chunks = 1", parallel)
    p0 = sum(stage_params(job, lay, 0, lay.chunk_layers(32)[0])) / 16
    assert _transient(tmp_path, "loss_chunks = 1", parallel, rank=0) == pytest.approx(6 * p0)


PP64 = "[parallel]\npp = 2\nzero_stage = 3\nmicro_batch_size = 1\nrecompute = 'full'\n"


def _pp64(tmp_path: Path, chunks: int) -> tuple:
    cluster = '[cluster]\ngpu = "h100-sxm-80gb"\nnum_gpus = 64\n'
    training = TITAN.replace("global_batch_size = 32", "global_batch_size = 256")
    text = plan_text(cluster=cluster, training=training, parallel=PP64)
    text += f"[torchtitan]\nloss_chunks = {chunks}\n"
    plan = check_plan(load_plan(write(tmp_path, text, f"c{chunks}.toml")))
    return plan.job, plan.require_layout()


def test_under_pp_the_chunked_loss_gathers_and_reduces_the_output_every_micro_batch(
    tmp_path: Path,
) -> None:
    # 64 GPUs, pp 2, dp 32, batch 256: m = 8 micro-batches of 1; rank 1 holds P1 parameters
    # in u = 16 blocks, O = V h of them the output layer. No window (fwd = bwd = 0): all shows.
    # Unchunked ("default" under PP): one gather in the first forward and one reduce-scatter in
    # the schedule's last backward per block, u (a + r) at P1 / u each. Chunked: the blocks'
    # u (a' + r') at (P1 - O) / u each, and the output layer's own gather and reduce-scatter
    # per micro-batch, m (a_o + r_o)
    job, lay = _pp64(tmp_path, 8)
    m, u, n = lay.num_microbatches(job.global_batch_size), 16, lay.dense_dp
    assert (m, n, lay.output_rank) == (8, 32, 1)
    p1 = sum(stage_params(job, lay, 1, lay.chunk_layers(32)[1]))
    out = fsdp2.output_share(job, lay, 1)
    assert (out, fsdp2.output_share(job, lay, 0)) == (VH, 0.0)
    a, r = fsdp2._collectives(job, (p1 - out) / u, lay.tp, n, 1)
    a_o, r_o = fsdp2._collectives(job, out, lay.tp, n, 1)
    got = fsdp2.data_parallel_time(job, lay, p1, 0.0, 0.0, 0.0, m, u, output=out)
    assert sum(got) == pytest.approx(u * (a + r) + m * (a_o + r_o))
    assert got[1] == pytest.approx(0.0)
    # under windows longer than any collective: each block unit's first gather and last
    # reduce-scatter show (`dp_sync.unit_pipeline`), and the wrapper's gather every
    # micro-batch; its reduce-scatters hide under the compute before the next loss
    exposed, _ = fsdp2.data_parallel_time(job, lay, p1, 0.0, 1e3, 1e3, m, u, output=out)
    assert exposed == pytest.approx(a + r + m * a_o)
    # the unchunked loss: once per schedule with the blocks, whatever `output` says
    whole, lay1 = _pp64(tmp_path, 1)
    a1, r1 = fsdp2._collectives(whole, p1 / u, lay1.tp, n, 1)
    plain = fsdp2.data_parallel_time(whole, lay1, p1, 0.0, 0.0, 0.0, m, u, output=out)
    assert sum(plain) == pytest.approx(u * (a1 + r1))


def test_the_step_charges_the_output_layers_collectives(tmp_path: Path) -> None:
    # end to end: the chunked loss's step carries at least the (m - 1) extra reduce-scatters
    # and gathers of the output layer over the unchunked one's traffic
    job8, lay = _pp64(tmp_path, 8)
    job1, _ = _pp64(tmp_path, 1)
    m, n = lay.num_microbatches(job8.global_batch_size), lay.dense_dp
    a_o, r_o = fsdp2._collectives(job8, VH, lay.tp, n, 1)
    chunked, whole = cost.estimate(job8, lay).breakdown, cost.estimate(job1, lay).breakdown
    extra = chunked.dp_comm_exposed + chunked.dp_comm_hidden
    extra -= whole.dp_comm_exposed + whole.dp_comm_hidden
    assert extra >= 0.9 * (m - 1) * (a_o + r_o)
