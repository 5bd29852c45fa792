"""Megatron-FSDP's transient buffers by bucket group (`planner.model.megatron_fsdp_bytes`): groups
whose sharding group has one rank hold none, the gradient buckets take
--megatron-fsdp-grad-comm-dtype, FP8 parameters are gathered and kept at 1 byte.

Oracles: NVIDIA/Megatron-LM d98e8a64, megatron/core/distributed/fsdp/src/megatron_fsdp/
(pgb: param_and_grad_buffer.py):
- pgb:2655-2657, :2718: a weight / gradient buffer is distributed only where its group has more
  than one rank; pgb:1328-1335: fetch_bucket of one that is not returns a view of its data;
- pgb:3107-3111, :1400-1408, :4056-4058: the unsharded gradient bucket in grad_comm_dtype;
- pgb:1795-1798, :2631-2632: FP8 parameters in a uint8 weight buffer; :2634-2643 a transpose
  buffer for MXFP8 only; megatron_fsdp.py:496-498 and :627-628: the other recipes' transposes
  built for a unit's backward and dropped at its release.
The queue and window rules are test_megatron_fsdp_buffers.py's; the sizes below are hand
arithmetic on the models' shapes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from planner.emit import bridge, megatron
from planner.inputs import megatron_args
from planner.inputs.plan import parse_plan
from planner.model import buffers, cost, megatron_fsdp, memory
from planner.model.rank_states import rank_state

# Llama 3.1 8B at tp 1, dp 8 (test_megatron_fsdp_buffers.py): a layer U = 218,112,000 elements,
# padded to 6,657 x 32,768; the output side (output layer + final norm) 16,033 x 32,768.
U = 218_112_000
U_PAD, TAIL_PAD = 6_657 * 32_768, 16_033 * 32_768
EMB, NORM = 128_256 * 4_096, 4_096


def _llama8b(gpu: str = "h100-sxm-80gb", **training: object) -> tuple:
    plan = parse_plan(
        {
            "model": {"name": "llama3.1-8b"},
            "cluster": {"gpu": gpu, "num_gpus": 8},
            "training": {
                "seq_length": 8192,
                "global_batch_size": 64,
                "precision": "bf16",
                "main_grad_dtype": "bf16",
                **training,
            },
            "parallel": {"tp": 1, "pp": 1, "micro_batch_size": 1, "zero_stage": 3},
        }
    )
    job, lay = plan.job, plan.require_layout()
    return job, lay, lay.chunk_layers(job.arch.num_layers)[0]


def test_gradient_buckets_in_the_communication_dtype() -> None:
    """B. The peak of test_megatron_fsdp_buffers (the fourth unit's backward: the output side's
    bucket and four units' gradients, four units gathered at 2 B) with the gradient buckets in
    fp32 (--megatron-fsdp-grad-comm-dtype fp32 over bf16 main gradients): (TAIL + 4U) x 4 +
    4U x 2; and bf16 buckets over fp32 main gradients: (TAIL + 4U) x 2 + 4U x 2. Before: the
    main gradients' bytes either way (2.8 GB under the first)."""
    job, lay, chunks = _llama8b(fsdp_grad_comm_dtype="fp32")
    assert job.grad_bytes == 2.0  # the persistent shard stays bf16
    assert rank_state(job, lay, 0, chunks)[4] == pytest.approx(
        (TAIL_PAD + 4 * U_PAD) * 4 + 4 * U_PAD * 2
    )
    job, lay, chunks = _llama8b(main_grad_dtype="fp32", fsdp_grad_comm_dtype="bf16")
    assert job.grad_bytes == 4.0
    assert rank_state(job, lay, 0, chunks)[4] == pytest.approx(
        (TAIL_PAD + 4 * U_PAD) * 2 + 4 * U_PAD * 2
    )


def test_the_reduce_scatter_moves_the_communication_dtype() -> None:
    """B, time: the reduce-scatter's input is the unreduced bucket fetched in the communication
    dtype (megatron_fsdp param_and_grad_buffer.py:4056-4058, reduce_scatter_tensor on it
    :4099-4104 at d98e8a64), so fp32 main gradients with bf16 buckets move what bf16 main
    gradients move, and bf16 main gradients with fp32 buckets what fp32 ones move (the
    parameter all-gather and the windows are the same in each pair)."""

    def dp(**training: object) -> float:
        job, lay, _ = _llama8b(**training)
        b = cost.estimate(job, lay).breakdown
        return b.dp_comm_exposed + b.dp_comm_hidden

    assert dp(main_grad_dtype="fp32", fsdp_grad_comm_dtype="bf16") == pytest.approx(dp())
    assert dp(fsdp_grad_comm_dtype="fp32") == pytest.approx(dp(main_grad_dtype="fp32"))
    assert dp(main_grad_dtype="fp32") > dp()


LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 32 --bf16 --use-megatron-fsdp "
    "--data-parallel-sharding-strategy optim_grads_params --use-distributed-optimizer "
    "--ckpt-format fsdp_dtensor --overlap-grad-reduce --overlap-param-gather --lr 1e-4 "
)


