"""The `[training]` table of a plan read from Megatron-LM flags (for `megatron_args`): sequence
length, the global batch (`megatron_batch`), precision and FP8 recipe, the attention
kernels that keep the s x s scores, fused SwiGLU, MoE routing limits, gradient and optimizer-state
dtypes (`megatron_dtypes`), CUDA graphs, and the flags of `megatron_args_memory`. Flag names and
meanings: Megatron-LM d98e8a64 (`megatron/training/arguments.py`, the config dataclasses)."""

from __future__ import annotations

from typing import Any

from planner.inputs import megatron_args_memory
from planner.inputs.errors import InputError
from planner.inputs.megatron_batch import global_batch
from planner.inputs.megatron_dtypes import (
    FP32_NOTE,
    FP32_QUANTISED_NOTE,
    fp8_wgrad_note,
    fp16_note,
    optimizer_dtypes,
)
from planner.inputs.megatron_line import Line
from planner.inputs.megatron_tp_overlap import userbuffers_only
from planner.inputs.megatron_unread import refuse_soap, sequential_experts
from planner.inputs.moe_checks import fused_mlp_reading
from planner.inputs.plan_types import CUDA_GRAPH_MODULES

FSDP2_FP8_GATHER_NOTE = (
    "--fp8-param-gather: read off under --use-torch-fsdp2, as Megatron-LM runs it: validate_args "
    "sets fp8_param_gather False there with Transformer Engine 2.0 or later (d98e8a64 "
    "arguments.py:1051-1057, 'will fallback to bf16 all_gather')"
)
"""How a torch FSDP2 line with --fp8-param-gather is read: bf16 weights gathered in bf16."""

FSDP2_GRADS_NOTE = (
    "--use-torch-fsdp2: gradients reduce-scattered and kept sharded in the parameters' 16-bit "
    'dtype (main_grad_dtype "bf16"), copied to fp32 only at the optimizer step: Megatron-LM '
    "d98e8a64 calls fully_shard without an mp_policy (distributed/"
    "torch_fully_sharded_data_parallel.py:82-85) and gives it no DDP setting but "
    "reshard_after_forward (training.py:2627-2629), so --accumulate-allreduce-grads-in-fp32 "
    "does not reach it; its optimizer (not the distributed one) takes `grad.float()` per "
    "parameter at the step (optimizer/optimizer.py:1092-1105)"
)
"""How a torch FSDP2 line's gradients are read, in 16-bit training."""


