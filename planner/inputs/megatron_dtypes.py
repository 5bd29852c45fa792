"""The dtypes a Megatron-LM line trains with (for `megatron_training`): how --fp16 and fp32 (neither
--bf16 nor --fp16) are read, the gradient buffers' and Adam moments' dtypes, and the CPU-offloaded
optimizer. Flag names and meanings: Megatron-LM d98e8a64 (`megatron/training/arguments.py`)."""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.megatron_line import Line

FP32_NOTE = (
    "neither --bf16 nor --fp16: fp32 training (fp32 weights, gradients and activations, GEMMs in "
    "TF32, attention unfused; arguments.py:1194 params_dtype torch.float)"
)


FP32_QUANTISED_NOTE = (
    "neither --bf16 nor --fp16: fp32 parameters, gradients and activations around the quantised "
    "GEMMs (params_dtype fp32; attention unfused; arguments.py:1194 params_dtype torch.float)"
)


def fp16_note(line: Line) -> str:
    """How --fp16 is read: fp16 parameters (precision fp16, or params_dtype fp16 under FP8 /
    NVFP4), its gradient buffers 16-bit unless --accumulate-allreduce-grads-in-fp32
    (`optimizer_dtypes`; Megatron-FSDP's own flag decides there)."""
    note = "--fp16: fp16 parameters and activations (dynamic loss scaling)"
    if line.has("--use-megatron-fsdp"):
        return note
    if line.has("--accumulate-allreduce-grads-in-fp32"):
        return f"{note}; gradient buffers fp32 (--accumulate-allreduce-grads-in-fp32)"
    return (
        f"{note}; gradient buffers 16-bit: Megatron keeps them in the parameters' dtype, fp32 "
        "only with --accumulate-allreduce-grads-in-fp32, which validate_args turns on for "
        "--bf16 alone (arguments.py:1204-1217, d98e8a64)"
    )


