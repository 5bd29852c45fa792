"""Megatron-LM `pretrain_gpt.py` arguments for a plan: model shape, parallel layout, batch,
recompute and precision, grouped by concern.

Flag names are those of Megatron-LM's argument parser (megatron/training/arguments.py and the
dataclasses it generates flags from, at NVIDIA/Megatron-LM d98e8a64), and each
combination emitted is one `validate_args` / `TransformerConfig.__post_init__` accepts (1.2):

- zero_stage 0 plain DDP; 1 `--use-distributed-optimizer`; 3 with `use_torch_fsdp2` torch FSDP2
  (`--use-torch-fsdp2`, `--no-gradient-accumulation-fusion`); 2 / 3 Megatron-FSDP with
  `--data-parallel-sharding-strategy optim_grads` / `optim_grads_params`, which asserts
  `--ckpt-format fsdp_dtensor` (Megatron sets its distributed optimizer itself), and
  `--megatron-fsdp-main-grads-dtype fp32` for fp32 gradients (its default is the parameters'
  dtype): `planner.emit.megatron_fsdp_args`, with its unit buffers' settings.
- Precision: `--fp8-format` with `--fp8-recipe` always (Megatron's default recipe is delayed);
  MXFP8 with `--fp8-param-gather` gathers in the gradient buffer
  (`--reuse-grad-buf-for-mxfp8-param-ag`, as Megatron-Bridge's MXFP8 preset); NVFP4 is
  `--fp4-format e2m1 --fp4-recipe nvfp4` (with `--fp4-param-gather` where the plan gathers NVFP4
  parameters, ZeRO >= 1: at ZeRO 0 the plan keeps bf16 weights, `FP4_PARAM_GATHER_NOTE`); the
  optimizer's flags (bf16 moments, the CPU-offloaded optimizer, Muon) are
  `planner.emit.megatron_optimizer`'s.
- Pipeline split: `planner.emit.megatron_pipeline` (layers per virtual stage, first/last
  counts, or the layout string).
- `--max-position-embeddings` is required and must be >= `--seq-length`: max of the two for
  rope models, the model's own table size for learned positions.
`planner.inputs.megatron_args` reads these arguments back into the same plan.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from planner.emit import pools
from planner.emit.common import (
    comment_block,
    cuda_graph_impl,
    environment,
    inflight_offloads,
    optimizer_instances,
)
from planner.emit.megatron_fsdp_args import megatron_fsdp_args
from planner.emit.megatron_model import Arg, model_args, refuse_local_attention, training_script
from planner.emit.megatron_optimizer import needs_distributed_optimizer, optimizer_args
from planner.emit.megatron_pipeline import pipeline_args
from planner.emit.prediction import HEADROOM, header, predict
from planner.inputs.megatron_tp_overlap import SUB_OVERLAPS
from planner.inputs.plan import Job, Plan
from planner.model.moe_padding import router_padding_runs

ENVIRONMENT = (
    "environment the prediction assumes (export it where the job runs; `check "
    "--megatron-args` reads it from this line)"
)
"""The label of the header's environment line (`planner.inputs.megatron_line.ENVIRONMENT_LINE`
reads the line back)."""

NOT_IN_PLAN = (
    "not in the plan (add your own): data and tokenizer, --train-iters, learning rate, "
    "checkpoint paths, rotary base / rope scaling, norm epsilon, MoE router details"
)


@dataclass(frozen=True)
class Arguments:
    """The plan's Megatron-LM arguments by concern."""

    model: tuple[Arg, ...]
    parallel: tuple[Arg, ...]
    training: tuple[Arg, ...]
    notes: tuple[str, ...] = ()

    def groups(self) -> list[tuple[str, tuple[Arg, ...]]]:
        return [("model", self.model), ("parallel", self.parallel), ("training", self.training)]

    def flat_args(self) -> list[Arg]:
        return [arg for _, args in self.groups() for arg in args]

    def flat(self) -> list[str]:
        """Every word, as pretrain_gpt.py receives them."""
        return [word for arg in self.flat_args() for word in arg]


