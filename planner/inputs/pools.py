"""`[[cluster.pools]]`: a heterogeneous cluster resolved into pools (issue 25).

Each pool is a one-kind cluster (`planner.inputs.hardware.Pool`): its catalog GPU, count, and the
overrides a plain `[cluster]` takes, its tiers checked against its own count (a pool whose
outermost tier spans fewer GPUs than it has leaves some of them unreachable: exit 2). The pools
are joined by `[cluster.between_pools]`, one link tier per GPU; left out, it is the slowest of the
pools' own outermost tiers. The job's `cluster` stays one `ClusterSpec` (the first pool's GPU,
every GPU counted) so that what reads it (rules, degrees, the search's bounds) sees the whole
job; what is per stage (memory capacity, compute rates, traffic inside a pool) reads the stage's
pool (`planner.model.pools`).

Every pipeline stage holds tp x cp x dp GPUs, the same in every pool, so a pool holds a whole
number of stages: the GCD of the pool sizes bounds a stage's size, and a cluster needing more
stages than the model has decoder layers has no layout at all.
"""

from __future__ import annotations

import math
from pathlib import Path

from planner.inputs import catalog
from planner.inputs.arch import ModelArch
from planner.inputs.cluster_sections import ClusterSection, PoolSection
from planner.inputs.errors import InputError, spelled
from planner.inputs.files import validate
from planner.inputs.hardware import ClusterSpec, LinkTier, Pool, check_tiers

BETWEEN = "between_pools"
"""The name of the link tier joining pools."""


def check_one_kind(section: ClusterSection, where: str) -> None:
    """A `[cluster]` without pools names its GPU and count, and no link between pools."""
    for name in ("gpu", "num_gpus"):
        if getattr(section, name) is None:
            raise InputError(f"{where}: cluster.{name}: Field required (or give cluster.pools)")
    if section.between_pools is not None:
        raise InputError(f"{where}: cluster.between_pools: needs cluster.pools")


def one_kind(
    section: ClusterSection | PoolSection, path: Path | None, field: str, unreachable: str = ""
) -> ClusterSpec:
    """A catalog GPU, `section.num_gpus` of them, with the section's overrides (gpus_per_node,
    memory_gib, power_limit_w, hbm_bandwidth_tb_per_s, host_memory_gib_per_node, tiers reaching
    all its GPUs); messages name `field` (`cluster`, `cluster.pools[k]`)."""
    where = str(path) if path else "<plan>"
    assert section.gpu is not None and section.num_gpus is not None
    try:
        gpu = catalog.get_gpu(section.gpu)
    except InputError as e:
        raise InputError(f"{where}: {field}.gpu: {e}") from None
    if section.tiers is not None:
        try:
            check_tiers(section.tiers, section.num_gpus)
        except ValueError as e:
            raise InputError(f"{where}: {field}.tiers: {e}{unreachable}") from None
    per_node = section.gpus_per_node or gpu.gpus_per_node
    data = {
        "gpu": gpu,
        "num_gpus": section.num_gpus,
        "gpus_per_node": per_node,
        "memory_gib": section.memory_gib or gpu.memory_gib,
        "power_limit_w": section.power_limit_w,
        "hbm_bandwidth_tb_per_s": section.hbm_bandwidth_tb_per_s,
        "tiers": section.tiers or node_tiers(gpu.tiers, gpu.gpus_per_node, per_node),
        "host_memory_gib_per_node": section.host_memory_gib_per_node,
        "gpus_per_domain_used": section.gpus_per_domain_used,
    }
    return validate(ClusterSpec, data, path, prefix=field)


def above_catalog(section: ClusterSection) -> list[tuple[str, str]]:
    """(field, warning) for each `memory_gib` override above its catalog GPU's memory: allowed,
    for a variant with more (an HBM2e H100 of 94 GB), but every verdict then holds for that
    memory, which the catalog's GPU does not have; so the user sees what the fit rests on."""
    named: list[tuple[str, ClusterSection | PoolSection]] = []
    named += [("cluster", section)] if section.pools is None else []
    named += [(f"cluster.pools[{k}]", pool) for k, pool in enumerate(section.pools or ())]
    out = []
    for field, one in named:
        if one.memory_gib is None or one.gpu is None:
            continue
        gpu = catalog.get_gpu(one.gpu)  # resolved already: the name is the catalog's
        if one.memory_gib > gpu.memory_gib:
            out.append(
                (
                    f"{field}.memory_gib",
                    f"memory_gib = {one.memory_gib:g} is above {gpu.name}'s "
                    f"{gpu.memory_gib:.1f} GiB: the verdict holds for a GPU with that much "
                    "memory (a larger variant), not for the catalog's",
                )
            )
    return out


