"""What torchtitan raises on, or runs otherwise than planner models, among the fields of a
torchtitan configuration that its readers (`planner.inputs.torchtitan_tables` for a Python
configuration, `planner.inputs.torchtitan_config` for a TOML) would otherwise pass by: each
refusal exits 2 naming the field, its value and the torchtitan line; a setting read otherwise
than the file says is noted.

Lines are pytorch/torchtitan's at b5bcd76c (Python configurations) and e347b1e5 (TOML job
configs), `planner.inputs.torchtitan.TORCHTITAN_COMMIT`."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from planner.inputs.arch_fields import MAX_LAYERS
from planner.inputs.errors import InputError, spelled
from planner.inputs.torchtitan import MODELS

FLAVORS = frozenset(MODELS.values())
"""The torchtitan (model, flavor) pairs planner plans."""

FUSING_BACKEND = "inductor"
"""The torch.compile backend whose fusions planner models (fused RMSNorm, SwiGLU, RoPE, the
float8 casts, async TP's micro-pipeline pass, torch._inductor.config._micro_pipeline_tp,
b5bcd76c distributed/compile.py:95)."""

UNFUSED_BACKENDS = ("eager", "aot_eager")
"""torch.compile backends that trace the graph but generate no kernels: nothing is fused, so the
step runs as torchtitan's eager one (planner reads them as compile off)."""


def compile_backend(where: str, field: str, backend: Any, flex: bool) -> str | None:
    """The note for a compiled model's `backend` (torchtitan passes it to torch.compile for each
    block: b5bcd76c distributed/compile.py:66-70, e347b1e5 models/llama3/infra/
    parallelize.py:262-264): None for inductor (what planner models); for eager and aot_eager a
    note that fusion, the float8 casts' fusion and async TP read as compile off; any other
    backend is refused (what it fuses is not known). `flex`: the model's attention is
    FlexAttention, which b5bcd76c refuses under any backend but inductor and aot_eager
    (compile.py:114-125)."""
    if backend == FUSING_BACKEND:
        return None
    if flex and backend != "aot_eager":
        raise InputError(
            f"{where}: {field}: {spelled(backend)} with FlexAttention: torchtitan raises 'Model "
            "uses FlexAttention but compile backend ... is neither inductor nor aot_eager' "
            "(b5bcd76c distributed/compile.py:114-125)"
        )
    if backend not in UNFUSED_BACKENDS:
        raise InputError(
            f"{where}: {field}: {spelled(backend)}: planner models torch.compile's inductor "
            f"backend (what it fuses) and {' and '.join(UNFUSED_BACKENDS)} (which fuse nothing); "
            "what another backend fuses is not known"
        )
    return (
        f"{backend!r} fuses nothing (no generated kernels): read as compile off for fusion "
        "(eager RMSNorm, SwiGLU, RoPE and float8 casts; no async TP, an inductor pass)"
    )


MODEL_REGISTRY: dict[str, tuple[tuple[str, ...], str]] = {
    "llama3": (("attn_backend", "tp_gemm_backend", "converters"), "llama3/__init__.py:369-374"),
    "qwen3": (("attn_backend", "moe_comm_backend", "converters"), "qwen3/__init__.py:613-618"),
    "deepseek_v3": (
        (
            "attn_backend",
            "moe_comm_backend",
            "non_blocking_capacity_factor",
            "converters",
            "num_mtp_layers",
        ),
        "deepseek_v3/__init__.py:616-623",
    ),
    "gpt_oss": (("moe_comm_backend", "attn_backend", "converters"), "gpt_oss/__init__.py:388-393"),
}
"""Each model's model_registry keyword parameters after the flavor, and where (b5bcd76c
torchtitan/models/): another keyword raises TypeError."""

ATTENTION_DEFAULT = {"gpt_oss": "varlen"}
"""model_registry's attn_backend default where it is not "flex" (gpt_oss/__init__.py:391)."""

ATTENTION_BACKENDS = ("flex", "flex_flash", "varlen")
"""The language-model attention backends b5bcd76c builds (models common config_utils.py:71-104:
"sdpa" raises 'no longer supported for language models', any other name 'Unknown backend')."""


