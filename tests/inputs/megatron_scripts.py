"""Megatron-LM launch lines for the test_megatron_args*.py files: the example script for Llama 3
8B (its shape gives the released checkpoint's parameter count), a small model's line, and reading
a line through planner.inputs.megatron_args.
"""

from __future__ import annotations

from planner.inputs import megatron_args

# Megatron-LM examples/llama/train_llama3_8b_h100_fp8.sh (ecosystem.md 1.6), with variables and
# continuations as such scripts have them.
LLAMA3_8B = """#!/bin/bash
export CUDA_DEVICE_MAX_CONNECTIONS=1
TP=2
PP=2
MODEL_ARGS=(
  --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
  --num-attention-heads 32 --group-query-attention --num-query-groups 8 --kv-channels 128
  --swiglu --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear
  --vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192  # model shape
  --position-embedding-type rope
)
torchrun --nproc_per_node 8 pretrain_gpt.py "${MODEL_ARGS[@]}" \\
  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP --sequence-parallel \\
  --micro-batch-size 1 --global-batch-size 128 --bf16 \\
  --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \\
  --recompute-granularity selective --lr 3e-4 --data-path "/data/my corpus"
"""


# a small model, as Megatron-LM's functional-test lines (issue 21) write one
SMALL = (
    "--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 4096 "
    "--max-position-embeddings 4096 --micro-batch-size 1 --bf16 "
)


def read(text: str, gpus: int = 8) -> megatron_args.Reading:
    return megatron_args.read(text, "h100-sxm-80gb", gpus, "train.sh")
