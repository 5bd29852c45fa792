"""Megatron-LM flags the reader does not read but that change memory or step time, and what a line
that holds one is told: a note where planner prices the run as if the flag were absent
(`NOT_MODELLED`, skipped for Megatron's default value or one planner prices,
`NOT_MODELLED_DEFAULTS`), a refusal where it cannot bound what the flag changes (`REFUSED`).
Every other flag the reader does not read is ignored and listed (`check --verbose`).

Sources are NVIDIA/Megatron-LM d98e8a64, paths under megatron/ (`megatron_flags.txt` names the
line that adds each flag). NeMo's overrides of the same settings share these texts
(`planner.inputs.nemo_unread`).
"""

from __future__ import annotations

from planner.inputs.errors import InputError

NOT_MODELLED: dict[str, str] = {
    "--megatron-fsdp-main-params-dtype": "a main-weight dtype other than fp32 is counted as fp32",
    "--disable-mamba-mem-eff-path": "the Mamba mixer's unfused path keeps more activations than "
    "the fused one planner counts (memory under-estimated)",
    "--optimizer": "optimizers other than Adam and Muon (sgd, lion, adaptive_muon) are counted "
    "with Adam's two moments (soap is refused: `megatron_training.refuse_soap`)",
    "--use-checkpoint-args": "at run time the checkpoint's saved arguments (model shape, "
    "vocabulary) replace the line's; planner reads the line's",
    "--use-mp-args-from-checkpoint-args": "at run time the checkpoint's tensor, pipeline, "
    "virtual-pipeline and expert parallel sizes replace the line's (checkpointing.py:2355-2362); "
    "planner reads the line's",
    "--batch-invariant-mode": "batch-invariant kernels (TransformerConfig d98e8a64 "
    "transformer_config.py:1184-1189: 'will significantly affect speed') are timed as the "
    "default kernels (step time under-estimated)",
    "--keep-fp8-transpose-cache": "Megatron-FSDP then keeps each FP8 weight's transpose through "
    "the step (about one byte per parameter, its README says), which is not counted (memory "
    "under-estimated)",
    # fusions and kernels planner times as the default ones
    "--no-bias-dropout-fusion": "the unfused bias-dropout-add (TransformerConfig "
    "bias_dropout_fusion, arguments.py:2899) is timed as the fused one (step time "
    "under-estimated)",
    "--no-bias-gelu-fusion": "the unfused bias-GELU (arguments.py:2892) is timed as the fused one "
    "(step time under-estimated); under --quick-geglu it is the GLU's fusion switch "
    "(argument_utils.py:319), read as training.fused_swiglu = false",
    "--disable-jit-fuser": "every torch.compile'd elementwise fusion (core jit.py:27-30: "
    "bias-activation, bias-dropout-add, rotary) then runs eagerly, op by op; planner times them "
    "fused (step time under-estimated)",
    "--moe-permute-fusion": "the fused and the unfused token permutations (TransformerConfig "
    "moe_permute_fusion, transformer_config.py:941) are timed alike (planner.model.moe_time)",
    "--moe-router-fusion": "the fused top-k routing and aux-loss kernel "
    "(transformer_config.py:944) is timed as the unfused router",
    "--mla-down-proj-fusion": "the fused q/kv down-projection (arguments.py:3566) is timed as two "
    "GEMMs",
    "--disable-bf16-reduced-precision-matmul": "bf16 GEMMs with full-precision reductions "
    "(transformer_config.py:489, torch's allow_bf16_reduced_precision_reduction off) are timed "
    "as the default ones",
    "--fp16-lm-cross-entropy": "the fp16 cross entropy (arguments.py:3072) is not modelled: the "
    "loss is counted and timed as the default one",
    "--output-logit-dtype": "fp32 logits from the output GEMM (arguments.py:3075, "
    "gpt_model.py:294) are counted in bf16 (memory under-estimated)",
    "--mlp-chunks-for-training": "the MLP run in that many sequence chunks (transformer_config.py:"
    "1298, transformer_layer.py:981-1025) is counted and timed as one: smaller GEMMs, smaller "
    "transient activations, one more copy of its output",
    # memory
    "--export-kd-teacher-load": "knowledge distillation then builds the teacher model that "
    "checkpoint holds beside the student on every GPU (post_training utils.py:28-30, "
    "model_builder.py:474-494), whose weights and forward planner does not count (memory and "
    "time under-estimated)",
    "--moe-paged-stash-buffer-size-factor-cpu": "with --moe-paged-stash, the stash's pinned "
    "host buffer for overflowing pages (that factor x the stash's token maxima, as the CUDA "
    "buffer's: transformer_config.py:1376, paged_stash.py:586-625) is not counted in host "
    "memory (host memory under-estimated)",
    "--distribute-saved-activations": "full recompute's layer inputs split across the "
    "tensor-parallel ranks (TransformerConfig distribute_saved_activations, "
    "transformer_config.py:557) are counted whole (memory over-estimated)",
    "--ep-overlap-early-attn-memory-release": "EP overlap's earlier attention backward "
    "(model_parallel_config.py:360) lowers the peak it holds, which planner counts without it "
    "(memory over-estimated)",
    "--empty-unused-memory-level": "torch.cuda.empty_cache() each iteration "
    "(training_config.py:48) is not timed, nor the allocator's smaller reserve counted",
    "--optimizer-cuda-graph": "the optimizer step captured in a CUDA graph (arguments.py:2920, "
    "training.py:4449) is timed eagerly and its graph's memory pool is not counted",
    "--record-memory-history": "the allocator's recorded history (common_config.py:56: a stack "
    "trace per allocation, in host memory) and its slower allocations are not priced",
    # communication
    "--no-align-param-gather": "whether the pipeline stages align their parameter all-gathers "
    "(DDP config align_param_gather, arguments.py:3152) is not modelled: the gather is timed "
    "alike either way",
    "--overlap-param-gather-with-optimizer-step": "the first parameter all-gather overlapped "
    "with the optimizer step (arguments.py:3150) is not modelled: timed without it",
    "--overlap-dispatch-backward-with-experts-wgrad": "the experts' weight gradients delayed "
    "under the dispatch backward (model_parallel_config.py:351) are timed without the overlap",
    "--moe-dispatch-fwd-dtype": "the expert dispatch's forward all-to-all in that dtype "
    "(transformer_config.py:997) is sized in bf16",
    "--moe-combine-bwd-dtype": "the expert combine's backward all-to-all in that dtype "
    "(transformer_config.py:1004) is sized in bf16",
    "--use-sharp": "SHARP in-network reductions for the data-parallel groups "
    "(common_config.py:112) are not priced: DP collectives are timed over the NICs",
    "--use-nccl-ub": "NCCL user-buffer registration of the DP / FSDP buffers (arguments.py:3171) "
    "is not modelled: the collectives are timed with NCCL's usual SM share",
    "--no-pin-cpu-grads": "the offloaded optimizer's gradients then copy through pageable host "
    "memory (arguments.py:2932), slower than the pinned copies planner times",
    "--no-pin-cpu-params": "the offloaded optimizer's parameters then copy through pageable host "
    "memory (arguments.py:2934), slower than the pinned copies planner times",
    "--hybrid-context-parallel": "hybrid context parallelism (model_parallel_config.py:120) "
    "regroups the data- and context-parallel ranks per packed sample by its length; planner "
    "models fixed context-parallel groups on full-length sequences",
}
"""Megatron-LM flags that change memory or time in ways planner does not price: present (with a
value other than NOT_MODELLED_DEFAULTS'), they are read as the note says."""

