"""The job, layout and performance the test_operations*.py files price: the bundled example and a
step time set to a round number for hand arithmetic.
"""

from __future__ import annotations

from dataclasses import replace

from paths import REPO

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.layout import Layout
from planner.inputs.plan import Job
from planner.model import cost
from planner.model.performance import Performance

EXAMPLE = REPO / "examples" / "llama3.1-8b-h100.toml"


def make_job(model: str = "llama3.1-8b", num_gpus: int = 64, gpu: str = "h100-sxm-80gb") -> Job:
    g = catalog.get_gpu(gpu)
    cluster = ClusterSpec(
        gpu=g, num_gpus=num_gpus, gpus_per_node=g.gpus_per_node, memory_gib=g.memory_gib,
        tiers=g.tiers,
    )  # fmt: skip
    return Job(
        arch=catalog.resolve_model(model), cluster=cluster, seq_length=8192, global_batch_size=128
    )


def perf_with_step(job: Job, layout: Layout, step_time_s: float) -> Performance:
    """A real Performance with its step time set to a round number for hand arithmetic."""
    return replace(cost.estimate(job, layout), step_time_s=step_time_s)


LAYOUT_64 = Layout(tp=2, pp=1, dp=32, sequence_parallel=True)
