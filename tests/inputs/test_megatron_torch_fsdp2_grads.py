"""Megatron-LM's --use-torch-fsdp2 gradients: 16-bit, reduce-scattered and kept sharded, copied to
fp32 only at the optimizer step (main_grad_dtype "bf16" at ZeRO 3).

Oracles (NVIDIA/Megatron-LM d98e8a64): megatron/core/distributed/
torch_fully_sharded_data_parallel.py:82-85 calls fully_shard with a mesh and
reshard_after_forward only (no mp_policy: FSDP2 keeps and reduces gradients in the parameters'
dtype); megatron/training/training.py:2627-2629 gives it no DDP setting but that one, so
--accumulate-allreduce-grads-in-fp32 does not reach it; megatron/core/optimizer/optimizer.py
:1092-1105 makes `main_param.grad = model_param.grad.float()` per parameter at the step and drops
the 16-bit one. Hand arithmetic on Llama 3.1 8B untied (P = 8,030,261,248 parameters, 32 layers)
on 8 GPUs, ZeRO 3 over dp 8: gradients 2 P / 8 = 2,007,565,312 bytes (fp32 read: 4 P / 8), the
step's fp32 copy 4 P / 8, and FSDP2's unsharded gradients at 2 bytes in place of 4."""

from __future__ import annotations

from dataclasses import replace

from planner.emit import megatron
from planner.inputs import megatron_args
from planner.inputs.plan import Plan, parse_plan
from planner.model import cost, memory
from planner.model.performance import Performance
from planner.model.rank_states import rank_state, step_bytes

LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
    "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
    "--num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
    "--position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear "
    "--untie-embeddings-and-output-weights --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 32 --use-torch-fsdp2 "
    "--no-gradient-accumulation-fusion --ckpt-format torch_dist --recompute-granularity full "
    "--recompute-method uniform --recompute-num-layers 1 --lr 1e-4 "
)
P = 8_030_261_248


def _plan(extra: str) -> Plan:
    return parse_plan(megatron_args.to_plan(LINE + extra, "h100-sxm-80gb", 8))


def _states(plan: Plan) -> tuple[float, float, float]:
    job, lay = plan.job, plan.require_layout()
    chunks = lay.chunk_layers(job.arch.num_layers)[0]
    _, grads, _, _, transient = rank_state(job, lay, 0, chunks)
    return grads, step_bytes(job, lay, 0, chunks), transient


def test_bf16_gradients_sharded_and_copied_to_fp32_at_the_step() -> None:
    for extra in ("--bf16", "--bf16 --accumulate-allreduce-grads-in-fp32"):
        plan = _plan(extra)
        assert plan.job.main_grad_dtype == "bf16"
        assert plan.require_layout().zero_stage == 3
        grads, copy, transient = _states(plan)
        assert grads == 2 * P / 8
        assert copy == 4 * P / 8
        # torch FSDP2's buffers (tests/model/test_torch_fsdp2_megatron.py), their gradients
        # and reduce-scatter inputs at 2 bytes too: at the loss the output layer (128,256 x
        # 4,096) gathered, its gradient and input, beside the last decoder layer (2 x 4,096^2 +
        # 2 x 4,096 x 1,024 + 3 x 4,096 x 14,336 + 2 x 4,096 = 218,112,000) prefetched
        assert transient == (2 + 2 + 2) * 128_256 * 4_096 + 2 * 218_112_000


def test_fp32_training_keeps_fp32_gradients() -> None:
    plan = _plan("")  # neither --bf16 nor --fp16: fp32 parameters, so fp32 gradients
    assert plan.job.main_grad_dtype == "fp32"
    grads, copy, _ = _states(plan)
    assert (grads, copy) == (4 * P / 8, 0.0)


def test_the_reduce_scatter_moves_bf16() -> None:
    plan = _plan("--bf16")
    job, lay = plan.job, plan.require_layout()
    assert job.grad_bytes == 2.0  # what dp_sync's ZeRO 3 reduce-scatter moves per element

    def dp(b: Performance) -> float:
        return b.breakdown.dp_comm_exposed + b.breakdown.dp_comm_hidden

    fp32 = cost.estimate(replace(job, main_grad_dtype="fp32"), lay)
    assert dp(cost.estimate(job, lay)) < dp(fp32)


def test_the_megatron_target_writes_a_line_that_runs_it() -> None:
    """The line written back runs torch FSDP2 again (its bf16 gradients need no flag): the
    plan read back from it is the same plan, with the same peak."""
    plan = _plan("--bf16")
    text = megatron.render(plan, "job")
    assert "--use-torch-fsdp2" in text and "--use-megatron-fsdp" not in text
    back = parse_plan(megatron_args.to_plan(text, "h100-sxm-80gb", 8))
    assert back.job.main_grad_dtype == "bf16"
    assert back.require_layout().zero_stage == 3
    peak = memory.estimate(plan.job, plan.require_layout()).peak
    assert memory.estimate(back.job, back.require_layout()).peak == peak