def training_table(
    line: Line, parallel: dict[str, Any], num_gpus: int, notes: list[str], missing: list[str]
) -> dict[str, Any]:
    """The `[training]` table; how the line was read is appended to `notes`, what it asks for that
    planner does not model to `missing`."""
    where = line.where
    seq = line.integer("--seq-length")
    if seq is None:  # validate_args: --encoder-seq-length stands for it (T5)
        seq = line.integer("--encoder-seq-length")
    if seq is None:
        raise InputError(f"{where}: --seq-length: required, but not given")
    training: dict[str, Any] = {"seq_length": seq}
    training["global_batch_size"] = global_batch(line, parallel, num_gpus, notes)
    fp8, fp4, bf16 = line.has("--fp8-format"), line.has("--fp4-format"), line.has("--bf16")
    fp16 = line.has("--fp16")
    params = "bf16" if bf16 else "fp16" if fp16 else "fp32"  # arguments.py:1194-1198
    training["precision"] = "fp8" if fp8 else "fp4" if fp4 else params
    if (fp8 or fp4) and params != "bf16":
        training["params_dtype"] = params
    if fp4:
        training["fp4_param_gather"] = line.has("--fp4-param-gather")
        if training["fp4_param_gather"] and parallel.get("zero_stage") == 0:
            raise InputError(
                f"{where}: --fp4-param-gather: without --use-distributed-optimizer or FSDP "
                "Megatron-LM still makes the NVFP4 weights the parameters (d98e8a64 "
                "argument_utils.py:313, transformer_block.py:357-359; validate_args asserts the "
                "distributed optimizer only for --fp8-param-gather), which planner models only "
                "with a sharded optimizer; add --use-distributed-optimizer, or drop "
                "--fp4-param-gather to keep bf16 weights beside their NVFP4 copies"
            )
        recipe = line.text("--fp4-recipe")
        if recipe not in (None, "nvfp4"):
            raise InputError(
                f"{where}: --fp4-recipe: {recipe!r} is a custom quantiser factory; planner models "
                "the nvfp4 recipe (Transformer Engine's NVFP4BlockScaling)"
            )
    if (fp8 or fp4) and line.has("--first-last-layers-bf16"):  # Megatron's defaults: 1 and 1
        start, end = (
            line.integer("--num-layers-at-start-in-bf16"),
            line.integer("--num-layers-at-end-in-bf16"),
        )
        training["bf16_layers_at_start"] = 1 if start is None else start
        training["bf16_layers_at_end"] = 1 if end is None else end
    if fp8:
        gather = line.has("--fp8-param-gather")
        if gather and line.has("--use-torch-fsdp2"):
            gather = False
            notes.append(FSDP2_FP8_GATHER_NOTE)
        training["fp8_param_gather"] = gather
        recipe = line.text("--fp8-recipe")
        if recipe is not None:
            training["fp8_recipe"] = recipe
    if (wgrad := fp8_wgrad_note(line, fp8)) is not None:
        notes.append(wgrad)
    if line.has("--fp8-output-proj"):  # the plan's check repeats Megatron's: fp8 with mxfp8
        training["fp8_output_proj"] = True
    if fp16 and bf16:  # validate_args: `if args.fp16: assert not args.bf16`
        raise InputError(
            f"{where}: --fp16: not with --bf16 (Megatron-LM d98e8a64 validate_args asserts "
            "`not args.bf16` under --fp16): give one of them"
        )
    if fp16:
        notes.append(fp16_note(line))
    elif params == "fp32":
        notes.append(FP32_NOTE if not (fp8 or fp4) else FP32_QUANTISED_NOTE)
    _attention(line, training, params == "fp32")
    if line.has("--no-bias-swiglu-fusion") and not line.has("--quick-geglu"):
        training["fused_swiglu"] = False
    if line.has("--quick-geglu") and line.has("--no-bias-gelu-fusion"):
        training["fused_swiglu"] = False  # its bias_activation_fusion (argument_utils.py:319)
    squared_moe = line.has("--squared-relu") and bool(line.integer("--num-experts"))
    if squared_moe and not line.has("--use-fused-weighted-squared-relu"):
        training["fused_swiglu"] = False  # Megatron's default: the unfused weighted activation
    if line.has("--no-rope-fusion"):
        training["fused_rope"] = False
    for flag in ("--moe-router-num-groups", "--moe-router-group-topk"):
        value = line.integer(flag)
        if value is not None:
            training[flag[2:].replace("-", "_")] = value
    capacity = line.number("--moe-expert-capacity-factor")
    if capacity is not None:
        training["moe_expert_capacity_factor"] = capacity
    if line.has("--moe-pad-expert-input-to-capacity"):
        training["moe_pad_expert_input_to_capacity"] = True
    rank_capacity = line.number("--moe-expert-rank-capacity-factor")
    if rank_capacity is not None:
        training["moe_expert_rank_capacity_factor"] = rank_capacity
    if line.has("--moe-paged-stash"):
        training["moe_paged_stash"] = True
    stash = line.number("--moe-paged-stash-buffer-size-factor-cuda")
    if stash is not None:
        training["moe_paged_stash_buffer_size_factor"] = stash
    if line.has("--moe-router-force-load-balancing"):
        training["moe_router_force_load_balancing"] = True
    if line.has("--moe-router-padding-for-quantization") or line.has(
        "--moe-router-padding-for-fp8"
    ):
        training["moe_router_padding"] = True  # (the alias turns it on, tc:2641-2647)
    if (router := line.text("--moe-router-dtype")) is not None:  # choices fp32, fp64
        training["moe_router_dtype"] = router
    _fused_grouped_mlp(line, training, notes)
    missing += sequential_experts(
        bool(line.integer("--num-experts")), line.has("--moe-grouped-gemm")
    )
    training.update(optimizer_dtypes(line))
    if line.has("--use-torch-fsdp2") and params != "fp32":
        training["main_grad_dtype"] = "bf16"  # (fp16's are 2 bytes too: the same bytes)
        notes.append(FSDP2_GRADS_NOTE)
    refuse_soap(line.text("--optimizer"), line.where)
    training.update(_muon(line))
    training.update(megatron_args_memory.training_flags(line, parallel, notes))
    _cuda_graphs(line, training)
    if userbuffers_only(line, parallel):
        training["tp_userbuffers"] = True
    return training


