"""The host-memory lines of `check` and `explain` (`planner.model.host_memory`): what a GPU's
process pins for offloading against its share of the node's host memory."""

from __future__ import annotations

from rich.markup import escape

from planner.cli.render import gib
from planner.inputs.plan import Job
from planner.inputs.units import against, over
from planner.model.host_memory import HOST_RESERVED_GIB_PER_GPU, HostMemory


def host_line(job: Job, host: HostMemory) -> str | None:
    """One line (rich markup) where the plan pins anything (offloads, or stages checkpoint
    saves): the pinned host bytes a GPU,
    their parts, the budget and, where it is over, by how much (on pools, the pool with the
    least headroom: `HostMemory.pool`); None where nothing is offloaded."""
    if host.total <= 0:
        return None
    parts = [f"{what} {gib(b)}" for what, b in host.parts()]
    share = f"{gib(host.share)} GiB a GPU's share of its node's host memory"
    if host.pool:
        share += f" in pool {host.pool!r}"
    if host.assumed:
        where = escape(f"[[cluster.pools]] {host.pool!r}" if host.pool else "[cluster]")
        share += (
            f" (assumed: {host.gpu or job.cluster.gpu.name} has no host memory in the catalog; "
            f"set {where} host_memory_gib_per_node)"
        )
    total, cap = against(host.total, host.capacity)  # told apart where they differ
    budget = f"{cap} GiB usable ({share}, less {HOST_RESERVED_GIB_PER_GPU:g} GiB for the process)"
    pinned = f"{total} GiB pinned a GPU ({', '.join(parts)})"
    if host.fits:
        return f"host memory: {pinned} of {budget}"
    return (
        f"[red]does not fit in host memory[/]: {pinned} of {budget}, "
        f"{over(host.shortfall)} over; offload less (fewer layers or modules, or a smaller "
        "optimizer_offload_fraction), spread the checkpoint over more GPUs, or set the node's "
        "host_memory_gib_per_node"
    )
