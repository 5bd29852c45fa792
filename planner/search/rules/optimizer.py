"""Megatron-LM's rules on the optimizer: Muon (an emerging optimizer) and the CPU-offloaded
optimizer (`Job.optimizer_offload_fraction`). Sources: Megatron-LM d98e8a64 validate_args
(megatron/training/arguments.py) and megatron/core/optimizer/__init__.py."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def muon(job: Job, lay: Layout) -> Violation | None:
    """--optimizer muon (an "emerging optimizer"): validate_args asserts it runs without
    Megatron-FSDP (Megatron-LM d98e8a64 arguments.py, the emerging optimizer check); planner
    launches it with Megatron-LM only."""
    if job.optimizer != "muon":
        return None
    if job.framework == "torchtitan":
        return Violation(
            "muon", "training.optimizer", "optimizer = muon is planned for Megatron-LM only"
        )
    if lay.use_torch_fsdp2:  # arguments.py:1739 @d98e8a64, as the next for Megatron-FSDP
        return Violation(
            "muon",
            "parallel.use_torch_fsdp2",
            "optimizer = muon does not run with Torch-FSDP2 (Megatron's validate_args "
            "asserts): drop use_torch_fsdp2 and use zero_stage 0 or 1",
        )
    if lay.zero_stage >= 2:
        return Violation(
            "muon",
            "parallel.zero_stage",
            f"optimizer = muon does not run with Megatron-FSDP (zero_stage {lay.zero_stage}; "
            "Megatron's validate_args asserts): use zero_stage 0 or 1",
        )
    if job.precision_aware_optimizer:  # optimizer_config.py:434-436 @d98e8a64
        return Violation(
            "muon",
            "training.optimizer",
            "optimizer = muon with the precision-aware optimizer (bf16 moments, an fp16 master, "
            "use_precision_aware_optimizer or the CPU-offloaded optimizer): Megatron's "
            "OptimizerConfig asserts it runs with Adam only",
        )
    return None


def optimizer_offload(job: Job, lay: Layout) -> Violation | None:
    """--optimizer-cpu-offload: validate_args asserts --use-precision-aware-optimizer, which
    get_megatron_optimizer refuses without the distributed optimizer (zero_stage >= 1), and FP8
    parameter gathers only with the delayed recipe; its host optimizer is Adam (or SGD: Muon is
    not among them); torchtitan has no such optimizer."""
    if job.optimizer_offload_fraction <= 0:
        return None
    field = "training.optimizer_offload_fraction"
    f = job.optimizer_offload_fraction
    if job.framework == "torchtitan":
        return Violation(
            "optimizer_offload",
            field,
            f"optimizer_offload_fraction = {f} is Megatron-LM's --optimizer-cpu-offload; "
            "torchtitan's CPU offload (FSDP2's CPUOffloadPolicy) is not planned: leave it 0",
        )
    if job.optimizer == "muon":
        return Violation(
            "optimizer_offload",
            field,
            f"optimizer_offload_fraction = {f} with optimizer = muon: Megatron's host optimizer "
            "is Adam or SGD only",
        )
    if lay.zero_stage < 1:
        return Violation(
            "optimizer_offload",
            "parallel.zero_stage",
            f"optimizer_offload_fraction = {f} needs Megatron's precision-aware optimizer, which "
            "runs with the distributed optimizer or FSDP only (zero_stage >= 1, got 0)",
        )
    if job.precision == "fp8" and job.fp8_param_gather and job.fp8_recipe != "delayed":
        return Violation(
            "optimizer_offload",
            "training.fp8_param_gather",
            f"optimizer_offload_fraction = {f} with fp8_param_gather needs fp8_recipe "
            f'"delayed" (Megatron validate_args; got "{job.fp8_recipe}"): set fp8_param_gather '
            "= false",
        )
    return None
