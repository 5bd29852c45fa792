"""Jobs and checks shared by the tests of planner.search.rules: a job of a model on GPUs, the
rules a layout breaks, and the check that it breaks none.
"""

from __future__ import annotations

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.inputs.plan_resolve import resolve_cluster
from planner.search.rules import Violation, violations

# llama3.1-8b: 32 layers, 32 heads, 8 query groups, RoPE, dense
# mixtral-8x7b: 32 layers, 32 heads, 8 query groups, 8 experts


def make_job(
    model: str | ModelArch = "llama3.1-8b",
    num_gpus: int = 8,
    seq_length: int = 4096,
    global_batch_size: int = 64,
    gpu: str = "h100-sxm-80gb",
) -> Job:
    arch = catalog.get_model(model) if isinstance(model, str) else model
    cluster = resolve_cluster(ClusterSection(gpu=gpu, num_gpus=num_gpus), None)
    return Job(
        arch=arch, cluster=cluster, seq_length=seq_length, global_batch_size=global_batch_size
    )


def broken(job: Job, layout: Layout) -> dict[str, Violation]:
    found = violations(job, layout)
    return {v.rule: v for v in found}


def assert_ok(job: Job, layout: Layout) -> None:
    assert violations(job, layout) == []
