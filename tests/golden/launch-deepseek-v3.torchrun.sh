#!/usr/bin/env bash
# planner 0.1.0: torchrun launch file for job 'launch-deepseek-v3' from launch-deepseek-v3.toml
# model deepseek-v3 on 1024 x h800-sxm-80gb, seq 4096, global batch 1024, fp8
# layout: tp2 pp16 dp32 ep64 etp1 vpp2 sp mbs1 zero1 recompute=full
# predicted: step 9.473 s, 432.4 tokens/s/GPU, MFU 12.7% of the bf16 peak, 6.4% of the FP8 peak, peak memory 21.4 GiB of 77.3 GiB usable (fits); 20.9 GiB with the expandable segments its environment sets (PYTORCH_CUDA_ALLOC_CONF: a script read back with it predicts that)
# operations: checkpoint 9.56 TB (sync, write 74.7 s, blocks 75.0 s) every 541 steps = 85 min; MTBF 49.5 h at 0.000474 failures/GPU-day
# operations: goodput 96.8% (checkpoints 1.4%, failures 1.8%); effective 428,415 tokens/s
# 128 node(s) x 8 GPUs: run this same script on each node
set -euo pipefail

JOB_NAME=launch-deepseek-v3

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
SAVE_INTERVAL="${SAVE_INTERVAL:-541}"
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
    --nnodes 128
    --nproc-per-node 8
    --rdzv-backend c10d
    --rdzv-endpoint "$MASTER_ADDR:29400"
    --rdzv-id="$JOB_NAME"
)
MODEL_ARGS=(
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --kv-channels 128
    --multi-latent-attention
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --swiglu
    --normalization RMSNorm
    --disable-bias-linear
    --qk-layernorm
    --untie-embeddings-and-output-weights
    --vocab-size 129280
    --make-vocab-size-divisible-by 3232
    --seq-length 4096
    --position-embedding-type rope
    --max-position-embeddings 163840
    --num-experts 256
    --moe-router-topk 8
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-layer-freq '[0]*3+[1]*58'
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-num-groups 8
    --moe-router-group-topk 4
    --mtp-num-layers 1
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 16
    --context-parallel-size 1
    --pipeline-model-parallel-layout 'Et*3|(t*2|)*13(t|)*2(t*2|)*14t|tmL'
    --sequence-parallel
    --expert-model-parallel-size 64
    --expert-tensor-parallel-size 1
    --moe-token-dispatcher-type alltoall
    --moe-grouped-gemm
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1024
    --bf16
    --fp8-format hybrid
    --fp8-recipe delayed
    --fp8-param-gather
    --cross-entropy-loss-fusion
    --cross-entropy-fusion-impl native
    --grad-reduce-in-bf16
    --no-create-attention-mask-in-dataloader
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
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