def parallel_args(plan: Plan) -> list[Arg]:
    """Parallel sizes, pipeline split, sequence parallel, data-parallel sharding and overlap."""
    lay, arch = plan.require_layout(), plan.job.arch
    a: list[Arg] = [
        ("--tensor-model-parallel-size", str(lay.tp)),
        ("--pipeline-model-parallel-size", str(lay.pp)),
        ("--context-parallel-size", str(lay.cp)),
    ]
    if lay.cp_exchange:  # passed to Transformer Engine as spelt
        a.append(("--cp-comm-type", lay.cp_exchange))
    a += pipeline_args(arch, lay)
    if lay.vpp > 1 and not lay.overlap_p2p_comm:  # the interleaved default's overlap off
        a.append(("--no-overlap-p2p-communication",))
    if lay.sequence_parallel:
        a.append(("--sequence-parallel",))
    if lay.tp_comm_overlap:
        a.append(("--tp-comm-overlap",))
    elif plan.job.tp_userbuffers and lay.tp > 1:  # the userbuffers without an overlap: each
        a.append(("--tp-comm-overlap",))  # overlap off (argument_utils.py:194 @d98e8a64 adds
        a += [(flags[0],) for flags in SUB_OVERLAPS.values()]  # --disable-*), read back so
    if arch.is_moe:
        a += [
            ("--expert-model-parallel-size", str(lay.ep)),
            ("--expert-tensor-parallel-size", str(lay.expert_tp)),
            ("--moe-token-dispatcher-type", lay.moe_token_dispatcher_type),
            ("--moe-grouped-gemm",),
        ]
        if lay.moe_token_dispatcher_type == "flex":
            a.append(("--moe-flex-dispatcher-backend", lay.moe_flex_dispatcher_backend))
            if lay.moe_flex_dispatcher_num_sms is not None:
                a.append(("--moe-flex-dispatcher-num-sms", str(lay.moe_flex_dispatcher_num_sms)))
        if lay.ep_comm_overlap:
            a += [("--overlap-moe-expert-parallel-comm",), ("--delay-wgrad-compute",)]
        if lay.moe_shared_expert_overlap:
            a.append(("--moe-shared-expert-overlap",))
    if lay.use_tp_pp_dp_mapping:  # rank order tp-cp-ep-pp-dp (d98e8a64 initialize.py:395)
        a.append(("--use-tp-pp-dp-mapping",))
    if lay.defer_embedding_wgrad_compute:
        a.append(("--defer-embedding-wgrad-compute",))
        if lay.wgrad_deferral_limit:
            a.append(("--wgrad-deferral-limit", str(lay.wgrad_deferral_limit)))
    if lay.microbatch_group_size_per_vp_stage is not None and lay.vpp > 1:  # else unread
        size = str(lay.microbatch_group_size_per_vp_stage)
        a.append(("--microbatch-group-size-per-virtual-pipeline-stage", size))
    if lay.cpu_offloading_num_layers:
        a.append(("--cpu-offloading-num-layers", str(lay.cpu_offloading_num_layers)))
    if lay.offload_modules:
        a += [
            ("--fine-grained-activation-offloading",),
            ("--offload-modules", *lay.offload_modules),
        ]
        if lay.activation_offload_fraction != 1.0:
            a.append(("--activation-offload-fraction", f"{lay.activation_offload_fraction:g}"))
        if (inflight := inflight_offloads(plan)) is not None:
            a.append(("--fine-grained-offloading-max-inflight-offloads", str(inflight)))
    if lay.zero_stage == 1:
        a.append(("--use-distributed-optimizer",))
    elif lay.use_torch_fsdp2:  # no --overlap-param-gather (validate_args refuses it there)
        a.append(("--use-torch-fsdp2",))
        if not lay.torch_fsdp2_reshard_after_forward:
            a.append(("--torch-fsdp2-no-reshard-after-forward",))
    elif lay.zero_stage >= 2:
        a += megatron_fsdp_args(plan)
    if (instances := optimizer_instances(plan)) > 1:
        a.append(("--num-distributed-optimizer-instances", str(instances)))
        if plan.job.outer_dp_sharding_strategy == "optim":
            a.append(("--outer-dp-sharding-strategy", "optim"))
    if lay.dp * lay.cp > 1 and lay.overlap_grad_reduce:
        a.append(("--overlap-grad-reduce",))
        if lay.ddp_bucket_size is not None:
            a.append(("--ddp-bucket-size", str(lay.ddp_bucket_size)))
        if lay.ddp_num_buckets is not None:
            a.append(("--ddp-num-buckets", str(lay.ddp_num_buckets)))
        if lay.gathers_overlapped:
            a.append(("--overlap-param-gather",))
    return a