TIME_ONLY = frozenset(
    {
        "--batch-invariant-mode",
        "--no-bias-dropout-fusion",
        "--no-bias-gelu-fusion",
        "--disable-jit-fuser",
        "--moe-permute-fusion",
        "--moe-router-fusion",
        "--mla-down-proj-fusion",
        "--disable-bf16-reduced-precision-matmul",
        "--no-align-param-gather",
        "--overlap-param-gather-with-optimizer-step",
        "--overlap-dispatch-backward-with-experts-wgrad",
        "--moe-dispatch-fwd-dtype",
        "--moe-combine-bwd-dtype",
        "--use-sharp",
        "--no-pin-cpu-grads",
        "--no-pin-cpu-params",
    }
)
"""The NOT_MODELLED flags whose note is about the step time alone: the memory planner counts for
such a line is the run's (`memory_notes`)."""


def memory_notes(not_modelled: tuple[str, ...]) -> tuple[str, ...]:
    """The notes of a reading's `not_modelled` that bear on its memory: all but those of
    TIME_ONLY's flags and the experts' `sequential_experts` (each note starts with its flag,
    `megatron_args`; SequentialMLP's experts save what the grouped ones do)."""
    skip = TIME_ONLY | {"--moe-grouped-gemm"}
    return tuple(n for n in not_modelled if n.split(":", 1)[0] not in skip)


