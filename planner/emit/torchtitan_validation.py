"""torchtitan's validator in the two launch targets, for a plan with `[torchtitan]
validation_batch` (the forward after a step whose memory `planner.model.titan_validation`
counts).

- The TOML job config (pytorch/torchtitan e347b1e5): `[validation]` enable, local_batch_size and
  seq_len (config/job_config.py:951, :960, :963), the plan's batch and length (`toml_table`).
- The Python configuration (b5bcd76c): `config.validator` (a Validator.Config, trainer.py:113;
  enable, components/validate.py:81) has no batch or length of its own: the trainer builds it
  with the training's tokens per micro-batch per DP rank at its max_context_length (trainer.py
  :558, :593-617), a pipeline schedule's micro-batches at a time (validate.py:230-240), as
  `planner.inputs.torchtitan_batches` reads it back. A plan whose validation is another batch
  or length is refused there, naming the field (`module_refusal`).
"""

from __future__ import annotations

from typing import Any

from planner.inputs.errors import InputError
from planner.inputs.plan import Plan


def toml_table(plan: Plan) -> dict[str, Any]:
    """The `[validation]` table of the plan's validation (e347b1e5 job_config.py:950-966)."""
    titan = plan.job.titan
    return {
        "enable": True,
        "local_batch_size": titan.validation_batch,
        "seq_len": titan.validation_seq_len,
    }


def module_batch(plan: Plan) -> int:
    """The sequences a DP rank's validator runs at once under the Python configuration: the
    training's micro-batch, or under pipelining one schedule's num_pp_microbatches of them (the
    module writes num_pp_microbatches = global / (dp x gradient_accumulation_steps) / mbs)."""
    job, lay = plan.job, plan.require_layout()
    mbs = lay.micro_batch_size
    if lay.pp == 1:
        return mbs
    schedule = job.global_batch_size // (lay.dp * job.titan.gradient_accumulation_steps)
    return schedule // mbs * mbs


def module_refusal(plan: Plan, commit: str) -> InputError | None:
    """The refusal of a validation the Python configuration cannot carry (module docstring):
    a validation_batch other than `module_batch`, a validation_seq_len other than seq_length."""
    job, titan = plan.job, plan.job.titan
    if not titan.validation_batch:
        return None
    where = str(plan.path) if plan.path else "<plan>"
    runs = f"torchtitan {commit[:8]} validates on the training's batches (trainer.py:558, :593-617)"
    toml = "or write the TOML job config (launch --target torchtitan)"
    local = module_batch(plan)
    if titan.validation_batch != local:
        return InputError(
            f"{where}: torchtitan.validation_batch: {titan.validation_batch}: {runs}, here "
            f"{local} per DP rank; set validation_batch = {local}, {toml}"
        )
    if titan.validation_seq_len != job.seq_length:
        return InputError(
            f"{where}: torchtitan.validation_seq_len: {titan.validation_seq_len}: {runs}, at its "
            f"max_context_length {job.seq_length}; set validation_seq_len = {job.seq_length}, "
            f"{toml}"
        )
    return None