def training_args(plan: Plan) -> list[Arg]:
    """Batch, precision, gradient reduction dtype and recompute."""
    lay, job = plan.require_layout(), plan.job
    a: list[Arg] = [
        ("--micro-batch-size", str(lay.micro_batch_size)),
        ("--global-batch-size", str(job.global_batch_size)),
    ]
    # the parameters' dtype: fp32 is neither --bf16 nor --fp16 (planner.model.fp32)
    if job.params_dtype != "fp32":
        a.append((f"--{job.params_dtype}",))
    if job.precision == "fp8":
        # the recipe always, so Megatron does not fall back to delayed scaling; MXFP8 keeps
        # gradients in E4M3 too (Megatron-Bridge's MXFP8 preset)
        fmt = "e4m3" if job.fp8_recipe == "mxfp8" else "hybrid"
        a += [("--fp8-format", fmt), ("--fp8-recipe", job.fp8_recipe)]
        if job.fp8_param_gather:
            needs_distributed_optimizer(
                plan, "fp8_param_gather", "--fp8-param-gather", "set fp8_param_gather = false"
            )
            a.append(("--fp8-param-gather",))
            if job.fp8_recipe == "mxfp8" and lay.zero_stage == 1:
                # MXFP8 weights gathered in the gradient buffer, as Megatron-Bridge's MXFP8
                # preset does: without it Megatron warns of "significant additional memory"
                # that planner.model.memory does not count (Megatron-FSDP turns it off)
                a.append(("--reuse-grad-buf-for-mxfp8-param-ag",))
    if job.fp8_output_proj:
        a.append(("--fp8-output-proj",))
    if not job.fused_rope and job.arch.position_embedding_type == "rope":
        a.append(("--no-rope-fusion",))  # rotary embeddings as separate ops, as timed
    # DDP's hook adds each wgrad, as timed (planner.model.wgrad_accumulation; FSDP2 asserts it)
    if not job.gradient_accumulation_fusion or lay.use_torch_fsdp2:
        a.append(("--no-gradient-accumulation-fusion",))
    if job.megatron_loss in ("native", "te"):
        # a fused loss: the compiled native one where the plan says so (and where it says
        # Transformer Engine's, which Megatron-LM refuses:
        # `launch_pricing.megatron_lm_launched`), else Transformer Engine's (Megatron-Bridge's
        # performance recipes' choice); without the flag
        # Megatron runs its unfused loss (output_time.UNFUSED_LOSS_BYTES_PER_LOGIT)
        a += [("--cross-entropy-loss-fusion",), ("--cross-entropy-fusion-impl", job.megatron_loss)]
    if job.moe_router_dtype is not None and job.arch.is_moe:  # (planner.model.router_dtype)
        a.append(("--moe-router-dtype", job.moe_router_dtype))
    if router_padding_runs(job, lay):
        a.append(("--moe-router-padding-for-quantization",))
    if job.moe_grouped_tensor:  # not modelled; HybridEP's rank capacity factor takes it
        a.append(("--moe-use-grouped-tensor",))
    if job.moe_fused_grouped_mlp:  # the experts' fused grouped MLP (its GLU interleaved by 32)
        a.append(("--use-transformer-engine-op-fuser",))
        if job.arch.gated_linear_unit:
            a.append(("--moe-mlp-glu-interleave-size", "32"))
    if job.precision == "fp4":
        a += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
        if job.fp4_param_gather and lay.zero_stage >= 1:  # at ZeRO 0: FP4_PARAM_GATHER_NOTE
            a.append(("--fp4-param-gather",))
    if job.bf16_layers_at_start or job.bf16_layers_at_end:
        a += [
            ("--first-last-layers-bf16",),
            ("--num-layers-at-start-in-bf16", str(job.bf16_layers_at_start)),
            ("--num-layers-at-end-in-bf16", str(job.bf16_layers_at_end)),
        ]
    if job.params_dtype == "fp16" and job.main_grad_dtype == "fp32" and lay.zero_stage < 2:
        # fp16 buffers are the parameters' dtype unless asked (validate_args turns fp32 on under
        # --bf16 only, arguments.py:1204-1217); Megatron-FSDP's own flag says it above
        a.append(("--accumulate-allreduce-grads-in-fp32",))
    elif job.main_grad_dtype == "bf16" and job.params_dtype == "bf16":
        a.append(("--grad-reduce-in-bf16",))
    if job.deterministic:  # Megatron sets its NCCL, TE and cuBLAS variables (model.determinism)
        a.append(("--deterministic-mode",))
    switch = activation_switch(job)
    if switch == ("bias_activation_fusion", False):  # --quick-geglu's is the GELU switch
        quick = job.arch.activation == "quick_geglu"  # (argument_utils.py:316-319 d98e8a64)
        a.append(("--no-bias-gelu-fusion",) if quick else ("--no-bias-swiglu-fusion",))
    elif switch == ("use_fused_weighted_squared_relu", True):
        a.append(("--use-fused-weighted-squared-relu",))
    if not job.dataloader_attention_mask:  # no [mbs, 1, s, s] mask per micro-batch on the GPU
        a.append(("--no-create-attention-mask-in-dataloader",))  # (buffers.dataloader_mask_bytes)
    if job.async_save:  # validate_args drops --async-save without the worker (arguments.py:1814)
        a += [("--async-save",), ("--use-persistent-ckpt-worker",)]  # (its context: buffers)
    if job.log_grad_stats:  # the gradient statistics the plan's step pays (cost.GRAD_STATS_S)
        a += [("--log-params-norm",), ("--log-num-zeros-in-grad",)]
    if job.test_mode:  # the real-time attention checks the plan's step time counts
        a.append(("--test-mode",))
    if job.weight_hash_interval:  # the check the plan's step time counts (model.weight_hash)
        a.append(("--check-weight-hash-across-dp-replicas-interval", str(job.weight_hash_interval)))
    a += optimizer_args(plan)
    if lay.recompute == "full":
        a += [
            ("--recompute-granularity", "full"),
            ("--recompute-method", lay.recompute_method),
            ("--recompute-num-layers", str(lay.recompute_num_layers)),
        ]
    elif lay.recompute == "selective":
        a += [
            ("--recompute-granularity", "selective"),
            ("--recompute-modules", *lay.recompute_modules),
        ]
    refuse_local_attention(plan)
    if not job.flash_attention:
        a.append(("--attention-backend", "unfused"))
    elif job.attention_kernel == "flash2" and job.cluster.gpu.vendor == "nvidia":
        # Transformer Engine's flash-attn path, pinned to FlashAttention-2: the backend sets
        # NVTE_FLASH_ATTN=1 / NVTE_FUSED_ATTN=0 itself (language_module.py
        # _set_attention_backend, which asserts those variables unset or so under "auto")
        a += [("--attention-backend", "flash"), ("--flash-attention-version", "2")]
    # the dropouts the plan's memory counts no masks for (Megatron's default is 0.1 each)
    if not job.attention_dropout:
        a.append(("--attention-dropout", "0.0"))
    if not job.hidden_dropout:
        a.append(("--hidden-dropout", "0.0"))
    if not job.masked_softmax_fusion:  # read by Megatron's local attention (planner.model.scores)
        a.append(("--no-masked-softmax-fusion",))
    if job.cuda_graphs:
        impl = cuda_graph_impl(plan)
        a.append(("--cuda-graph-impl", impl))
        if job.cuda_graph_modules:
            a.append(("--cuda-graph-modules", *job.cuda_graph_modules))
        if impl == "full_iteration":  # validate_args asserts it off for the whole-step graph
            a.append(("--no-check-for-nan-in-loss-and-grad",))
    return a