def _fused_grouped_mlp(line: Line, training: dict[str, Any], notes: list[str]) -> None:
    """--use-transformer-engine-op-fuser: the experts as Transformer Engine's fused grouped MLP
    (`moe_checks.fused_mlp_reading`: grouped-GEMM experts, a gated unit interleaved by 32)."""
    fused, note = fused_mlp_reading(
        "--use-transformer-engine-op-fuser",
        line.has("--use-transformer-engine-op-fuser"),
        bool(line.integer("--num-experts")) and line.has("--moe-grouped-gemm"),
        line.has("--swiglu") or line.has("--quick-geglu"),
        line.integer("--moe-mlp-glu-interleave-size"),
    )
    if fused:
        training["moe_fused_grouped_mlp"] = True
    if note:
        notes.append(note)
    if line.has("--moe-use-grouped-tensor"):
        training["moe_grouped_tensor"] = True


CUDA_GRAPH_IMPLS = ("none", "local", "transformer_engine", "full_iteration")
"""Megatron-LM d98e8a64 --cuda-graph-impl choices (arguments.py; TransformerConfig
cuda_graph_impl)."""


def _cuda_graphs(line: Line, training: dict[str, Any]) -> None:
    """Whether the training step runs its layers as CUDA graphs: --cuda-graph-impl local |
    transformer_engine | full_iteration, or the deprecated --enable-cuda-graph (local) and
    --external-cuda-graph (transformer_engine) (arguments.py validate_args, d98e8a64); and which
    regions of each layer: --cuda-graph-modules (or the deprecated --cuda-graph-scope) naming
    some of attn, mlp, moe, moe_router, moe_preprocess, mamba (full: the whole layer); the
    implementation (`Job.cuda_graph_impl`), a deprecated full_iteration region with local being
    the full_iteration implementation (arguments.py's migration)."""
    impl = _choice(line, "--cuda-graph-impl", CUDA_GRAPH_IMPLS)
    legacy = line.has("--enable-cuda-graph") or line.has("--external-cuda-graph")
    if legacy and impl not in (None, "none"):
        raise InputError(
            f"{line.where}: --cuda-graph-impl: cannot be combined with --enable-cuda-graph or "
            "--external-cuda-graph (Megatron-LM asserts it)"
        )
    flag = "--cuda-graph-modules" if line.has("--cuda-graph-modules") else "--cuda-graph-scope"
    words = ",".join(line.words(flag) or [])
    parts = graph_regions(words)
    if isinstance(parts, str):
        raise InputError(f"{line.where}: {flag}: {parts}")
    whole_step = "full_iteration" in words.replace(" ", "").split(",")
    if line.has("--external-cuda-graph"):
        impl = "transformer_engine"
    if whole_step and impl == "transformer_engine":  # cuda_graph_config.py:107-111 d98e8a64
        raise InputError(
            f"{line.where}: {flag}: full_iteration cannot be combined with "
            "cuda_graph_impl='transformer_engine' (Megatron-Core asserts it)"
        )
    if not (legacy or whole_step or impl not in (None, "none")):
        return
    training["cuda_graphs"] = True
    if whole_step:
        impl = "full_iteration"  # the deprecated region: arguments.py migrates it to the impl
    elif impl in (None, "none"):  # --enable-cuda-graph
        impl = "local"
    training["cuda_graph_impl"] = impl
    if parts and impl != "full_iteration":
        training["cuda_graph_modules"] = parts
    # validate_args turns the check off itself only for fp16's dynamic loss scaling
    checked = not (line.has("--fp16") and line.number("--loss-scale") is None)
    if impl == "full_iteration" and checked and not line.has("--no-check-for-nan-in-loss-and-grad"):
        raise InputError(
            f"{line.where}: --cuda-graph-impl: full_iteration needs "
            "--no-check-for-nan-in-loss-and-grad (Megatron-LM's validate_args asserts it)"
        )
    inflight = line.integer("--fine-grained-offloading-max-inflight-offloads")
    offloads = line.has("--fine-grained-activation-offloading") and line.words("--offload-modules")
    if impl == "full_iteration" and offloads and (inflight is None or inflight < 0):
        raise InputError(
            f"{line.where}: --fine-grained-offloading-max-inflight-offloads: "
            f"{'not given' if inflight is None else inflight}: under a full-iteration CUDA "
            "graph, fine-grained activation offloading needs it a non-negative integer "
            "(TransformerConfig asserts it; planner launch writes 1)"
        )
    warmup = line.integer("--cuda-graph-warmup-steps")  # TransformerConfig's default: 3
    if offloads and warmup is not None and warmup <= 0:  # transformer_config.py:2963-2966
        raise InputError(
            f"{line.where}: --cuda-graph-warmup-steps: {warmup}: fine-grained activation "
            "offloading under CUDA graphs needs it greater than 0 (TransformerConfig asserts it)"
        )


