"""The gradient buffers of a Megatron-LM line under --fp16 and --bf16 (megatron_training
._optimizer_dtypes): fp32 only where Megatron's accumulate_allreduce_grads_in_fp32 holds.

Oracles (Megatron-LM d98e8a64):
- megatron/core/distributed/param_and_grad_buffer.py:924: `grad_dtype = torch.float if
  grad_reduce_in_fp32 else param.dtype`; distributed_data_parallel_config.py:15
  `grad_reduce_in_fp32: bool = False`; training.py:2635 passes
  args.accumulate_allreduce_grads_in_fp32 as grad_reduce_in_fp32.
- megatron/training/arguments.py:1194-1217 (validate_args): --fp16 sets params_dtype half and
  leaves accumulate_allreduce_grads_in_fp32 as given (argparse store_true, :3069, default False);
  --bf16 asserts --main-grads-dtype fp32 where it is given (:1209-1211), clears it under
  --grad-reduce-in-bf16 (:1213-1214) and otherwise turns it on while --main-grads-dtype is fp32
  (:1215-1216). --grad-reduce-in-bf16 is read nowhere else (git grep grad_reduce_in_bf16).
- Hand arithmetic for the memory: Llama 3.1 8B has 8,030,261,248 parameters; the unsharded
  gradient buffer at 2 B instead of 4 B is 8,030,261,248 x 2 B = 16.06e9 B = 14.96 GiB less.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

LINE = (
    "torchrun --nproc-per-node 8 pretrain_gpt.py "
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --seq-length 8192 "
    "--max-position-embeddings 8192 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights "
    "--disable-bias-linear --vocab-size 128256 --tokenizer-type NullTokenizer "
    "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
    "--micro-batch-size 1 --global-batch-size 64 --use-distributed-optimizer "
    "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 "
    "--train-iters 10 --lr 1e-4 "
)
"""The QA repro's Llama-3.1-8B shape on 8 GPUs (dp 8, the distributed optimizer)."""

FSDP = "--use-megatron-fsdp --data-parallel-sharding-strategy optim --ckpt-format fsdp_dtensor "


def grad_dtype(extra: str) -> str:
    reading = megatron_args.read(LINE + extra, "h100-sxm-80gb", None, "train.sh")
    return str(reading.doc["training"].get("main_grad_dtype", "fp32"))


CASES: tuple[tuple[str, str], ...] = (
    # --fp16: the parameters' dtype (2 B) unless --accumulate-allreduce-grads-in-fp32
    ("--fp16", "bf16"),
    ("--fp16 --accumulate-allreduce-grads-in-fp32", "fp32"),
    # --grad-reduce-in-bf16 only acts under --bf16 (:1213): no change under --fp16
    ("--fp16 --grad-reduce-in-bf16", "bf16"),
    ("--fp16 --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32", "fp32"),
    # --bf16: fp32 implied (:1215-1216), so the flag changes nothing
    ("--bf16", "fp32"),
    ("--bf16 --accumulate-allreduce-grads-in-fp32", "fp32"),
    ("--bf16 --grad-reduce-in-bf16", "bf16"),
    # --grad-reduce-in-bf16 clears the flag (:1213-1214)
    ("--bf16 --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32", "bf16"),
    ("--bf16 --use-precision-aware-optimizer --main-grads-dtype bf16", "bf16"),
    # Megatron-FSDP: its own flag (default: the parameters' dtype)
    ("--fp16 " + FSDP, "bf16"),
    ("--fp16 " + FSDP + "--megatron-fsdp-main-grads-dtype fp32", "fp32"),
)
"""(extra flags, the gradient buffers' dtype in planner's names: "bf16" is any 16-bit)."""


def test_gradient_buffer_dtype() -> None:
    """Every row of CASES (before the fix, --fp16 alone read fp32 and --fp16
    --grad-reduce-in-bf16 --accumulate-allreduce-grads-in-fp32 16-bit; the --bf16 rows stay)."""
    read = [(extra, grad_dtype(extra), dtype) for extra, dtype in CASES]
    assert [row for row in read if row[1] != row[2]] == []


def test_bf16_refuses_fp32_accumulation_with_bf16_main_grads() -> None:
    """arguments.py:1209-1211 asserts `main_grads_dtype == torch.float32` under --bf16 where
    --accumulate-allreduce-grads-in-fp32 is given."""
    with pytest.raises(InputError, match="--accumulate-allreduce-grads-in-fp32"):
        grad_dtype(
            "--bf16 --use-precision-aware-optimizer --main-grads-dtype bf16 "
            "--accumulate-allreduce-grads-in-fp32"
        )


def test_the_fp16_note_says_how_gradients_are_read() -> None:
    notes = megatron_args.read(LINE + "--fp16", "h100-sxm-80gb", None, "train.sh").notes
    (note,) = [n for n in notes if n.startswith("--fp16")]
    assert "fp16 parameters" in note and "gradient buffers 16-bit" in note
    assert "--accumulate-allreduce-grads-in-fp32" in note
    extra = "--fp16 --accumulate-allreduce-grads-in-fp32"
    notes = megatron_args.read(LINE + extra, "h100-sxm-80gb", None, "train.sh").notes
    assert any("gradient buffers fp32" in n for n in notes)


def _explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str) -> tuple[float, float]:
    path = tmp_path / "train.sh"
    path.write_text(LINE + extra + "\n")
    code, out, err = run(
        ["explain", "--megatron-args", str(path), "--gpu", "h100-sxm-80gb", "--json"], capsys
    )
    assert code == 0, err
    doc = json.loads(out)
    return doc["memory"]["peak_gib"], doc["performance"]["step_time_s"]


def test_fp16_predicts_what_bf16_gradients_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The QA oracle: --fp16 predicts as --bf16 --grad-reduce-in-bf16 (16-bit buffers and DP
    traffic), --fp16 --accumulate-allreduce-grads-in-fp32 as --bf16, but for fp16's unscaling of
    the main gradients at the step (optimizer.py:713-724 d98e8a64), the same pass either way: the
    shard's fp32 main gradients read and written, 4 + 4 B (a 16-bit buffer's shard is copied into
    fp32 ones first, distrib_optimizer.py:2792); the memory gap is the 8B model's gradient buffer
    at 2 B less per parameter, 14.96 GiB (module docstring)."""
    fp16 = _explain(tmp_path, capsys, "--fp16")
    fp16_acc = _explain(tmp_path, capsys, "--fp16 --accumulate-allreduce-grads-in-fp32")
    bf16 = _explain(tmp_path, capsys, "--bf16")
    bf16_g = _explain(tmp_path, capsys, "--bf16 --grad-reduce-in-bf16")
    assert fp16[0] == bf16_g[0] and fp16_acc[0] == bf16[0]
    unscale16, unscale32 = fp16[1] - bf16_g[1], fp16_acc[1] - bf16[1]
    assert 0 < unscale16 < 0.01
    assert unscale32 == pytest.approx(unscale16, abs=2e-4)  # step times kept to 0.1 ms
    assert bf16[0] - fp16[0] == pytest.approx(8_030_261_248 * 2 / 2**30, abs=0.01)
    assert fp16[1] < bf16[1]  # the reduce-scatter moves half the bytes