def attention(where: str, model: str, kwargs: dict[str, Any]) -> str:
    """The attention backend model_registry builds (its keyword, else the model's default);
    an unknown keyword argument, and an attention backend torchtitan raises on, exit 2."""
    names, at = MODEL_REGISTRY[model]
    field = "config.model_spec"
    for key in kwargs:
        if key not in names:
            raise InputError(
                f"{where}: {field}: model_registry(..., {key}=...): torchtitan raises TypeError "
                f"(an unexpected keyword argument; {at} at b5bcd76c takes {', '.join(names)})"
            )
    backend = kwargs.get("attn_backend", ATTENTION_DEFAULT.get(model, "flex"))
    if backend == "sdpa":
        raise InputError(
            f"{where}: {field}: attn_backend 'sdpa': torchtitan raises 'sdpa is no longer "
            "supported for language models' (models common config_utils.py:97-101 at b5bcd76c)"
        )
    if backend not in ATTENTION_BACKENDS:
        raise InputError(
            f"{where}: {field}: attn_backend {spelled(backend)}: torchtitan raises 'Unknown "
            "backend' (models common config_utils.py:102-103 at b5bcd76c)"
        )
    return str(backend)


def model_spec(where: str, kwargs: dict[str, Any], degrees: dict[str, Any]) -> None:
    """model_registry's other keywords at the configuration's degrees (`degrees`: cp, pp, ep
    and the spmd backend): what b5bcd76c raises on, and what planner does not model, exits 2."""
    field = "config.model_spec"
    attn = kwargs.get("attn_backend")
    cp, pp, ep = degrees["cp"], degrees["pp"], degrees["ep"]
    if cp > 1 and degrees["spmd_backend"] != "spmd_types":
        raise InputError(
            f"{where}: config.parallelism.spmd_backend: {spelled(degrees['spmd_backend'])} with "
            f"context_parallel_degree {cp}: torchtitan raises 'Context Parallel requires "
            "parallelism.spmd_backend=spmd_types' (distributed/context_parallel/api.py:24-33, "
            "called from models/common/decoder.py:173-175 at b5bcd76c)"
        )
    if cp > 1 and attn == "varlen":
        raise InputError(
            f"{where}: {field}: attn_backend 'varlen' with context_parallel_degree {cp}: "
            "torchtitan raises 'Context Parallel is not supported with ... VarlenAttention' "
            "(models/common/decoder.py:173-183 at b5bcd76c)"
        )
    gemm = kwargs.get("tp_gemm_backend", "default")
    if gemm != "default":
        raise InputError(
            f"{where}: {field}: tp_gemm_backend {spelled(gemm)}: planner models the TP linears "
            "with separate all-gather / reduce-scatter beside the GEMM ('default'); 'dist_gemm' "
            "folds them into the GEMM over symmetric memory (models common config_utils.py:62-68,"
            " :221-229 at b5bcd76c), which is not modelled"
        )
    if kwargs.get("moe_comm_backend") == "deepep" and ep == 1:
        raise InputError(
            f"{where}: {field}: moe_comm_backend 'deepep' with expert_parallel_degree 1: "
            "torchtitan raises 'requires expert parallelism (expert_parallel_degree > 1)' "
            "(models/common/token_dispatcher.py:1237-1241 at b5bcd76c)"
        )
    mtp = kwargs.get("num_mtp_layers", 0)
    if not isinstance(mtp, int) or isinstance(mtp, bool) or not 0 <= mtp <= MAX_LAYERS:
        raise InputError(
            f"{where}: {field}: num_mtp_layers: expected an int in 0..{MAX_LAYERS} (got "
            f"{spelled(mtp)})"
        )
    if mtp and (pp > 1 or cp > 1):
        what = "pipeline" if pp > 1 else "context"
        raise InputError(
            f"{where}: {field}: num_mtp_layers {spelled(mtp)} with {what} parallelism: "
            f"torchtitan raises 'MTP does not support {what} parallelism yet.' "
            "(models/deepseek_v3/mtp.py:196-206 at b5bcd76c)"
        )


def mtp_loss(where: str, loss: Any, mtp: int) -> None:
    """The configuration's loss (`loss`, its record) beside `mtp` MTP depths: b5bcd76c's MTP
    decoder returns a list of logits, the main and one per depth, that only MTPLoss takes
    (models/deepseek_v3/mtp.py:267-275, :336-358), and refuses the chunked loss's skipped LM head
    (:268-272); MTPLoss raises without MTP layers (:346-358)."""
    callee = getattr(loss, "callee", "")
    is_mtp = callee.endswith("MTPLoss.Config")
    if mtp and callee.endswith("ChunkedLossWrapper.Config"):
        raise InputError(
            f"{where}: config.loss: ChunkedLossWrapper with num_mtp_layers {mtp}: torchtitan "
            "raises 'skip_lm_head is not supported with MTP decoder until ChunkedLoss supports "
            "MTP outputs.' (models/deepseek_v3/mtp.py:268-272 at b5bcd76c); set MTPLoss.Config"
        )
    if mtp and not is_mtp:
        raise InputError(
            f"{where}: config.loss: {callee} with num_mtp_layers {mtp}: the MTP decoder returns "
            "a list of logits (models/deepseek_v3/mtp.py:267-275 at b5bcd76c) that only "
            "MTPLoss takes; set MTPLoss.Config"
        )
    if is_mtp and not mtp:
        raise InputError(
            f"{where}: config.loss: MTPLoss without num_mtp_layers: torchtitan raises 'MTPLoss "
            "expects a list of predictions' (models/deepseek_v3/mtp.py:346-350 at b5bcd76c)"
        )


