"""torchtitan with tied word embeddings (`ModelArch.untie_embeddings_and_output_weights` False)
and pipelining: pytorch/torchtitan b5bcd76c raises "Weight tying is not supported with Pipeline
Parallel." (models/common/decoder.py:168-171, NotImplementedError, for any pp degree > 1);
e347b1e5 ties the output layer to the embedding in the model's constructor only
(models/qwen3/model/model.py:465-466) and its pipeline split sets the modules a stage does not
keep to None (distributed/pipeline_parallel.py:429-431), so the last stage's output weight is a
parameter of its own that nothing keeps equal to the first stage's embedding (no all-reduce
between them, unlike Megatron's embedding group): no run of either is what the plan describes. A
rule on pp and the model alone: the search keeps a tied torchtitan model at pp 1."""

from __future__ import annotations

from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.search.rules.base import Violation


def tied_pipeline(job: Job, lay: Layout) -> Violation | None:
    """A torchtitan plan of a model with tied embeddings at pp > 1 (module docstring)."""
    if job.framework != "torchtitan" or lay.pp <= 1:
        return None
    if job.arch.untie_embeddings_and_output_weights:
        return None
    return Violation(
        "tt_tied_pp",
        "parallel.pp",
        f"{lay.pp} with {job.arch.name}'s tied embeddings: torchtitan raises 'Weight tying is "
        "not supported with Pipeline Parallel.' (models/common/decoder.py:168-171 at b5bcd76c; "
        "e347b1e5's pipeline split drops the first stage's embedding from the last stage and "
        "leaves the output weight untied, distributed/pipeline_parallel.py:429-431); pp = 1",
    )
