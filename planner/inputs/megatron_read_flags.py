"""The Megatron-LM flags planner's reader reads (`READ`), among them the precision flags
(`PRECISION_FLAGS`, `FP8_WGRAD_FLAGS`): the table `planner.inputs.megatron_flags` re-exports beside
the parser's own flag list and what the reader refuses or leaves unmodelled."""

from __future__ import annotations

PRECISION_FLAGS: tuple[str, ...] = (
    "--bf16",
    "--fp8-format",
    "--fp8-recipe",
    "--fp8-param-gather",
    "--fp8-output-proj",
    "--fp4-format",
    "--fp4-recipe",
    "--fp4-param-gather",
    "--first-last-layers-bf16",
    "--num-layers-at-start-in-bf16",
    "--num-layers-at-end-in-bf16",
)
"""The precision flags the reader reads (`megatron_training`) and the launch writes
(`planner.emit.megatron`): bf16, FP8 with its recipe and param gather, the MXFP8 output layer,
NVFP4, and the layers kept in bf16."""

FP8_WGRAD_FLAGS = ("--no-fp8-wgrad", "--disable-fp8-wgrad")
"""The two spellings of fp8_wgrad False (TransformerConfig d98e8a64 transformer_config.py:631),
read as a no-op with a note (`megatron_dtypes.fp8_wgrad_note`); the launch does not write them."""