def optimizer_dtypes(line: Line) -> dict[str, Any]:
    """Gradient buffers and Adam moments. The buffers are fp32 where Megatron's
    accumulate_allreduce_grads_in_fp32 holds, else the parameters' dtype (training.py:2635
    passes it as DistributedDataParallelConfig.grad_reduce_in_fp32, default False,
    distributed_data_parallel_config.py:15; param_and_grad_buffer.py:924 `torch.float if
    grad_reduce_in_fp32 else param.dtype`; Megatron-LM d98e8a64). validate_args turns it on
    only under --bf16 (arguments.py:1204-1217), unless --grad-reduce-in-bf16, or --main-grads-dtype
    bf16 (with the precision-aware optimizer, the only one that takes it), and asserts
    --main-grads-dtype fp32 where --accumulate-allreduce-grads-in-fp32 is given (:1209-1211). So
    --bf16 gives fp32 buffers unless one of those two, and --fp16 16-bit (fp16, main_grad_dtype
    "bf16": the same bytes) unless --accumulate-allreduce-grads-in-fp32 (--grad-reduce-in-bf16
    and --main-grads-dtype change nothing there). Without --bf16 / --fp16 (fp32, FP8 / FP4 or
    not) the parameters and so the buffers are fp32 whatever those flags say. Megatron-FSDP's grads
    default to the parameters' dtype (--megatron-fsdp-main-grads-dtype auto:
    DistributedDataParallelConfig.megatron_fsdp_main_grads_dtype = None, resolved in
    megatron_fsdp/param_and_grad_buffer.py `_resolve_group_grad_dtype`), fp32 in fp32 training
    (an explicit bf16 there is counted fp32 too: the safe side). Its unsharded gradient buckets
    take --megatron-fsdp-grad-comm-dtype where not 'auto' (arguments.py:1093 maps 'auto' to None;
    fetched in that dtype, param_and_grad_buffer.py:3107-3111): `Job.fsdp_grad_comm_dtype`."""
    out: dict[str, Any] = {}
    aware = line.has("--use-precision-aware-optimizer")
    distributed = line.has("--use-distributed-optimizer") or line.has("--use-megatron-fsdp")
    if aware and not distributed:  # validate_args turns it on under Megatron-FSDP
        raise InputError(
            f"{line.where}: --use-precision-aware-optimizer: only with the distributed optimizer "
            "(Megatron-LM d98e8a64 megatron/core/optimizer/__init__.py:1057-1060 raises "
            "ValueError without it); add --use-distributed-optimizer"
        )
    accumulate = line.has("--accumulate-allreduce-grads-in-fp32")
    main_bf16 = line.text("--main-grads-dtype") == "bf16"
    fp32 = not (line.has("--bf16") or line.has("--fp16"))
    if line.has("--fp16"):
        bf16_grads = not accumulate
    elif fp32:
        bf16_grads = False
    else:
        if accumulate and main_bf16 and line.has("--bf16"):
            raise InputError(
                f"{line.where}: --accumulate-allreduce-grads-in-fp32: not with --main-grads-dtype "
                "bf16 (Megatron-LM d98e8a64 validate_args asserts --main-grads-dtype fp32 under "
                "--bf16, arguments.py:1209-1211)"
            )
        bf16_grads = line.has("--grad-reduce-in-bf16") or (aware and main_bf16)
    if line.has("--use-megatron-fsdp"):
        fsdp = line.text("--megatron-fsdp-main-grads-dtype") or "auto"
        bf16_grads = fsdp != "fp32" and not fp32
        comm = line.text("--megatron-fsdp-grad-comm-dtype") or "auto"
        if comm != "auto":
            out["fsdp_grad_comm_dtype"] = comm
    if bf16_grads:
        out["main_grad_dtype"] = "bf16"
    if aware:
        out.update(_moments(line))
    out.update(_optimizer_offload(line, aware))
    if out.get("optimizer_state_dtype") == "fp32":  # the host optimizer's, all on the GPU
        out.pop("exp_avg_dtype", None)
        out.pop("exp_avg_sq_dtype", None)
    if aware and not line.has("--optimizer-cpu-offload"):
        moments = ("optimizer_state_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
        out.update(_master(line, any(m in out for m in moments)))
    return out


def _moments(line: Line) -> dict[str, Any]:
    """--exp-avg-dtype and --exp-avg-sq-dtype (each fp32 by default, choices fp32, fp16, bf16,
    fp8: arguments.py:3675-3684; Megatron passes them to TE FusedAdam, which keeps each state in
    its dtype): both 16-bit as optimizer_state_dtype bf16 (fp16's are 2 bytes too), otherwise
    each moment not in fp32 as its own field (`Job.moment_dtypes`)."""
    moments = [line.text(f) or "fp32" for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype")]
    if all(m in ("bf16", "fp16") for m in moments):
        return {"optimizer_state_dtype": "bf16"}
    names = ("exp_avg_dtype", "exp_avg_sq_dtype")
    return {name: m for name, m in zip(names, moments, strict=True) if m != "fp32"}


def _master(line: Line, bf16_moments: bool) -> dict[str, Any]:
    """The precision-aware optimizer on the GPU: its fp16 master (--main-params-dtype fp16,
    which Megatron-FSDP replaces by its own --megatron-fsdp-main-params-dtype, arguments.py
    help), and the flag itself where neither the moments nor the master say it
    (`Job.use_precision_aware_optimizer`: fp32 moments, the master's 16-bit remainder,
    gradients read in place)."""
    out: dict[str, Any] = {}
    if line.text("--main-params-dtype") == "fp16" and not line.has("--use-megatron-fsdp"):
        out["main_params_dtype"] = "fp16"
    elif not bf16_moments:
        out["use_precision_aware_optimizer"] = True
    return out


def _optimizer_offload(line: Line, aware: bool) -> dict[str, Any]:
    """--optimizer-cpu-offload: the share --optimizer-offload-fraction (argparse default 1.0) of
    the optimizer on the host, with --overlap-cpu-optimizer-d2h-h2d or not; Megatron-LM d98e8a64
    validate_args asserts the precision-aware optimizer with it (its other asserts are the plan's
    rules: `planner.search.rules.optimizer.optimizer_offload`)."""
    flag = "--optimizer-cpu-offload"
    if not line.has(flag):
        return {}
    if not aware:
        raise InputError(
            f"{line.where}: {flag}: needs --use-precision-aware-optimizer (Megatron-LM asserts "
            "it: the host optimizer reuses that path)"
        )
    fraction = line.number("--optimizer-offload-fraction")
    fraction = 1.0 if fraction is None else min(max(fraction, 0.0), 1.0)  # a share of the count
    out: dict[str, Any] = {
        "optimizer_offload_fraction": fraction,
        "optimizer_offload_overlap": line.has("--overlap-cpu-optimizer-d2h-h2d"),
    }
    if fraction == 0:  # all on the GPU, in the host optimizer's fp32 copies and moments
        out["optimizer_state_dtype"] = "fp32"
    return out


def fp8_wgrad_note(line: Line, fp8: bool) -> str | None:
    """How --no-fp8-wgrad / --disable-fp8-wgrad (fp8_wgrad False, d98e8a64
    transformer_config.py:631) is read: as a no-op, its note saying why; None when absent.
    Megatron-LM passes it only to the delayed-scaling recipe, as `override_linear_precision=(False,
    False, not fp8_wgrad)` (fp8_utils.py:772-776, TE >= 2.1; :805-809 before); the tensorwise,
    blockwise, mxfp8 and custom recipes (:777-792) never take it. Transformer Engine from 2.0
    (544dd14b4) has no such field in DelayedScaling (recipe/__init__.py, a pydantic dataclass that
    drops the keyword) and no module reads it, so the wgrad GEMM stays FP8 and TE keeps the
    quantised input for it (linear.py d0067d0d:619-621)."""
    flag = next((f for f in ("--no-fp8-wgrad", "--disable-fp8-wgrad") if line.has(f)), None)
    if flag is None:
        return None
    if not fp8:
        return f"{flag}: no effect without --fp8-format (fp8_utils.py:772-776 reads it in FP8 only)"
    recipe = line.text("--fp8-recipe") or "delayed"  # TransformerConfig's default recipe
    why = (
        "Transformer Engine 2.0 and later dropped DelayedScaling's override_linear_precision, "
        "which is all Megatron-LM passes it to (fp8_utils.py:772-776): the weight-gradient GEMM "
        "stays FP8 on the TE >= 2.1 planner models"
        if recipe == "delayed"
        else f"Megatron-LM passes it only to delayed scaling (fp8_utils.py:772-776), not to the "
        f"{recipe} recipe (:777-792)"
    )
    return f"{flag}: read as a no-op: {why}"
