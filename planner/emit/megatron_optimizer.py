"""Megatron-LM's optimizer arguments for a plan, part of `planner.emit.megatron`'s training
arguments: bf16 Adam moments are `--use-precision-aware-optimizer` with `--exp-avg(-sq)-dtype
bf16`, and with bf16 gradients `--main-grads-dtype bf16` (which Megatron allows only with that
optimizer); the CPU-offloaded optimizer (`Job.optimizer_offload_fraction`) is
`--optimizer-cpu-offload --optimizer-offload-fraction` (with the precision-aware optimizer it
asserts, and `--overlap-cpu-optimizer-d2h-h2d` where the plan pipelines it); Muon (`Job.optimizer`)
is `--optimizer muon` with its knobs where the plan leaves Megatron's defaults."""

from __future__ import annotations

from planner.emit.megatron_model import Arg
from planner.inputs.errors import InputError
from planner.inputs.plan import Plan


def needs_distributed_optimizer(plan: Plan, field: str, flag: str, remedy: str) -> None:
    """Refuse a plan whose `field` asks for a Megatron flag that needs the distributed optimizer
    or FSDP at zero_stage 0 (Megatron asserts it), saying how to mend it (`remedy`)."""
    if plan.require_layout().zero_stage == 0:
        raise InputError(
            f"{plan.path}: training.{field}: Megatron's {flag} needs the distributed optimizer "
            f"or FSDP (zero_stage >= 1, got 0); {remedy} or raise zero_stage"
        )


def optimizer_args(plan: Plan) -> list[Arg]:
    """The optimizer's flags (module docstring); refuses what Megatron would (the
    precision-aware optimizer without the distributed optimizer or FSDP)."""
    lay, job = plan.require_layout(), plan.job
    a: list[Arg] = []
    if job.precision_aware_optimizer:
        needs_distributed_optimizer(
            plan,
            "optimizer_state_dtype",
            "--use-precision-aware-optimizer",
            "set optimizer_state_dtype = 'fp32'",
        )
        a.append(("--use-precision-aware-optimizer",))
        if job.main_grad_dtype == "bf16" and job.params_dtype == "bf16":
            # the optimizer's gradients in bf16 too (its --main-grads-dtype defaults to fp32;
            # Megatron asserts it is fp32 without the precision-aware optimizer); fp16's are
            # 16-bit without it (validate_args reads it under --bf16 only, arguments.py:1204)
            a.append(("--main-grads-dtype", "bf16"))
        for flag, dtype in zip(
            ("--exp-avg-dtype", "--exp-avg-sq-dtype"), job.moment_dtypes, strict=True
        ):
            if dtype != "fp32":  # each moment as planned (Job.moment_dtypes)
                a.append((flag, dtype))
        if job.main_params_dtype == "fp16":  # TE's fp16 master (planner.model.adam_step)
            a.append(("--main-params-dtype", "fp16"))
    if job.optimizer_offload_fraction > 0:  # the host optimizer, which asks for the above
        a += [
            ("--optimizer-cpu-offload",),
            ("--optimizer-offload-fraction", repr(job.optimizer_offload_fraction)),
        ]
        if job.optimizer_offload_overlap:
            a.append(("--overlap-cpu-optimizer-d2h-h2d",))
    if job.optimizer == "muon":
        # with --use-distributed-optimizer (zero_stage 1) validate_args makes it the layer-wise
        # distributed optimizer; its legacy whole-parameter dealing where the plan says so
        a.append(("--optimizer", "muon"))
        if job.muon_whole_params and lay.zero_stage == 1:
            a.append(("--no-use-layer-wise-param-layout",))
        a += _muon_knobs(plan)
    return a


MUON_PRECISION_FLAG = ("medium", "high")
"""The `Job.muon_matmul_precision` values Megatron-LM's --muon-fp32-matmul-prec takes (choices
low, medium, high: no "highest")."""


def _muon_knobs(plan: Plan) -> list[Arg]:
    """Muon's knobs where the plan leaves Megatron's defaults (5 iterations, duplicated TP mode,
    Q / K / V apart, medium precision, plain momentum)."""
    job = plan.job
    a: list[Arg] = []
    if job.muon_ns_steps != 5:
        a.append(("--muon-num-ns-steps", str(job.muon_ns_steps)))
    if job.muon_tp_mode != "duplicated":
        a.append(("--muon-tp-mode", job.muon_tp_mode))
    if not job.muon_split_qkv:
        a.append(("--muon-no-split-qkv",))
    if job.muon_nesterov:
        a.append(("--muon-nesterov",))
    if job.muon_matmul_precision not in MUON_PRECISION_FLAG:
        raise InputError(
            f"{plan.path}: training.muon_matmul_precision: Megatron-LM's --muon-fp32-matmul-prec "
            f"takes low, medium or high (got {job.muon_matmul_precision!r}; Megatron-Bridge's "
            "optimizer.muon_fp32_matmul_prec takes it)"
        )
    if job.muon_matmul_precision != "medium":
        a.append(("--muon-fp32-matmul-prec", job.muon_matmul_precision))
    return a