@pytest.mark.parametrize(("value", "field"), [("fp32", "fp32"), ("fp16", "fp16"), ("auto", None)])
def test_comm_dtype_read_and_written_back(value: str, field: str | None) -> None:
    """arguments.py:3695 (choices fp32, fp16, bf16, auto; 'auto' maps to None, :1093): read into
    training.fsdp_grad_comm_dtype, not noted as unmodelled, written back by the Megatron
    launch; Megatron-Bridge gets a note to set it (its override turns a string into a dtype
    only over a dtype field, omegaconf_utils.py:498-505 at 067f987d) or, unset, a null that
    clears a recipe's (nemotronh common.py:177 sets bf16)."""
    reading = megatron_args.read(
        f"{LINE}--megatron-fsdp-grad-comm-dtype {value}", "h100-sxm-80gb", 8
    )
    assert not any("grad-comm-dtype" in n for n in reading.not_modelled)
    plan = parse_plan(reading.doc)
    assert plan.job.fsdp_grad_comm_dtype == field
    args = megatron.arguments(plan)
    flags = {a[0]: a[1:] for a in (*args.parallel, *args.training)}
    assert flags.get("--megatron-fsdp-grad-comm-dtype") == ((field,) if field else None)
    out = bridge.render(plan, "job")
    if field:
        assert "ddp.megatron_fsdp_grad_comm_dtype = torch.float" in out
        assert "megatron_fsdp_grad_comm_dtype: null" not in out
    else:
        assert "megatron_fsdp_grad_comm_dtype: null" in out


QWEN3 = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 48 --hidden-size 2048 "
    "--ffn-hidden-size 6144 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 4 --kv-channels 128 --qk-layernorm --num-experts 128 "
    "--moe-router-topk 8 --moe-ffn-hidden-size 768 --moe-grouped-gemm "
    "--moe-token-dispatcher-type alltoall --moe-router-load-balancing-type aux_loss "
    "--expert-model-parallel-size 8 --seq-length 4096 --max-position-embeddings 40960 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu "
    "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 151936 "
    "--tokenizer-type NullTokenizer --micro-batch-size 1 --global-batch-size 128 --bf16 "
    "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
    "--ckpt-format fsdp_dtensor --use-distributed-optimizer --overlap-grad-reduce "
    "--overlap-param-gather --recompute-granularity full --recompute-method uniform "
    "--recompute-num-layers 1 --lr 1e-4 "
)
# Qwen3-30B-A3B at tp 1, ep 8 on 8 GPUs: dense dp 8, expert dp 8 / 8 = 1. A layer's dense
# group: q 2,048 x 4,096 + k, v 2 x 2,048 x 512 + o 4,096 x 2,048 + norms 2 x 128 + 2 x 2,048 +
# router 128 x 2,048 = 19,140,864, padded to 8 x 2,048: 1,169 x 16,384 = 19,152,896. Its
# experts' group: 16 local experts x 3 x 2,048 x 768 = 75,497,472 (a one-rank group: padded
# to 2,048, already a multiple). The output side: 151,936 x 2,048 + 2,048 = 311,166,976 ->
# 18,993 x 16,384; the embedding 151,936 x 2,048 = 18,992 x 16,384 (each over the 40M DDP
# bucket, so its own bucket). C = max(1e9, 2 x 94.6M) = 1e9, P = 5e8; bf16 gradients (2 B).
D_PAD, E, TAIL_Q = 1_169 * 16_384, 75_497_472, 18_993 * 16_384