def loss_table(where: str, loss: Any, mtp: int, kwarg: Callable[..., Any]) -> dict[str, Any]:
    """The loss table of a configuration's `config.loss` record (`loss`) beside `mtp` MTP depths
    (`mtp_loss`): ChunkedLossWrapper's num_chunks (default 8), 1 for a plain CrossEntropyLoss or
    MTPLoss, and MTPLoss's mtp_scale (default 0.3, mtp.py:326); `kwarg` reads a keyword
    argument (`torchtitan_tables.Document.kwarg`)."""
    mtp_loss(where, loss, mtp)
    if loss.callee.endswith("ChunkedLossWrapper.Config"):
        chunks = kwarg(loss, "num_chunks", 8, "config.loss.num_chunks")
        if isinstance(chunks, int) and not isinstance(chunks, bool) and chunks >= 1:
            return {"num_chunks": chunks}
        raise InputError(
            f"{where}:{loss.line}: config.loss: num_chunks: expected a positive int "
            f"(got {spelled(chunks)})"
        )
    if loss.callee.endswith("CrossEntropyLoss.Config"):
        return {"num_chunks": 1}
    if loss.callee.endswith("MTPLoss.Config"):
        scale = kwarg(loss, "mtp_scale", 0.3, "config.loss.mtp_scale", (int, float))
        if isinstance(scale, bool) or not 0 <= scale < math.inf:
            raise InputError(
                f"{where}: config.loss.mtp_scale: expected a finite number >= 0 (got "
                f"{spelled(scale)})"
            )
        return {"num_chunks": 1, "mtp_scale": float(scale)}
    why = " (torchtitan's abstract default: set config.loss)" if "BaseLoss" in loss.callee else ""
    raise InputError(
        f"{where}: config.loss: planner models ChunkedLossWrapper, CrossEntropyLoss and MTPLoss "
        f"(got {loss.callee}{why})"
    )


OPTIMIZER_IMPLEMENTATIONS = ("for-loop", "foreach", "fused", "fused_opt_states_bf16")
"""OptimizersContainer.Config.implementation (b5bcd76c components/optimizer/optimizer.py:
109-111)."""


def optimizer_states(where: str, implementation: Any, optimizer: Any) -> str:
    """The AdamW moments' dtype ("fp32" or "bf16") the optimizer keeps: "fused_opt_states_bf16"
    creates exp_avg and exp_avg_sq in bfloat16 (b5bcd76c components/optimizer/optimizer.py:
    109-123, :332-371); a DistMuon parameter group (optimizer.py:144-146) of an
    OptimizersContainer.Config record (`optimizer`; default_adamw's group is AdamW) is refused:
    planner models Muon for Megatron-LM only."""
    field = "config.optimizer"
    callee = getattr(optimizer, "callee", "")
    param_groups = None
    if callee.endswith("OptimizersContainer.Config"):
        param_groups = optimizer.kwargs.get("param_groups")
    if implementation not in OPTIMIZER_IMPLEMENTATIONS:
        raise InputError(
            f"{where}: {field}.implementation: {spelled(implementation)}: torchtitan takes "
            f"{', '.join(OPTIMIZER_IMPLEMENTATIONS)} (components/optimizer/optimizer.py:109-111)"
        )
    for group in param_groups if isinstance(param_groups, list) else []:
        name = getattr(group, "kwargs", {}).get("optimizer_name")
        if name not in (None, "AdamW", "Adam"):
            raise InputError(
                f"{where}: {field}.param_groups: optimizer_name {spelled(name)}: planner models "
                "torchtitan's Adam and AdamW (Muon is modelled for Megatron-LM only)"
            )
    return "bf16" if implementation == "fused_opt_states_bf16" else "fp32"


BELOW_SM90 = ("a100", "l40s")
"""Catalog NVIDIA GPUs of compute capability below 9.0 (A100 8.0, L40S 8.9)."""