NOT_MODELLED_DEFAULTS: dict[str, tuple[str, ...]] = {
    "--megatron-fsdp-main-params-dtype": ("fp32",),
    "--optimizer": ("adam", "muon", "dist_muon"),  # Muon: planner.model.optimizer_states
    "--output-logit-dtype": ("bf16",),  # the output layer's input dtype in a bf16 run
    "--mlp-chunks-for-training": ("1",),  # transformer_config.py:1298
    "--empty-unused-memory-level": ("0",),  # training_config.py:48
    "--moe-dispatch-fwd-dtype": ("bf16",),  # transformer_config.py:997
    "--moe-combine-bwd-dtype": ("bf16",),  # transformer_config.py:1004
    # 0 allocates no host buffer (transformer_config.py:1376, paged_stash.py:592-608)
    "--moe-paged-stash-buffer-size-factor-cpu": ("0", "0.0", "0.", "-0", "-0.0"),
}
"""The values of NOT_MODELLED flags that are Megatron's defaults or that planner models (no
note then)."""


REFUSED: dict[str, str] = {
    "--enable-mhc-connections": "hyper-connections carry --mhc-num-residual-streams (4 by "
    "default) residual streams through every layer (TransformerConfig d98e8a64), which "
    "planner's activations do not count",
    "--heterogeneous-layers-config-path": "each layer's shape then comes from that file "
    "(HeterogeneousTransformerConfig), which planner does not read",
    "--heterogeneous-layers-config-encoded-json": "each layer's shape then comes from that "
    "JSON (HeterogeneousTransformerConfig), which planner does not read",
    "--fp32-residual-connection": "the residual stream, and the tensors the pipeline sends, are "
    "then fp32 (TransformerConfig), which planner counts in bf16",
    "--te-precision-config-file": "each matching module then runs the quantization recipe that "
    "YAML names (d98e8a64 argument_utils.py:365-368 load_quantization_recipe, "
    "arguments.py:2020-2022), a file planner does not read: planner does not model per-module "
    "precision overrides",
    "--freeze-all-layers": "the run then takes forward passes only, without gradients "
    "(training.py:2353-2354), and turns the distributed optimizer off (arguments.py:1839-1844): "
    "not the training step planner prices, and its optimizer unsharded",
}
"""Megatron-LM flags that change memory in ways planner does not model and that it cannot bound
by a note: a line with one is refused (exit 2) rather than judged with the memory under-counted.
The tensor-parallel weight shards (GTP) are refused where they shard (`megatron_layout`)."""


def sequential_experts(experts: bool, grouped_gemm: bool) -> list[str]:
    """The note of an MoE line (`experts`) without --moe-grouped-gemm: Megatron-LM then builds
    each layer's experts as SequentialMLP, a Python loop over the local experts, each with its own
    fc1 and fc2 Transformer Engine linears (transformer_engine_spec_provider.py:75-108), which
    planner times as the grouped GEMMs it prices for every MoE model."""
    if not experts or grouped_gemm:
        return []
    return [
        "--moe-grouped-gemm: not given with --num-experts: Megatron builds SequentialMLP "
        "experts (one fc1 and one fc2 GEMM per local expert, in a Python loop: "
        "transformer_engine_spec_provider.py:75-108), timed as grouped GEMMs (step time "
        "under-estimated: the per-expert GEMMs and their launches)"
    ]


def refuse_soap(optimizer: str | None, where: str) -> None:
    """--optimizer soap is refused: Megatron-LM takes it from the emerging_optimizers package
    (emerging_optimizers.py:41, registered at :607-616 with no parameter overrides, so every
    parameter is SOAP's), whose SOAP keeps, beside Adam's two moments, two Kronecker factors of
    each m x n weight and their two eigenbases, fp32 m x m and n x n matrices (soap.py
    `init_kronecker_factors`, `get_eigenbasis_eigh`): 8 (m^2 + n^2) bytes a matrix, whole on one
    rank under the layer-wise distributed optimizer (arguments.py:1735-1737). Quadratic in each
    dimension, it has no bound in the per-parameter bytes planner counts: a 128,256-row
    vocabulary's embedding shard at tp 2 (64,128 x 4,096) alone keeps 8 x (64,128^2 + 4,096^2)
    bytes = 30.8 GiB."""
    if optimizer == "soap":
        raise InputError(
            f"{where}: --optimizer soap: planner does not model it: SOAP keeps each weight "
            "matrix's two Kronecker factors and their eigenbases in fp32, 8 (m^2 + n^2) bytes "
            "for an m x n weight shard (emerging_optimizers soap.py; a 64,128-row embedding "
            "shard alone: 30.8 GiB), which planner's per-parameter optimizer bytes cannot bound"
        )