def test_one_rank_expert_groups_hold_no_transient_bytes() -> None:
    """A. The experts' buffers are not distributed (expert dp 1): their gradients accumulate in
    the persistent buffer and their gather is a view, yet each experts' bucket counts toward the
    queue's capacity and the prefetch. Backward, j-th step: the queue holds the output side's
    bucket and j - 1 units when step j dispatches; the output side is popped at step 8's dense
    dispatch (TAIL + 7 x 94.65M + 75.5M = 1,049M > C). Alive at step 8: TAIL + 8 dense groups.
    The backward window below a unit: groups (expert first) while their sum is below P: five
    whole units (473M) then a sixth's experts (548.8M): five dense groups and six experts' (0 B),
    beside the unit's own dense group. (TAIL + 8 D + D + 5 D) x 2 B = 1,158,643,712 B; the steps
    after it hold at most 9 dense groups beside the window. Before: every experts' group counted
    at 2 B, 3.42 GB."""
    plan = parse_plan(megatron_args.to_plan(QWEN3, "h100-sxm-80gb", 8))
    job, lay = plan.job, plan.require_layout()
    assert (lay.dense_dp, lay.expert_dp, job.grad_bytes) == (8, 1, 2.0)
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    transient = rank_state(job, lay, 0, chunks)[4]
    assert transient == pytest.approx((TAIL_Q + 14 * D_PAD) * 2)
    assert transient == 1_158_643_712


def test_one_rank_expert_groups_never_fill_the_pool() -> None:
    """A under --fsdp-double-buffer: every unit has one shape, so the pool is two units' buckets,
    but only the dense ones are ever requested (the experts' are views): 2 D x 2 B of gradients
    and 2 D x 2 B of parameters, beside the output side's bucket from the backup allocator
    (TAIL x 2). Before: the experts' shares counted too (2 x 75.5M x 4 B more)."""
    plan = parse_plan(megatron_args.to_plan(f"{QWEN3}--fsdp-double-buffer", "h100-sxm-80gb", 8))
    job, lay = plan.job, plan.require_layout()
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    assert rank_state(job, lay, 0, chunks)[4] == pytest.approx(
        (2 * D_PAD + TAIL_Q) * 2 + 2 * D_PAD * 2
    )
    # the embedding and output layer stay sharded (dense dp 8): still kept gathered
    assert megatron_fsdp.transient_and_resident(job, lay, 0, chunks)[1] == pytest.approx(
        (151_936 * 2_048 * 2 + 2_048) * 2
    )


def _fp8(recipe: str, gpu: str = "h100-sxm-80gb") -> tuple:
    return _llama8b(gpu, precision="fp8", fp8_recipe=recipe, fp8_param_gather=True)


@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ("tensorwise", (1.0, 0.0)),
        ("delayed", (1.0, 0.0)),
        ("blockwise", (1.0, 4.0 / (128 * 128))),  # an fp32 scale per 128 x 128 block, whole
        ("mxfp8", (2.0, 2.0 / 32)),  # data and transpose buffers; an E8M0 scale per 32 each way
    ],
)
def test_fp8_parameters_kept_at_one_byte_at_zero3(recipe: str, expected: tuple) -> None:
    """C. (sharded, whole) bytes per FP8 element at ZeRO 3: the uint8 buffer's byte, sharded,
    MXFP8's transpose buffer's byte too (pgb:2631-2643); the scales whole. Before: 2 sharded for
    per-tensor and blockwise scaling on Hopper (the transpose counted as kept). At ZeRO 2 the
    buffer is not sharded and the transposes, built in the backward (megatron_fsdp.py:496-498),
    are never released (no post-backward release below optim_grads_params, :1092-1093): 2 B
    whole as before."""
    job, lay, _ = _fp8(recipe)
    assert buffers.quantised_weight_bytes(job, lay) == pytest.approx(expected)
    job, lay, _ = _fp8("tensorwise")
    assert buffers.quantised_weight_bytes(job, replace(lay, zero_stage=2)) == (2.0, 0.0)


def test_fp8_weights_and_gathered_units_by_hand() -> None:
    """C on Llama 3.1 8B, tensorwise FP8 with --fp8-param-gather on 8 H100, ZeRO 3. Weights: the
    32 layers' 6,979,584,000 elements (norms counted in) at 1 B / 8, the embedding and output
    layer with the final norm (2 x 525,336,576 + 4,096) at 2 B / 8. Transient: the peak at the
    fourth unit's backward as in bf16 with the gathered units at 1 B (uint8 buffers): gradients
    (TAIL + 4U) x 2 (bf16 for FP8 parameters, pgb:2319-2322), the window 4U x 1, and the
    transpose Transformer Engine builds for the unit run, U x 1. Before: weights at 2 B / 8
    and the window at 2 B, 4.54 GB."""
    job, lay, chunks = _fp8("tensorwise")
    weights, _, _, _, transient = rank_state(job, lay, 0, chunks)
    assert weights == pytest.approx((32 * U * 1 + (2 * EMB + NORM) * 2) / 8)
    assert transient == pytest.approx((TAIL_PAD + 4 * U_PAD) * 2 + 4 * U_PAD + U_PAD)
    st = memory.stage_memory(job, lay, 0, chunks)
    assert st.weights == pytest.approx(weights)
