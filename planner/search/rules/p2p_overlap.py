"""The interleaved schedule without its p2p overlap (`Layout.overlap_p2p_comm` false, Megatron
--no-overlap-p2p-communication): where Megatron-LM d98e8a64 refuses it. A rule rather than an
input check, so `check`'s advice never proposes a pipeline size that breaks it."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def blocking_pipeline(job: Job, lay: Layout) -> Violation | None:
    """validate_args asserts pp > 2 for the interleaved schedule without the overlap: each
    iteration's batched exchange would otherwise send and receive twice between the same two
    ranks (arguments.py:1000-1009)."""
    if lay.overlap_p2p_comm or lay.vpp == 1 or lay.pp > 2:
        return None
    return Violation(
        "p2p_overlap_pp",
        "parallel.overlap_p2p_comm",
        "the interleaved schedule without p2p overlap needs pipeline_model_parallel_size > 2 "
        f"(got {lay.pp}; arguments.py:1000-1009 asserts it: one batched exchange would send "
        "and receive twice between the same two ranks)",
    )