def symm_mem(where: str, on: Any, gpu: str) -> None:
    """parallelism.enable_fsdp_symm_mem on an NVIDIA GPU below compute capability 9.0: torchtitan
    raises (b5bcd76c config/configs.py:270-280)."""
    if on is True and gpu.startswith(BELOW_SM90):
        raise InputError(
            f"{where}: config.parallelism.enable_fsdp_symm_mem: True on {gpu}: torchtitan raises "
            "'only supported for compute capability 9.0 or newer' (config/configs.py:270-280 at "
            "b5bcd76c)"
        )


def float8_emulate(where: str, field: str, emulate: Any) -> None:
    """Float8 `emulate` (test-only emulation, b5bcd76c components/quantization/float8.py:68-72,
    :116-117): planner times float8 on float8 tensor cores, which emulation does not use."""
    if emulate:
        raise InputError(
            f"{where}: {field}: {spelled(emulate)}: float8 emulation (for tests, no float8 "
            "GEMMs: components/quantization/float8.py:68-72, :116-117 at b5bcd76c) is not "
            "modelled; planner times hardware float8"
        )


def toml_era(where: str, doc: dict[str, Any], pp: int, ep: int) -> None:
    """A TOML's settings e347b1e5 raises on or planner does not model: [fault_tolerance] enable
    (torchft replica groups), optimizer.name other than Adam / AdamW (components/optimizer.py:
    314-319), early_step_in_backward (raises with EP or PP, :279-286; otherwise it frees each
    gradient at its backward, which planner does not model), a float8 recipe_name beside
    enable_fsdp_float8_all_gather (components/quantization/float8.py:65-69); DualPipeV's EP / PP
    overlap (on by default, job_config.py:420): raises beside activation checkpointing
    (distributed/dual_pipe_v.py:32-51), otherwise runs an overlap planner does not model."""
    if (doc.get("fault_tolerance") or {}).get("enable", False):
        raise InputError(
            f"{where}: fault_tolerance.enable: true: torchft's replica groups (job_config.py "
            "FaultTolerance, :885, at e347b1e5) are not modelled"
        )
    opt = doc.get("optimizer") or {}
    name = opt.get("name", "AdamW")
    if name not in ("Adam", "AdamW"):
        raise InputError(
            f"{where}: optimizer.name: {spelled(name)}: torchtitan raises 'Optimizer ... not "
            "added' (components/optimizer.py:314-319 at e347b1e5: Adam and AdamW)"
        )
    implementation = opt.get("implementation", "fused")
    if implementation not in ("for-loop", "foreach", "fused"):
        raise InputError(
            f"{where}: optimizer.implementation: {spelled(implementation)}: torchtitan asserts "
            "for-loop, foreach or fused (components/optimizer.py:298 at e347b1e5)"
        )
    if opt.get("early_step_in_backward", False):
        why = (
            f"torchtitan raises 'not supported with {'Pipeline' if pp > 1 else 'Expert'} "
            "Parallel' (components/optimizer.py:279-286 at e347b1e5)"
            if pp > 1 or ep > 1
            else "the optimizer step in the backward (each gradient freed at once) is not modelled"
        )
        raise InputError(f"{where}: optimizer.early_step_in_backward: true: {why}")
    par = doc.get("parallelism") or {}
    schedule = str(par.get("pipeline_parallel_schedule", "1F1B")).lower()
    overlap = par.get("pipeline_parallel_expert_parallel_overlap", True)
    if pp > 1 and ep > 1 and schedule == "dualpipev" and overlap:
        mode = (doc.get("activation_checkpoint") or {}).get("mode", "selective")
        why = (
            f"with activation_checkpoint.mode {spelled(mode)} torchtitan raises 'Expert "
            "Parallel with DualPipeV and Activation Checkpointing cannot be used together' "
            "(distributed/dual_pipe_v.py:32-51 at e347b1e5)"
            if mode != "none"
            else "the EP / PP communication overlap it runs (distributed/dual_pipe_v.py at "
            "e347b1e5) is not modelled"
        )
        raise InputError(
            f"{where}: parallelism.pipeline_parallel_expert_parallel_overlap: true (the "
            f"default, job_config.py:420) with DualPipeV, pp {pp} and ep {ep}: {why}; set it "
            "false"
        )
    float8 = ((doc.get("quantize") or {}).get("linear") or {}).get("float8") or {}
    if "recipe_name" in float8 and float8.get("enable_fsdp_float8_all_gather", False):
        raise InputError(
            f"{where}: quantize.linear.float8.recipe_name: {spelled(float8['recipe_name'])} "
            "beside enable_fsdp_float8_all_gather = true: torchtitan asserts they are not given "
            "together (components/quantization/float8.py:65-69 at e347b1e5)"
        )
    float8_emulate(where, "quantize.linear.float8.emulate", float8.get("emulate", False))