def activation_switch(job: Job) -> tuple[str, bool] | None:
    """The TransformerConfig field (and its value) that says whether the activation runs fused,
    where Megatron has one for the model's: bias_activation_fusion for SwiGLU and quick-GEGLU
    (argument_utils.py:316-319 d98e8a64: --no-bias-swiglu-fusion turns SwiGLU's off,
    --no-bias-gelu-fusion quick-GEGLU's), use_fused_weighted_squared_relu for an MoE
    model's squared ReLU experts (off by default: the unfused path saves the activation's output
    for the probabilities, `planner.model.moe_activations`)."""
    arch = job.arch
    if arch.gated_linear_unit and arch.activation in ("swiglu", "quick_geglu"):
        return "bias_activation_fusion", job.fused_swiglu
    if arch.is_moe and arch.activation == "squared_relu":
        return "use_fused_weighted_squared_relu", job.fused_swiglu
    return None


def unflagged(plan: Plan) -> list[str]:
    """Notes for the plan's training-code settings that Megatron-Core (Megatron-LM and
    Megatron-Bridge alike) has no switch for: planner timed them, the launched job runs
    Megatron's own."""
    job = plan.job
    notes = []
    if not job.fused_norm:
        notes.append("training.fused_norm = false has no Megatron flag (its norms are fused)")
    if not job.fused_swiglu and not activation_switch(job):
        notes.append(
            f"training.fused_swiglu = false has no Megatron flag for {job.arch.activation} "
            "(planned with the activation unfused)"
        )
    if job.sp_keeps_gathered_input:
        notes.append(
            "training.sp_keeps_gathered_input = true has no Megatron flag (it re-gathers in "
            "backward)"
        )
    if not job.tp_backward_overlap:
        notes.append(
            "training.tp_backward_overlap = false has no Megatron flag (its column-parallel "
            "backward overlaps the TP collectives with the dgrad and wgrad GEMMs)"
        )
    if job.cross_entropy != "fused":
        notes.append(
            f"training.cross_entropy = {job.cross_entropy!r} has no Megatron flag (it runs its "
            "vocab-parallel cross entropy over the local logits)"
        )
    return notes