def graph_regions(text: str) -> list[str] | str:
    """The CUDA-graph regions a comma-separated list names ("[attn, moe_router]" too), repeats
    folded and "full" / "full_iteration" (the whole layer) left out; or, where it names one
    Megatron-Core does not know or names with another, why (for the caller's message)."""
    names = [w for w in (w.strip(" '\"[]") for w in text.split(",")) if w]
    if "full" in names and names != ["full"]:  # cuda_graph_config.py:39-40 d98e8a64
        return (
            f"{','.join(names)}: full (the whole layer) cannot be named with other regions "
            "(Megatron-Core asserts it: full scope cannot be used with other scopes)"
        )
    if "full_iteration" in names and set(names) != {"full_iteration"}:  # arguments.py:1969-1971
        return (
            f"{','.join(names)}: full_iteration (the whole step) cannot be named with regions "
            "(Megatron asserts --cuda-graph-modules empty under full_iteration)"
        )
    parts = [w for w in names if w not in ("full", "full_iteration")]
    bad = next((w for w in parts if w not in CUDA_GRAPH_MODULES), None)
    if bad is not None:
        return f"{bad!r} is not one of {', '.join(CUDA_GRAPH_MODULES)}, full"
    return list(dict.fromkeys(parts))


def _attention(line: Line, training: dict[str, Any], fp32: bool) -> None:
    """The s x s attention scores are stored by the unfused paths: TE's `unfused` backend, and
    MCore's own DotProductAttention, which `--attention-backend local` and `--transformer-impl
    local` select (megatron_rules.md section 10); flash / fused / auto keep none. `flash` pinned
    to FlashAttention-2 (--flash-attention-version 2) is the plan's attention_kernel "flash2".
    In fp32 every path is unfused (`planner.model.fp32`), which precision "fp32" implies: flash
    and fused have no kernel to run there, and Transformer Engine raises (they set
    NVTE_UNFUSED_ATTN=0, language_module.py:130-140)."""
    backend = line.text("--attention-backend")
    impl = line.text("--transformer-impl")
    if backend == "local" and (line.words("--spec") or [""])[0] != "local":
        raise InputError(
            f"{line.where}: --attention-backend: 'local' needs --spec local (Megatron-LM "
            "asserts it, arguments.py:436-437)"
        )
    if fp32:
        if backend in ("flash", "fused"):
            raise InputError(
                f"{line.where}: --attention-backend: {backend} without --bf16 / --fp16: "
                "FlashAttention and cuDNN attention take bf16 / fp16 only (Transformer Engine's "
                "get_attention_backend finds no backend in fp32); use auto or unfused"
            )
        if (line.integer("--context-parallel-size") or 1) > 1:
            raise InputError(
                f"{line.where}: --context-parallel-size: without --bf16 / --fp16 the attention "
                "runs Transformer Engine's unfused attention, which has no context parallelism "
                "(get_attention_backend finds no backend); use 1"
            )
        return
    if backend in ("unfused", "local") or impl == "local":
        training["flash_attention"] = False
    elif backend == "flash" and line.integer("--flash-attention-version") == 2:
        training["attention_kernel"] = "flash2"  # TE's flash-attn path, pinned to FA2


