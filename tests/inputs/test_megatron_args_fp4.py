"""`check --megatron-args` of an NVFP4 line with --fp4-param-gather and no sharded optimizer
(QA s33 item h11): Megatron-LM runs NVFP4 weights as the parameters there, which planner models
only with the distributed optimizer or FSDP, so the reader refuses the line (exit 2, naming the
flag) rather than predict the bf16 copy.

Oracle: Megatron-LM d98e8a64 megatron/training/argument_utils.py:313 (`kw_args['fp4_param'] =
args.fp4_param_gather`), megatron/core/transformer/transformer_block.py:357-359 (the layers
built under `get_fp4_context(..., is_init=True)`), megatron/core/fp4_utils.py:258
(`need_fp4_context = ... config.fp4_param` at init); arguments.py:1095-1097 asserts the
distributed optimizer for --fp8-param-gather only (tests/emit/test_fp4_param_gather_zero0.py
checks these lines against the mirror)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run

from planner.inputs import megatron_args
from planner.inputs.errors import InputError

LINE = (
    "torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 "
    "--num-attention-heads 16 --seq-length 4096 --max-position-embeddings 4096 "
    "--vocab-size 32000 --tokenizer-type NullTokenizer "
    "--micro-batch-size 1 --global-batch-size 8 --bf16 --fp4-format e2m1 --fp4-recipe nvfp4 "
)


def test_reader_refuses_the_gather_without_a_sharded_optimizer() -> None:
    with pytest.raises(InputError, match="--fp4-param-gather: without --use-distributed-opt"):
        megatron_args.to_plan(LINE + "--fp4-param-gather", "b200-sxm-180gb", 8)
    # with the distributed optimizer or Megatron-FSDP it is read as the plan's gather
    for sharded in (
        "--use-distributed-optimizer",
        "--use-megatron-fsdp --ckpt-format fsdp_dtensor",
    ):
        doc = megatron_args.to_plan(LINE + f"--fp4-param-gather {sharded}", "b200-sxm-180gb", 8)
        assert doc["training"]["fp4_param_gather"] and doc["parallel"]["zero_stage"] >= 1
    # without the flag ZeRO 0 is read: bf16 weights and their NVFP4 copies
    doc = megatron_args.to_plan(LINE, "b200-sxm-180gb", 8)
    assert not doc["training"]["fp4_param_gather"] and doc["parallel"]["zero_stage"] == 0


def test_check_exits_2_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "train.sh"
    path.write_text(LINE + "--fp4-param-gather\n")
    argv = ["check", "--megatron-args", str(path), "--gpu", "b200-sxm-180gb", "--num-gpus", "8"]
    code, _, err = run(argv, capsys)
    assert code == 2 and "--fp4-param-gather" in err
