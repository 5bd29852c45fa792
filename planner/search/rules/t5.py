"""The layouts a T5 job runs on (`Job.t5_encoder`, `planner.model.t5`): one pipeline rank
(Megatron-LM d98e8a64's T5 example, pretrain_t5.py in examples, t5, raises "Pipeline
parallelism is not supported for T5.") and, as planner models it, no context parallelism (the T5
model's padding masks; its cross-attention's keys are the encoder's whole sequence)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def t5_scope(job: Job, lay: Layout) -> Violation | None:
    if job.t5_encoder is None:
        return None
    if lay.pp > 1:
        return Violation(
            "t5_scope",
            "parallel.pp",
            f"pp {lay.pp}: Megatron-LM's T5 (training.t5_encoder) runs on one pipeline rank "
            "(pretrain_t5.py: 'Pipeline parallelism is not supported for T5.')",
        )
    if lay.cp > 1:
        return Violation(
            "t5_scope",
            "parallel.cp",
            f"cp {lay.cp}: planner models T5 (training.t5_encoder) without context parallelism",
        )
    return None
