#!/usr/bin/env bash
# planner 0.1.0: torchrun launch file for job 'launch-llama3.1-70b' from launch-llama3.1-70b.toml
# model llama3.1-70b on 256 x h100-sxm-80gb, seq 8192, global batch 512, bf16
# layout: tp8 pp4 dp8 vpp5 sp tpov mbs1 zero1 recompute=selective
# predicted: step 15.711 s, 1042.8 tokens/s/GPU, MFU 50.8% of the bf16 peak, peak memory 47.6 GiB of 77.3 GiB usable (fits); 45.5 GiB with the expandable segments its environment sets (PYTORCH_CUDA_ALLOC_CONF: a script read back with it predicts that)
# operations: checkpoint 988 GB (sync, write 30.9 s, blocks 31.0 s) every 422 steps = 111 min; MTBF 198.0 h at 0.000474 failures/GPU-day
# operations: goodput 99.0% (checkpoints 0.5%, failures 0.6%); effective 264,245 tokens/s
# 32 node(s) x 8 GPUs: run this same script on each node
set -euo pipefail

JOB_NAME=launch-llama3.1-70b

# ---- set these (or export them before running) ------------------------------
# a Megatron-LM checkout (the directory holding pretrain_gpt.py)
MEGATRON_DIR="${MEGATRON_DIR:-/opt/megatron-lm}"
# Megatron indexed dataset prefix (the .bin/.idx pair without extension), or MOCK
DATA_PATH="${DATA_PATH:-MOCK}"
# Hugging Face tokenizer name or directory (unused with DATA_PATH=MOCK)
TOKENIZER_MODEL="${TOKENIZER_MODEL:-}"
# where checkpoints are saved and resumed from (shared by every node)
CHECKPOINT_DIR="${CHECKPOINT_DIR:-checkpoints/$JOB_NAME}"
# steps between checkpoints: Daly's optimum for this plan (see the header)
SAVE_INTERVAL="${SAVE_INTERVAL:-422}"
TRAIN_ITERS="${TRAIN_ITERS:-1000}"
LR="${LR:-3e-4}"
MIN_LR="${MIN_LR:-3e-5}"
WARMUP_ITERS="${WARMUP_ITERS:-100}"
# the first node's address, the same on every node (required)
MASTER_ADDR="${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}"
# -----------------------------------------------------------------------------

# environment Megatron-LM needs for this layout and hardware
export CUDA_DEVICE_MAX_CONNECTIONS=1  # TP/CP > 1 before Blackwell (asserted)
export TORCH_NCCL_AVOID_RECORD_STREAMS=1  # free NCCL buffers sooner
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True  # less fragmented memory (the plan's peak counts without it: training.expandable_segments)
export NVTE_FWD_LAYERNORM_SM_MARGIN=20  # SMs for overlapped NCCL kernels
export NVTE_BWD_LAYERNORM_SM_MARGIN=20  # SMs for overlapped NCCL kernels
export NCCL_IB_TIMEOUT=19  # tolerate slow InfiniBand links at scale
export NCCL_P2P_NET_CHUNKSIZE=2097152  # larger PP sends over the network

DISTRIBUTED_ARGS=(
    --nnodes 32
    --nproc-per-node 8
    --rdzv-backend c10d
    --rdzv-endpoint "$MASTER_ADDR:29400"
    --rdzv-id="$JOB_NAME"
)
MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --kv-channels 128
    --group-query-attention
    --num-query-groups 8
    --swiglu
    --normalization RMSNorm
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --vocab-size 128256
    --make-vocab-size-divisible-by 128
    --seq-length 8192
    --position-embedding-type rope
    --max-position-embeddings 131072
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 8
    --pipeline-model-parallel-size 4
    --context-parallel-size 1
    --num-layers-per-virtual-pipeline-stage 4
    --sequence-parallel
    --tp-comm-overlap
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 512
    --bf16
    --cross-entropy-loss-fusion
    --cross-entropy-fusion-impl native
    --no-create-attention-mask-in-dataloader
    --recompute-granularity selective
    --recompute-modules core_attn
    --train-iters "$TRAIN_ITERS"
    --lr "$LR"
    --min-lr "$MIN_LR"
    --lr-decay-style cosine
    --lr-warmup-iters "$WARMUP_ITERS"
    --weight-decay 0.1
    --clip-grad 1.0
    --adam-beta1 0.9
    --adam-beta2 0.95
    --log-interval 10
)
if [[ "$DATA_PATH" == MOCK ]]; then
    DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer)
else
    : "${TOKENIZER_MODEL:?set TOKENIZER_MODEL for a real dataset}"
    DATA_ARGS=(--data-path "$DATA_PATH" --split '99,1,0'
        --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOKENIZER_MODEL")
fi
CHECKPOINT_ARGS=(
    --save "$CHECKPOINT_DIR"
    --load "$CHECKPOINT_DIR"
    --save-interval "$SAVE_INTERVAL"
)

exec torchrun "${DISTRIBUTED_ARGS[@]}" "$MEGATRON_DIR/pretrain_gpt.py" \
    "${MODEL_ARGS[@]}" "${PARALLEL_ARGS[@]}" "${TRAINING_ARGS[@]}" \
    "${DATA_ARGS[@]}" "${CHECKPOINT_ARGS[@]}"
