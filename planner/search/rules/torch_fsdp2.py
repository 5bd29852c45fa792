"""Megatron-LM's torch FSDP2 (`Layout.use_torch_fsdp2`): where Megatron-LM d98e8a64 refuses it.
A rule rather than an input check, so `check`'s advice never proposes a change (pp, ep,
zero_stage) that breaks it."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation

FIELD = "parallel.use_torch_fsdp2"


def torch_fsdp2(job: Job, lay: Layout) -> Violation | None:
    """validate_args' asserts under --use-torch-fsdp2 (arguments.py:1031-1047): pipeline and
    expert parallel sizes 1, no distributed optimizer (so ZeRO 3: the plan's only stage whose
    parameters are sharded without it; the precision-aware optimizer, which needs it, refused
    by get_megatron_optimizer, optimizer/__init__.py:1057-1060; its instances too), untied
    embeddings, no fp16; Muon refused (arguments.py:1739); torchtitan runs its own FSDP2.
    `torch_fsdp2_reshard_after_forward` false without it: read by nothing (training.py
    :2627-2629 reads it only under --use-torch-fsdp2), refused rather than ignored."""
    if not lay.use_torch_fsdp2:
        if lay.torch_fsdp2_reshard_after_forward:
            return None
        return Violation(
            "torch_fsdp2",
            "parallel.torch_fsdp2_reshard_after_forward",
            "false without use_torch_fsdp2 = true: Megatron reads it only under "
            "--use-torch-fsdp2 (training.py:2627-2629); drop it",
        )
    why = _refused(job, lay)
    if why is None:
        return None
    return Violation("torch_fsdp2", FIELD, f"true, but {why}")


def _refused(job: Job, lay: Layout) -> str | None:
    """Why Megatron-LM refuses torch FSDP2 on this job and layout (None: it runs it)."""
    if job.framework != "megatron":
        return f'it is a Megatron-LM setting (framework "{job.framework}" shards with FSDP2 anyway)'
    checks = (
        (lay.pp > 1, f"pp {lay.pp}: not supported with pipeline parallelism (arguments.py:1034)"),
        (lay.ep > 1, f"ep {lay.ep}: not supported with expert parallelism (arguments.py:1036)"),
        (
            lay.zero_stage != 3,
            f"zero_stage {lay.zero_stage}: FSDP2 shards parameters, gradients and optimizer "
            "states (ZeRO 3) and refuses Megatron's distributed optimizer (arguments.py:1038)",
        ),
        (
            job.optimizer_instances > 1,
            f"training.optimizer_instances {job.optimizer_instances}: distributed-optimizer "
            "instances, and FSDP2 refuses the distributed optimizer (arguments.py:1038)",
        ),
        (
            job.precision_aware_optimizer,
            "the precision-aware optimizer (training.use_precision_aware_optimizer, or what "
            "needs it: 16-bit moments or master, the CPU-offloaded optimizer): Megatron-Core "
            "runs it with the distributed optimizer only (optimizer/__init__.py:1057-1060), "
            "which FSDP2 refuses",
        ),
        (
            job.optimizer == "muon",
            "optimizer muon: validate_args asserts an emerging optimizer runs without "
            "Torch-FSDP2 (arguments.py:1739)",
        ),
        (
            not job.arch.untie_embeddings_and_output_weights,
            "the model ties its embedding and output weights (arguments.py:1044-1045 asserts "
            "--untie-embeddings-and-output-weights)",
        ),
        (job.params_dtype == "fp16", "fp16 training: not supported (arguments.py:1046-1047)"),
        (
            job.precision == "fp8" and job.fp8_param_gather,
            "training.fp8_param_gather (true, the default under fp8): Megatron-LM turns it off "
            "under torch FSDP2 with Transformer Engine 2.0 or later, gathering bf16 "
            "(arguments.py:1051-1057); set it false",
        ),
        (
            (job.main_grad_dtype == "fp32") != (job.params_dtype == "fp32"),
            f"training.main_grad_dtype {job.main_grad_dtype!r} with {job.params_dtype} "
            "parameters: FSDP2 without a MixedPrecisionPolicy keeps and reduces the gradients "
            "in the parameters' dtype (torch_fully_sharded_data_parallel.py:82-85)",
        ),
        (
            lay.fsdp_double_buffer
            or lay.suggested_communication_unit_size is not None
            or job.fsdp_grad_comm_dtype is not None,
            "fsdp_double_buffer / suggested_communication_unit_size / fsdp_grad_comm_dtype are "
            "Megatron-FSDP's buffer settings, which torch FSDP2 does not read "
            "(training.py:2627-2629 gives it reshard_after_forward alone)",
        ),
    )
    return next((why for broken, why in checks if broken), None)