READ = frozenset(
    {
        # model shape
        "--num-layers",
        "--hidden-size",
        "--ffn-hidden-size",
        "--num-attention-heads",
        "--group-query-attention",
        "--num-query-groups",
        "--kv-channels",
        "--max-position-embeddings",
        "--position-embedding-type",
        "--use-rotary-position-embeddings",
        "--normalization",
        "--softmax-type",
        "--swiglu",
        "--squared-relu",
        "--quick-geglu",
        "--no-bias-gelu-fusion",  # --quick-geglu's fusion (training.fused_swiglu); else noted
        "--activation-func-clamp-value",
        "--glu-linear-offset",
        "--untie-embeddings-and-output-weights",
        "--disable-bias-linear",
        "--add-qkv-bias",
        "--qk-layernorm",
        "--attention-output-gate",
        "--multi-latent-attention",
        "--q-lora-rank",
        "--kv-lora-rank",
        "--qk-head-dim",
        "--qk-pos-emb-head-dim",
        "--v-head-dim",
        "--mtp-num-layers",
        "--num-experts",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--moe-shared-expert-intermediate-size",
        "--moe-latent-size",
        "--moe-router-score-function",
        "--moe-apply-probs-on-input",
        "--moe-router-enable-expert-bias",
        "--qk-l2-norm",
        "--no-rope-freq",
        "--moe-layer-freq",
        "--window-size",
        "--window-attn-skip-freq",
        "--moe-router-num-groups",
        "--moe-router-group-topk",
        "--moe-expert-capacity-factor",
        "--moe-expert-rank-capacity-factor",
        "--moe-paged-stash",
        "--moe-paged-stash-buffer-size-factor-cuda",
        "--moe-pad-expert-input-to-capacity",
        "--moe-router-force-load-balancing",
        "--moe-router-dtype",
        "--moe-router-padding-for-quantization",
        "--moe-router-padding-for-fp8",
        # the experts' fused grouped MLP (megatron_training._fused_grouped_mlp)
        "--use-transformer-engine-op-fuser",
        "--moe-use-grouped-tensor",
        "--moe-grouped-gemm",
        "--moe-mlp-glu-interleave-size",
        "--use-checkpoint-args",
        # vocabulary
        "--vocab-size",
        "--padded-vocab-size",
        "--make-vocab-size-divisible-by",
        "--tokenizer-type",
        "--tokenizer-model",
        "--tiktoken-pattern",
        "--vocab-file",
        # hybrid Mamba stacks
        "--hybrid-layer-pattern",
        "--hybrid-override-pattern",
        "--is-hybrid-model",
        "--mtp-hybrid-override-pattern",
        "--mtp-use-repeated-layer",
        "--mamba-state-dim",
        "--mamba-head-dim",
        "--mamba-num-groups",
        "--mamba-num-heads",
        # gated delta nets (megatron_gdn); the variant also says DSA (megatron_dsa)
        "--experimental-attention-variant",
        "--linear-attention-freq",
        "--linear-conv-kernel-dim",
        "--linear-key-head-dim",
        "--linear-value-head-dim",
        "--linear-num-key-heads",
        "--linear-num-value-heads",
        # DeepSeek sparse attention (megatron_dsa.FLAGS)
        "--dsa-indexer-n-heads",
        "--dsa-indexer-head-dim",
        "--dsa-indexer-topk",
        "--dsa-kernel-backend",
        "--dsa-indexer-loss-coeff",
        "--dsa-indexer-use-sparse-loss",
        "--dsa-indexer-topk-freq",
        "--dsa-indexer-skip-topk-offset",
        "--no-dsa-indexer-scoring-relu",
        "--disable-dsa-indexer-scoring-relu",
        # T5's encoder and decoder (megatron_t5)
        "--encoder-num-layers",
        "--decoder-num-layers",
        "--encoder-seq-length",
        "--decoder-seq-length",
        # layout
        "--tensor-model-parallel-size",
        "--pipeline-model-parallel-size",
        "--context-parallel-size",
        "--hierarchical-context-parallel-sizes",
        "--cp-comm-type",
        "--expert-model-parallel-size",
        "--expert-tensor-parallel-size",
        "--sequence-parallel",
        "--num-layers-per-virtual-pipeline-stage",
        "--num-virtual-stages-per-pipeline-rank",
        "--microbatch-group-size-per-virtual-pipeline-stage",
        "--decoder-first-pipeline-num-layers",
        "--decoder-last-pipeline-num-layers",
        "--pipeline-model-parallel-layout",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--no-overlap-p2p-communication",  # overlap_p2p_comm (and Megatron's refusal at pp 2)
        "--tp-comm-overlap",  # and what it overlaps: megatron_tp_overlap
        "--disable-tp-comm-overlap-ag",
        "--no-tp-comm-overlap-ag",
        "--disable-tp-comm-overlap-rs",
        "--no-tp-comm-overlap-rs",
        "--disable-tp-comm-bulk-dgrad",
        "--no-tp-comm-bulk-dgrad",
        "--disable-tp-comm-bulk-wgrad",
        "--no-tp-comm-bulk-wgrad",
        "--tp-comm-overlap-rs-dgrad",
        "--tp-comm-overlap-cfg",
        "--overlap-moe-expert-parallel-comm",
        "--moe-token-dispatcher-type",
        "--moe-flex-dispatcher-backend",
        "--moe-flex-dispatcher-num-sms",
        "--moe-deepep-num-sms",
        "--moe-hybridep-num-sms",
        # data parallelism and optimizer
        "--use-distributed-optimizer",
        "--optimizer",  # muon (megatron_training._muon); the others: NOT_MODELLED
        "--no-use-layer-wise-param-layout",
        "--muon-num-ns-steps",
        "--muon-tp-mode",
        "--muon-no-split-qkv",
        "--muon-nesterov",
        "--muon-fp32-matmul-prec",
        "--use-megatron-fsdp",
        "--use-torch-fsdp2",
        "--torch-fsdp2-no-reshard-after-forward",  # Layout.torch_fsdp2_reshard_after_forward
        "--data-parallel-sharding-strategy",
        "--megatron-fsdp-main-grads-dtype",
        "--megatron-fsdp-grad-comm-dtype",
        "--fsdp-double-buffer",
        "--megatron-fsdp-max-pool-double-buffer",
        "--suggested-communication-unit-size",
        "--use-nccl-ub",  # as --fsdp-double-buffer (megatron_fsdp_flags); its timing: unread
        "--hybrid-context-parallel",  # checked (megatron_asserts); its regrouping: unread
        "--dataloader-type",  # checked beside hybrid context parallelism
        "--calculate-per-token-loss",  # checked beside hybrid context parallelism
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "--ddp-bucket-size",
        "--ddp-num-buckets",
        "--grad-reduce-in-bf16",
        "--accumulate-allreduce-grads-in-fp32",
        "--use-precision-aware-optimizer",
        "--main-grads-dtype",
        "--exp-avg-dtype",
        "--exp-avg-sq-dtype",
        "--optimizer-cpu-offload",
        "--optimizer-offload-fraction",
        "--overlap-cpu-optimizer-d2h-h2d",
        # batch, recompute, offloading
        "--seq-length",
        "--micro-batch-size",
        "--global-batch-size",
        "--step-batch-size-schedule",
        "--decrease-batch-size-if-needed",  # megatron_batch
        "--recompute-granularity",
        "--recompute-activations",
        "--checkpoint-activations",  # refused, as Megatron exits on it
        # read only for what Megatron refuses (megatron_asserts)
        "--batch-size",
        "--warmup",
        "--model-parallel-size",
        "--no-position-embedding",
        "--ckpt-format",
        "--no-gradient-accumulation-fusion",  # and training.gradient_accumulation_fusion
        "--sft",  # with the dataloader's attention mask (megatron_startup)
        "--eval-global-batch-size",  # under --decrease-batch-size-if-needed (megatron_batch)
        "--eval-micro-batch-size",
        "--main-params-dtype",
        "--tensor-parallel-num-weight-shards",  # refused beyond tp (megatron_layout)
        "--expert-tensor-parallel-num-weight-shards",
        "--recompute-method",
        "--recompute-num-layers",
        "--recompute-modules",
        "--moe-layer-recompute",
        "--cpu-offloading-num-layers",
        "--defer-embedding-wgrad-compute",
        "--use-tp-pp-dp-mapping",
        "--moe-shared-expert-overlap",
        "--wgrad-deferral-limit",
        "--fine-grained-activation-offloading",
        "--offload-modules",
        "--activation-offload-fraction",
        "--fine-grained-offloading-max-inflight-offloads",  # checked (megatron_training)
        "--cuda-graph-warmup-steps",  # checked beside fine-grained offloading
        "--no-check-for-nan-in-loss-and-grad",  # checked beside full-iteration graphs
        "--loss-scale",  # (fp16's dynamic scaling turns the check off)
        # precision and kernels
        *PRECISION_FLAGS,
        *FP8_WGRAD_FLAGS,
        "--reuse-grad-buf-for-mxfp8-param-ag",  # checked beside an MXFP8 gather (args_memory)
        "--fp16",
        "--attention-backend",
        "--flash-attention-version",  # with --attention-backend flash: attention_kernel
        "--transformer-impl",
        "--spec",
        "--no-masked-softmax-fusion",  # training.masked_softmax_fusion (its local attention's)
        "--no-bias-swiglu-fusion",
        "--use-fused-weighted-squared-relu",  # an MoE's squared ReLU: training.fused_swiglu
        "--no-rope-fusion",
        "--num-distributed-optimizer-instances",
        "--outer-dp-sharding-strategy",
        "--cross-entropy-loss-fusion",
        "--cross-entropy-fusion-impl",
        "--log-params-norm",
        "--log-num-zeros-in-grad",
        "--test-mode",
        "--no-create-attention-mask-in-dataloader",  # training.dataloader_attention_mask
        "--dataloader-inter-document-masking",  # (turns it off too)
        "--async-save",  # training.async_save, with --use-persistent-ckpt-worker
        "--use-persistent-ckpt-worker",
        "--check-weight-hash-across-dp-replicas-interval",
        "--perform-rl-step",
        "--attention-dropout",
        "--hidden-dropout",
        "--img-h",
        "--img-w",
        "--patch-dim",
        "--inference-dynamic-batching-buffer-size-gb",
        "--rl-inference-tensor-model-parallel-size",
        "--rl-inference-pipeline-model-parallel-size",
        "--rl-inference-expert-model-parallel-size",
        "--rl-inference-expert-tensor-model-parallel-size",
        "--cuda-graph-impl",
        "--enable-cuda-graph",
        "--external-cuda-graph",
        "--cuda-graph-modules",
        "--cuda-graph-scope",
        "--deterministic-mode",  # training.deterministic (and a note on Blackwell)
    }
)
"""The flags the reader reads (each one of `megatron_flags()`)."""