FP8_ATTENTION_NOTE = (
    "training.fp8_attention = true has no Megatron-LM flag (TransformerConfig "
    "fp8_dot_product_attention is left out of its command line, megatron/training/arguments.py "
    "@d98e8a64): this job runs its attention in bf16, as planner launch predicts it; "
    "Megatron-Bridge sets it (mixed_precision.fp8_dot_product_attention)"
)


FP4_PARAM_GATHER_NOTE = (
    "training.fp4_param_gather = true at zero_stage 0: --fp4-param-gather is left out, so this "
    "job keeps bf16 weights beside their NVFP4 copies, as planner predicts it (the flag makes "
    "Megatron-LM's weights NVFP4 parameters whatever the optimizer, argument_utils.py:313 and "
    "transformer_block.py:357-359 @d98e8a64, which planner models only with the distributed "
    "optimizer or FSDP); raise zero_stage to gather NVFP4 parameters"
)


def arguments(plan: Plan) -> Arguments:
    """Every Megatron-LM argument the plan decides."""
    notes = unflagged(plan) + list(plan.launch_notes)
    if plan.job.fp8_attention:  # a caller that renders the plan as written
        notes.append(FP8_ATTENTION_NOTE)
    job = plan.job
    if job.precision == "fp4" and job.fp4_param_gather and plan.require_layout().zero_stage == 0:
        notes.append(FP4_PARAM_GATHER_NOTE)
    if job.pools:  # the arguments name no pool: a read-back is one GPU kind's
        notes.append(pools.READ_BACK_NOTE)
    return Arguments(
        model=tuple(model_args(plan)),
        parallel=tuple(parallel_args(plan)),
        training=tuple(training_args(plan)),
        notes=tuple(notes),
    )


def env_summary(plan: Plan) -> str:
    return " ".join(
        f"{e.name}={e.value}" if e.value is not None else f"(unset {e.name})"
        for e in environment(plan)
    )


def render(plan: Plan, job_name: str, *, headroom_pct: float = HEADROOM) -> str:
    """The arguments, one flag per line under a comment per concern, shell-quoted.
    `planner check --megatron-args FILE --gpu G --num-gpus N` reads the file back."""
    args = arguments(plan)
    lines = [
        *header(plan, "megatron-args", job_name, predict(plan, headroom_pct)),
        f"Megatron-LM {training_script(plan)} arguments, shell-quoted, one flag per line",
        f"{ENVIRONMENT}: {env_summary(plan)}",
        NOT_IN_PLAN,
        *(f"note: {n}" for n in args.notes),
    ]
    out = comment_block(lines)
    for name, group in args.groups():
        out += f"# {name}\n"
        out += "".join(" ".join(shlex.quote(w) for w in arg) + "\n" for arg in group)
    return out