def node_tiers(
    tiers: tuple[LinkTier, ...], catalog_node: int, per_node: int
) -> tuple[LinkTier, ...]:
    """The catalog's tiers on nodes of `per_node` GPUs: a scale-up domain that is the catalog's
    node (an HGX board's NVLink: span = its gpus_per_node) ends at a smaller node's edge, since
    NVLink does not leave the node there; a domain wider than the node (GB200's NVL72 rack
    across trays of 4) or a full mesh (AMD's xGMI: its bandwidth is a link per peer) is kept, as
    are the tiers of a larger node, whose GPUs beyond the board meet on the next tier."""
    inner = tiers[0]
    if per_node >= catalog_node or inner.mesh or inner.span_gpus != catalog_node:
        return tiers
    narrowed = (inner.model_copy(update={"span_gpus": per_node}), *tiers[1:])
    try:
        check_tiers(narrowed)
    except ValueError:
        return tiers  # the next tier's span is no multiple of the node: kept as the catalog's
    return narrowed


def resolve_pool(section: PoolSection, k: int, path: Path | None) -> Pool:
    """One pool: its catalog GPU with the pool's overrides, its tiers reaching all its GPUs."""
    unreachable = f" (pool {section.name!r} unreachable)"
    cluster = one_kind(section, path, f"cluster.pools[{k}]", unreachable)
    return Pool(
        name=section.name, cluster=cluster, price_usd_per_gpu_hour=section.price_usd_per_gpu_hour
    )


def resolve_pools(
    section: ClusterSection, path: Path | None, arch: ModelArch, precision: str
) -> tuple[ClusterSpec, tuple[Pool, ...], LinkTier]:
    """(the whole job's cluster, its pools in pipeline order, the link between them); exit 2
    when a pool lacks FP8 for an FP8 job or no layout can pipeline over the pools."""
    where = str(path) if path else "<plan>"
    assert section.pools is not None
    for name in ("gpu", "num_gpus"):
        if getattr(section, name) is not None:
            raise InputError(
                f"{where}: cluster.{name}: give either pools or one GPU kind "
                f"(got {spelled(getattr(section, name))} with {len(section.pools)} pools)"
            )
    names: set[str] = set()
    for k, p in enumerate(section.pools):
        if p.name in names:
            raise InputError(f"{where}: cluster.pools[{k}].name: {p.name!r} is given twice")
        if not p.name.isprintable():  # the launch files put it on comment lines
            raise InputError(
                f"{where}: cluster.pools[{k}].name: {p.name!r}: no line breaks or control "
                "characters"
            )
        names.add(p.name)
    pools = tuple(resolve_pool(p, k, path) for k, p in enumerate(section.pools))
    first_vendor = pools[0].cluster.gpu.vendor
    k = next((k for k, p in enumerate(pools) if p.cluster.gpu.vendor != first_vendor), 0)
    if k:
        raise InputError(
            f"{where}: cluster.pools[{k}].gpu: {pools[k].cluster.gpu.name} beside "
            f"{pools[0].cluster.gpu.name}: one torch.distributed job runs on one vendor's GPUs "
            "(NCCL and RCCL do not join one process group)"
        )
    for k, pool in enumerate(pools):
        missing = pool.cluster.gpu.missing_cores(precision)
        if missing:
            raise InputError(
                f'{where}: cluster.pools[{k}].gpu: training.precision "{precision}" but {missing}'
            )
    check_pools_can_pipeline(pools, arch.num_layers, path)
    between = _between(section, pools)
    first = pools[0].cluster
    total = sum(p.cluster.num_gpus for p in pools)
    cluster = first.model_copy(update={"num_gpus": total})
    return cluster, pools, between


def _between(section: ClusterSection, pools: tuple[Pool, ...]) -> LinkTier:
    """`between_pools`, or the slowest of the pools' outermost tiers."""
    b = section.between_pools
    if b is not None:
        return LinkTier(
            name=BETWEEN,
            bandwidth_gb_per_s_per_gpu=b.bandwidth_gb_per_s_per_gpu,
            latency_us=b.latency_us,
        )
    slowest = min((p.cluster.tiers[-1] for p in pools), key=lambda t: t.bandwidth_gb_per_s_per_gpu)
    return slowest.model_copy(update={"name": BETWEEN, "span_gpus": None})


def stage_gpus_bound(pools: tuple[Pool, ...]) -> int:
    """The most GPUs one pipeline stage can hold: every pool holds whole stages of one size."""
    return math.gcd(*(p.cluster.num_gpus for p in pools))


def check_pools_can_pipeline(pools: tuple[Pool, ...], num_layers: int, path: Path | None) -> None:
    """Exit 2 when no layout exists: stages of at most GCD(pool sizes) GPUs need more pipeline
    stages than the model has decoder layers. The smallest pool is the one named."""
    if len(pools) < 2:
        return
    total = sum(p.cluster.num_gpus for p in pools)
    size = stage_gpus_bound(pools)
    if total // size > num_layers:
        k, small = min(enumerate(pools), key=lambda kp: kp[1].cluster.num_gpus)
        where = str(path) if path else "<plan>"
        raise InputError(
            f"{where}: cluster.pools[{k}].num_gpus: {small.cluster.num_gpus} GPUs in pool "
            f"{small.name!r} is too small for one pipeline stage of any layout: stages hold the "
            f"same GPUs in every pool (at most GCD of the pool sizes = {size}), so the "
            f"{total} GPUs need {total // size} stages but the model has {num_layers} layers"
        )
