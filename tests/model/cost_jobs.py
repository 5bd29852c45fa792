"""The job the test_cost*.py files price: a zoo model on a catalog GPU, with the inter-node
bandwidth optionally overridden."""

from __future__ import annotations

from planner.inputs import catalog
from planner.inputs.hardware import ClusterSpec
from planner.inputs.plan import Job


def job(
    model: str = "llama3.1-8b",
    gpu: str = "h100-sxm-80gb",
    num_gpus: int = 64,
    seq: int = 4096,
    gbs: int = 512,
    precision: str = "bf16",
    ib_gb_per_s: float | None = None,
) -> Job:
    spec = catalog.get_gpu(gpu)
    tiers = spec.tiers
    if ib_gb_per_s is not None:
        tiers = (tiers[0], tiers[1].model_copy(update={"bandwidth_gb_per_s_per_gpu": ib_gb_per_s}))
    cluster = ClusterSpec(
        gpu=spec, num_gpus=num_gpus, gpus_per_node=8, memory_gib=spec.memory_gib, tiers=tiers
    )
    return Job(
        arch=catalog.get_model(model),
        cluster=cluster,
        seq_length=seq,
        global_batch_size=gbs,
        precision=precision,  # type: ignore[arg-type]
    )
