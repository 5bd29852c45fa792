"""explain's note on a torchtitan plan's FlexAttention (`planner.model.titan_attention`): the
kernel torch.compile generates, timed at cuDNN's fused rates for want of its own, so the step
time is optimistic (`planner.model.known_gaps.in_flex_attention`)."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import titan_attention
from planner.model.known_gaps import in_flex_attention


def flex_text(job: Job, layout: Layout) -> str | None:
    """The note for a plan whose attention is FlexAttention; None otherwise."""
    if not in_flex_attention(job, layout):
        return None
    era = "b5bcd76c" if titan_attention.module_era(job, layout) else "e347b1e5"
    return (
        f"optimistic: torchtitan {era} runs this model's attention as FlexAttention (a Triton "
        "kernel torch.compile generates), timed here at cuDNN's fused-attention rates: no "
        f"published forward and backward FlexAttention rate on {job.cluster.gpu.name} was found, "
        "and the Triton flash kernels run well below cuDNN's on Hopper, so read the attention's "
        "time, and the step's, as a lower bound"
    )