def _muon(line: Line) -> dict[str, Any]:
    """--optimizer muon (dist_muon: muon with the distributed optimizer). With the distributed
    optimizer Megatron runs its layer-wise optimizer (arguments.py validate_args, d98e8a64), whose
    --no-use-layer-wise-param-layout path assigns whole parameters to ranks
    (layer_wise_optimizer.py `_shard_params_ping_pong`)."""
    if (line.flags.get("--optimizer") or [""])[0] not in ("muon", "dist_muon"):
        return {}  # adam; sgd and the others are listed as ignored
    name = line.text("--optimizer")
    distributed = name == "dist_muon" or line.has("--use-distributed-optimizer")
    out: dict[str, Any] = {"optimizer": "muon"}
    if distributed and line.has("--no-use-layer-wise-param-layout"):
        out["muon_whole_params"] = True
    steps = line.integer("--muon-num-ns-steps")
    if steps is not None:
        if steps < 1:
            raise InputError(
                f"{line.where}: --muon-num-ns-steps: expected at least 1 (got {steps})"
            )
        out["muon_ns_steps"] = steps
    mode = _choice(line, "--muon-tp-mode", MUON_TP_MODES)
    if mode is not None:
        out["muon_tp_mode"] = mode
    precision = _choice(line, "--muon-fp32-matmul-prec", tuple(MUON_PRECISIONS))
    if precision is not None:
        out["muon_matmul_precision"] = MUON_PRECISIONS[precision]
    if line.has("--muon-no-split-qkv"):
        out["muon_split_qkv"] = False
    if line.has("--muon-nesterov"):
        out["muon_nesterov"] = True
    return out


def _choice(line: Line, flag: str, choices: tuple[str, ...]) -> str | None:
    """A flag's value, one of Megatron's `choices` (None when absent)."""
    value = line.text(flag)
    if value is not None and value not in choices:
        raise InputError(
            f"{line.where}: {flag}: expected one of {', '.join(choices)} (got {value!r})"
        )
    return value


MUON_TP_MODES = ("duplicated", "blockwise", "distributed")
"""Megatron-LM d98e8a64 --muon-tp-mode choices (arguments.py)."""
MUON_PRECISIONS = {"low": "medium", "medium": "medium", "high": "high"}
"""Megatron-LM's --muon-fp32-matmul-prec choices and the precision planner times each at: "low"
is no precision torch.set_float32_matmul_precision knows below "medium" (bf16 GEMMs), which it
is read as."""


def environment_fields(env: dict[str, str], training: dict[str, Any], where: str) -> None:
    """What the script's environment (`megatron_line.Launch.env`) sets that planner models:
    PyTorch's allocator with expandable segments (PYTORCH_CUDA_ALLOC_CONF, or its newer name
    PYTORCH_ALLOC_CONF, holding `expandable_segments:True`; `training.expandable_segments`) and
    Transformer Engine's GEMM SM margin (NVTE_EXT_MARGIN_SM; `training.gemm_sm_margin`)."""
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        options = dict(o.partition(":")[::2] for o in env.get(name, "").split(",") if o)
        if options.get("expandable_segments", "").lower() == "true":
            training["expandable_segments"] = True
    te_graphs = training.get("cuda_graph_impl") == "transformer_engine"
    expandable = "expandable_segments:True" in env.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if te_graphs and expandable and env.get("NCCL_GRAPH_REGISTER", "") != "0":
        # arguments.py d98e8a64 validate_args asserts it ("to avoid illegal memory access")
        raise InputError(
            f"{where}: NCCL_GRAPH_REGISTER: Megatron-LM asserts it is 0 where "
            "--cuda-graph-impl transformer_engine runs beside PYTORCH_CUDA_ALLOC_CONF="
            f"expandable_segments:True (got {env.get('NCCL_GRAPH_REGISTER')!r}): export "
            "NCCL_GRAPH_REGISTER=0"
        )
    margin = env.get("NVTE_EXT_MARGIN_SM")
    if margin is not None:
        if not margin.isdecimal():
            raise InputError(
                f"{where}: NVTE_EXT_MARGIN_SM: expected a count of SMs (got {margin!r})"
            )
        training["gemm_sm_margin"] = int(margin)
